-- The replies of calls made with an idempotency key, written in the call's own commit. The key
-- is stored as bytes: any string is a key, including one holding NUL. Expired replies are
-- swept by expiry time, through the expiry index.
CREATE TABLE {prefix}durable_idempotency (
    object_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    idempotency_key BLOB NOT NULL,
    fingerprint BLOB NOT NULL,
    reply BLOB NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (object_type, object_id, idempotency_key)
);
CREATE INDEX {index_prefix}durable_idempotency_expiry ON {prefix}durable_idempotency (expires_at);
