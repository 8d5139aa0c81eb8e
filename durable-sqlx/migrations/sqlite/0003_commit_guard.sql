-- The commit guard: a table that is always empty. A batch is committed by one multi-statement
-- query; after each statement that checks versions, the query inserts a row here only if fewer
-- rows changed than writes were checked. The CHECK then fails that insert, which stops the query
-- before its COMMIT, so a batch with a stale write is rolled back whole, in the same round trip.
CREATE TABLE {prefix}durable_commit_guard (
    mismatch INTEGER NOT NULL CONSTRAINT durable_version_mismatch CHECK (mismatch = 0)
);
