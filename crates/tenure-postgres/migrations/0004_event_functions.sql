-- Tenure: an append, one function call in the caller's (autocommit) transaction.
--
-- Two kinds of lock, both advisory, both in the two-int key space (pg_advisory_*(int4, int4)),
-- which PostgreSQL keeps apart from the bigint key space of the lease functions
-- (pg_advisory_xact_lock(hashtextextended('{{prefix}}leases:' || name, 0))): no key of one can
-- ever be a key of the other, so appends and lease calls never wait for each other.
--
--   (hashtext('{{prefix}}events'), 1), transaction-scoped: every append takes it, an
--       unconditional one SHARED (they do not wait for each other), a conditional one EXCLUSIVE.
--       A conditional append thus waits until every append in flight has committed, keeps new
--       ones out until it commits, and checks its condition, in a statement of its own taken
--       after the lock (READ COMMITTED: a fresh snapshot, which sees every append committed
--       before the lock), with no barrier: nothing can commit between its check and its own
--       commit. Two conflicting appends cannot both succeed, and no append, conditional or not,
--       can slip an event before a conditional append's events after its check. The price:
--       conditional appends of one prefix run one at a time, each for one short transaction
--       (its commit included), and unconditional appends pause while one runs.
--
--   (hashtext('{{prefix}}events'), 2), session-scoped, held for two statements: the
--       transaction id is assigned (pg_current_xact_id()) and the positions are drawn under it.
--       So positions increase with transaction ids: an append with an older transaction id has
--       smaller positions. That is what makes the readers' barrier sound. A reader returns only
--       events whose transaction_id is below pg_snapshot_xmin of its snapshot, that is, written
--       by transactions that had all finished when it read. Any event that commits later belongs
--       to a younger transaction, so its position is above every position the reader returned:
--       reading on from the last position never skips it. (Had the positions been drawn outside
--       the lock, an older transaction could draw a larger position than a younger one that
--       commits later, and a reader could return the larger one first.) The lock is released by
--       hand at once, also on error (the exception block), and by PostgreSQL if the session
--       ends. A block of positions is drawn with one nextval and one setval, so the positions
--       of one append are consecutive.
--
-- Two prefixes whose hashtext collide share these locks: their appends are serialized a little
-- more, nothing else.
--
-- The idempotency key is checked first (a key already stored replays its batch, whatever the
-- request says), again after a conditional append's lock, and enforced by the primary key of
-- event_keys: a concurrent append with the same key waits for the first to commit and fails
-- with unique_violation, and the adapter calls the function again, which then replays.
--
-- Outcomes, as rows of (o_outcome, o_position, o_event_id, o_recorded_at, o_stream,
-- o_event_type, o_payload, o_tags):
--   'appended'  one row per event, in order, with its position, id and instant (the rest NULL:
--               the caller has them);
--   'replayed'  one row per event stored under the key the first time, every column set;
--   'conflict'  one row: o_position is the first event after p_c_after matching the condition.
--
-- p_tags carries each event's tags, sorted and deduplicated, joined by U+001F (a control
-- character, which no valid tag contains). p_c_after is 0 when the condition saw no event.

CREATE OR REPLACE FUNCTION {{prefix}}append_events_v1(
    p_streams     text[],
    p_types       text[],
    p_payloads    jsonb[],
    p_tags        text[],
    p_key         text,
    p_conditional boolean,
    p_c_streams   text[],
    p_c_types     text[],
    p_c_tags      text[],
    p_c_after     bigint)
RETURNS TABLE (
    o_outcome     text,
    o_position    bigint,
    o_event_id    uuid,
    o_recorded_at timestamptz,
    o_stream      text,
    o_event_type  text,
    o_payload     jsonb,
    o_tags        text[])
LANGUAGE plpgsql
VOLATILE
AS $fn$
DECLARE
    v_key      integer := hashtext('{{prefix}}events');
    v_count    bigint := cardinality(p_streams);
    v_locked   boolean;
    v_xid      xid8;
    v_first    bigint;
    v_now      timestamptz;
    v_conflict bigint;
BEGIN
    IF v_count IS NULL OR v_count = 0 THEN
        RAISE EXCEPTION 'append_events_v1: no events' USING ERRCODE = '22023';
    END IF;

    -- A key already stored: replay, before any lock.
    IF p_key IS NOT NULL THEN
        RETURN QUERY
            SELECT 'replayed'::text, e.position, e.event_id, e.recorded_at, e.stream::text,
                   e.event_type::text, e.payload, e.tags::text[]
              FROM {{prefix}}event_keys k
              JOIN {{prefix}}events e
                ON e.position BETWEEN k.first_position AND k.last_position
             WHERE k.idempotency_key = p_key
             ORDER BY e.position;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;

    IF p_conditional THEN
        v_locked := pg_advisory_xact_lock(v_key, 1) IS NULL;
        -- Every statement from here on has a snapshot taken after the lock.
        IF p_key IS NOT NULL THEN
            RETURN QUERY
                SELECT 'replayed'::text, e.position, e.event_id, e.recorded_at, e.stream::text,
                       e.event_type::text, e.payload, e.tags::text[]
                  FROM {{prefix}}event_keys k
                  JOIN {{prefix}}events e
                    ON e.position BETWEEN k.first_position AND k.last_position
                 WHERE k.idempotency_key = p_key
                 ORDER BY e.position;
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        -- The condition, without the readers' barrier: every committed event counts.
        -- min(), not ORDER BY position LIMIT 1: with a LIMIT the planner bets on an early
        -- match and walks the primary key through every event after p_c_after, the whole log
        -- when nothing matches, which is the usual answer. One statement per leading filter:
        -- the stream and type indexes answer min(position) with one probe; for tags,
        -- `position + 0` keeps the primary key's order out of it, so that the GIN index leads.
        -- (Static statements: their plans are cached; planning each call would cost more than
        -- the check, inside the lock.)
        IF cardinality(p_c_streams) > 0 THEN
            SELECT min(e.position) INTO v_conflict
              FROM {{prefix}}events e
             WHERE e.stream = ANY (p_c_streams)
               AND e.position > p_c_after
               AND (cardinality(p_c_types) = 0 OR e.event_type = ANY (p_c_types))
               AND e.tags @> p_c_tags;
        ELSIF cardinality(p_c_tags) > 0 THEN
            SELECT min(e.position + 0) INTO v_conflict
              FROM {{prefix}}events e
             WHERE e.tags @> p_c_tags
               AND e.position > p_c_after
               AND (cardinality(p_c_types) = 0 OR e.event_type = ANY (p_c_types));
        ELSIF cardinality(p_c_types) > 0 THEN
            SELECT min(e.position) INTO v_conflict
              FROM {{prefix}}events e
             WHERE e.event_type = ANY (p_c_types)
               AND e.position > p_c_after;
        ELSE
            SELECT min(e.position) INTO v_conflict
              FROM {{prefix}}events e
             WHERE e.position > p_c_after;
        END IF;
        IF v_conflict IS NOT NULL THEN
            RETURN QUERY
                SELECT 'conflict'::text, v_conflict, NULL::uuid, NULL::timestamptz, NULL::text,
                       NULL::text, NULL::jsonb, NULL::text[];
            RETURN;
        END IF;
    ELSE
        v_locked := pg_advisory_xact_lock_shared(v_key, 1) IS NULL;
    END IF;

    -- The transaction id, then the positions, under the session lock (see above).
    v_locked := pg_advisory_lock(v_key, 2) IS NULL;
    BEGIN
        v_xid := pg_current_xact_id();
        v_first := nextval('{{prefix}}events_position_seq');
        IF v_count > 1 THEN
            v_locked := setval('{{prefix}}events_position_seq', v_first + v_count - 1) IS NULL;
        END IF;
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        v_locked := pg_advisory_unlock(v_key, 2);
        RAISE;
    END;
    v_locked := pg_advisory_unlock(v_key, 2);

    v_now := clock_timestamp();
    IF p_key IS NOT NULL THEN
        INSERT INTO {{prefix}}event_keys (idempotency_key, first_position, last_position)
        VALUES (p_key, v_first, v_first + v_count - 1);
    END IF;
    RETURN QUERY
        WITH inserted AS (
            INSERT INTO {{prefix}}events
                   (position, stream, event_type, payload, tags, recorded_at, transaction_id)
            OVERRIDING SYSTEM VALUE
            SELECT v_first + e.n - 1, e.stream, e.event_type, e.payload,
                   string_to_array(e.tags, E'\x1f'), v_now, v_xid
              FROM unnest(p_streams, p_types, p_payloads, p_tags)
                   WITH ORDINALITY AS e(stream, event_type, payload, tags, n)
            RETURNING position, event_id)
        SELECT 'appended'::text, i.position, i.event_id, v_now, NULL::text, NULL::text,
               NULL::jsonb, NULL::text[]
          FROM inserted i
         ORDER BY i.position;
END
$fn$;
