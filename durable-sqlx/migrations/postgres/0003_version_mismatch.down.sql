-- Reverts 0003: drops the function that stops a batch on a version mismatch.
DROP FUNCTION {prefix}durable_version_mismatch();
