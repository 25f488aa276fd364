-- Tenure: the event log, its idempotency keys, and the bookmarks.
--
-- Same prefix and schema modes as the lease tables (see 0001_lease_tables.sql). Every statement
-- is idempotent. Lease calls never touch these tables, and appends never touch the lease tables.
--
-- Privileges the application role needs (see docs/postgres.md):
--   {{prefix}}events                SELECT, INSERT           (never UPDATE or DELETE: the log is
--                                                             append-only)
--   {{prefix}}events_position_seq   USAGE, UPDATE            (nextval and setval, drawn by
--                                                             append_events_v1 only)
--   {{prefix}}event_keys            SELECT, INSERT
--   {{prefix}}bookmarks             SELECT, INSERT, UPDATE, DELETE
--   {{prefix}}append_events_v1      EXECUTE (granted to PUBLIC by default)

-- One row per event. `position` is the global position, drawn by append_events_v1 only (never by
-- a plain INSERT: see the function for why), consecutive within one append. `transaction_id` is
-- the writing transaction's id (pg_current_xact_id()): a reader returns only the events whose
-- writing transaction is older than the oldest transaction still in flight, so that it never
-- sees a position beyond an event that may still commit (the pg_snapshot_xmin barrier).
-- The text columns use the "C" collation (byte order, as Rust orders strings); the tags are
-- sorted and deduplicated by the adapter. `recorded_at` is one instant of the database clock per
-- append.
CREATE TABLE IF NOT EXISTS {{prefix}}events (
    position        bigint GENERATED ALWAYS AS IDENTITY
                           (SEQUENCE NAME {{prefix}}events_position_seq),
    event_id        uuid               NOT NULL DEFAULT gen_random_uuid(),
    stream          text COLLATE "C"   NOT NULL,
    event_type      text COLLATE "C"   NOT NULL,
    payload         jsonb              NOT NULL,
    tags            text[] COLLATE "C" NOT NULL,
    recorded_at     timestamptz        NOT NULL,
    transaction_id  xid8               NOT NULL,
    CONSTRAINT {{prefix}}events_pkey PRIMARY KEY (position)
);

-- One row per append made with an idempotency key: the key names the whole batch, whose
-- positions are consecutive. The primary key is what makes concurrent appends with one key
-- store one batch: the second waits for the first to commit, fails, and replays it.
CREATE TABLE IF NOT EXISTS {{prefix}}event_keys (
    idempotency_key text COLLATE "C" NOT NULL,
    first_position  bigint           NOT NULL,
    last_position   bigint           NOT NULL,
    CONSTRAINT {{prefix}}event_keys_pkey PRIMARY KEY (idempotency_key)
);

-- One row per reader: the position of the last event it processed (always a stored event),
-- its tags, when it was last placed (database clock), and its fence: the highest fencing token
-- a fenced write of it carried (NULL until one does). A fenced write with a lower token is
-- refused; an unfenced write leaves the fence as it is.
CREATE TABLE IF NOT EXISTS {{prefix}}bookmarks (
    reader          text COLLATE "C"   NOT NULL,
    position        bigint             NOT NULL,
    tags            text[] COLLATE "C" NOT NULL,
    placed_at       timestamptz        NOT NULL,
    fence_token     bigint,
    CONSTRAINT {{prefix}}bookmarks_pkey PRIMARY KEY (reader)
);
-- `fence_token` came after the table's first version: add it to a table that lacks it (looked
-- up first, because ALTER TABLE locks the table even when there is nothing to do; a nullable
-- column without a default rewrites nothing).
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '{{prefix}}bookmarks'::regclass
                      AND attname = 'fence_token' AND NOT attisdropped) THEN
        ALTER TABLE {{prefix}}bookmarks ADD COLUMN fence_token bigint;
    END IF;
END
$do$;

-- The query shapes: by stream and by type, in position order (a read and the condition check
-- scan them from a position on); by tags (`tags @> $1`, a GIN index). Reads of every event use
-- the primary key. Each index is created only when missing: `CREATE INDEX IF NOT EXISTS` would
-- take a SHARE lock on the events table even when the index exists, and block appends for as
-- long as the Ensure transaction lasts. The GIN index has `fastupdate` off: with it on, new
-- entries wait in a pending list that every search scans until a vacuum merges it, and a
-- condition's lookup (inside the conditional appends' exclusive lock) measured 5 ms instead of
-- 0.1 ms against a log growing at a few thousand events a second; each append pays a little
-- more to insert its tags instead.
DO $ensure_indexes$
DECLARE
    v_schema text := quote_ident(current_schema());
BEGIN
    IF to_regclass(v_schema || '.{{prefix}}events_stream_idx') IS NULL THEN
        CREATE INDEX {{prefix}}events_stream_idx ON {{prefix}}events (stream, position);
    END IF;
    IF to_regclass(v_schema || '.{{prefix}}events_type_idx') IS NULL THEN
        CREATE INDEX {{prefix}}events_type_idx ON {{prefix}}events (event_type, position);
    END IF;
    IF to_regclass(v_schema || '.{{prefix}}events_tags_idx') IS NULL THEN
        CREATE INDEX {{prefix}}events_tags_idx ON {{prefix}}events USING gin (tags)
            WITH (fastupdate = off);
    END IF;
END
$ensure_indexes$;
