-- Tombstones: deleting an object keeps its row with a NULL state and its version advanced by
-- one, so that a recreated object continues above every version the key ever had and a writer
-- still holding a version of the deleted object gets a conflict. Listing skips tombstones.
ALTER TABLE {prefix}durable_objects ALTER COLUMN state DROP NOT NULL;
