-- Tenure: a fence for the caller's own transaction, for downstreams in PostgreSQL.
--
-- A downstream that applies a leader's effects in PostgreSQL calls {{prefix}}fence_v1(resource,
-- token) inside the transaction that writes the effect. The call keeps, per resource, the
-- highest fencing token accepted so far: a token at or above it is accepted (and becomes the
-- resource's token), a lower one raises SQLSTATE 'TF001' and so aborts the caller's
-- transaction, effect and all. The row stays locked until the caller's transaction ends, so two
-- tenures' transactions on one resource are decided one after the other, in the order they
-- reach the row; the fence and the effect commit or roll back together.
--
-- The storage itself never calls it; the role of the application's transactions needs:
--   {{prefix}}fences     SELECT, INSERT, UPDATE
--   {{prefix}}fence_v1   EXECUTE (granted to PUBLIC by default)

-- One row per resource: the highest token accepted for it, and when (database clock).
CREATE TABLE IF NOT EXISTS {{prefix}}fences (
    resource       text COLLATE "C" NOT NULL,
    fencing_token  bigint           NOT NULL,
    accepted_at    timestamptz      NOT NULL,
    CONSTRAINT {{prefix}}fences_pkey PRIMARY KEY (resource)
);

CREATE OR REPLACE FUNCTION {{prefix}}fence_v1(
    p_resource  text,
    p_token     bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $fn$
DECLARE
    v_current bigint;
BEGIN
    IF p_token IS NULL OR p_token < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('invalid fencing token %s for resource %L: tokens start at 1',
                             p_token, p_resource);
    END IF;
    INSERT INTO {{prefix}}fences AS f (resource, fencing_token, accepted_at)
    VALUES (p_resource, p_token, clock_timestamp())
    ON CONFLICT (resource) DO UPDATE
       SET fencing_token = excluded.fencing_token, accepted_at = excluded.accepted_at
     WHERE f.fencing_token <= excluded.fencing_token
    RETURNING f.fencing_token INTO v_current;
    IF FOUND THEN
        RETURN v_current;
    END IF;
    -- Refused: the row is locked by the upsert's attempt, so this reads the token that beat it.
    SELECT f.fencing_token INTO v_current FROM {{prefix}}fences f WHERE f.resource = p_resource;
    RAISE EXCEPTION USING ERRCODE = 'TF001',
        MESSAGE = format('stale fencing token %s for resource %L: token %s was already accepted',
                         p_token, p_resource, v_current),
        DETAIL = v_current::text;
END
$fn$;
