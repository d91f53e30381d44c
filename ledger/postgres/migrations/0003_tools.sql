-- 0003: the tool registry. One row per registered tool of a tenant; doc is
-- the whole ledger.Tool, versioned ({"v":1,"tool":{...}}). Every replica
-- reloads the (small) table every few seconds, and the primary key's "C"
-- collation gives ListTools the byte order the other stores use.

CREATE TABLE tools (
    tenant  text COLLATE "C" NOT NULL,
    name    text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    doc     jsonb NOT NULL,
    PRIMARY KEY (tenant, name)
);
