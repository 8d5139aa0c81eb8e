-- Raised by a batch written as one statement when fewer rows changed than it wrote. The error
-- aborts the statement, so none of the batch is applied. (Plain SQL cannot raise an error; the
-- function gives this one a name of its own.)
CREATE FUNCTION {prefix}durable_version_mismatch() RETURNS integer
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'durable_version_mismatch: a write''s expected version does not match the stored one';
END
$$;
