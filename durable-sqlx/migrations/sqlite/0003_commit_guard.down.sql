-- Reverts 0003: drops the commit guard (always empty).
DROP TABLE {prefix}durable_commit_guard;
