-- 0003: a relay that deletes a published record only once the stream has
-- synced it (events.RelayOptions.SyncedAfter) holds the record meanwhile:
-- HoldEvents sets held and extends lease_until to the end of the hold.
-- ClaimEvents hands a held record out again only after that (its relay
-- died; the second publish is a duplicate), and a held record, being on
-- the stream already, no longer keeps later records of its row waiting.

ALTER TABLE outbox ADD COLUMN held boolean NOT NULL DEFAULT false;
