-- 0008: the row journal (ledger.JournalTx): what touched a row without
-- changing it (a duplicate or late webhook delivery, a resolver finding,
-- the reason for a page). The flows write an entry in the transaction of
-- its action; an append keeps the row's newest ledger.MaxJournalPerRow
-- entries; retention deletes a row's entries with the row. Nothing on the
-- claim or outcome path reads or writes it.

CREATE TABLE row_journal (
    tenant text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    seq    bigserial NOT NULL,
    entry  jsonb NOT NULL,
    PRIMARY KEY (tenant, key, seq)
);

-- The console's sign-outs (ledger.Revocations): a sealed session cookie is
-- valid at every replica until it expires unless its id is here. Rows are
-- deleted once their session would have expired.
CREATE TABLE console_revocations (
    id    text COLLATE "C" PRIMARY KEY,
    until timestamptz NOT NULL
);
