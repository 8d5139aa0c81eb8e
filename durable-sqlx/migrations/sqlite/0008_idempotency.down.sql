-- Dropping the table drops its expiry index.
DROP TABLE {prefix}durable_idempotency;
