-- 0002: the kill switch. One row per frozen tool or tool class of a tenant;
-- every replica reloads the whole (small) table every few seconds, and the
-- primary key's "C" collation gives ListFreezes the byte order the other
-- stores use.

CREATE TABLE freezes (
    tenant text COLLATE "C" NOT NULL,
    target text COLLATE "C" NOT NULL,
    actor  text NOT NULL,
    note   text NOT NULL,
    at     timestamptz NOT NULL,
    PRIMARY KEY (tenant, target)
);
