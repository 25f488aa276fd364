-- Tenure: the lease tables.
--
-- `{{prefix}}` is replaced by the table prefix (default `tenure_`), a validated identifier part
-- ([a-z_][a-z0-9_]*). `tenure_postgres::ddl(prefix)` prints this file and the next ones with
-- the prefix substituted; `SchemaMode::Ensure` runs exactly that. Every statement is idempotent.
--
-- Privileges the application role needs (see docs/postgres.md):
--   {{prefix}}leases            SELECT, INSERT, UPDATE   (never DELETE: a lease record and its
--                                                         fencing token are never removed)
--   {{prefix}}lease_contenders  SELECT, INSERT, UPDATE, DELETE
--   the functions below         EXECUTE (granted to PUBLIC by default)

-- No CHECK constraints: PostgreSQL prepares a table's CHECK expressions anew for every statement
-- that writes it, which cost about 60 us of server CPU per lease call (measured), more than the
-- rest of a renewal. The functions below are the only writers, and never write a token or a ttl
-- that is not positive; the adapter refuses to read one (`Corrupt`). fillfactor 50 leaves room
-- on each page so that every update of a row is a HOT update (no index write).

-- One row per lease: its holder (or last holder), the fencing token of the current (or last)
-- tenure, the storage-clock instants of its acquisition and last heartbeat, and of its release
-- (`released_at`: set by a release that ended the tenure, cleared by the next acquisition, so
-- that an operator can tell a released lease from an expired one).
--
-- `has_contenders` is bookkeeping, not part of the lease: it is false only when the lease is
-- known to have no row in `{{prefix}}lease_contenders`, so that a holder's renewal, the common
-- call, need not read that table at all. Only a standing-by contender adds a row, and it sets the
-- flag in the same transaction; a call that reads the registrations and finds no live one but
-- the caller's clears it. `true` is always safe (it only sends the next renewal the long way).
CREATE TABLE IF NOT EXISTS {{prefix}}leases (
    lease_name     text COLLATE "C" NOT NULL,
    owner          text COLLATE "C" NOT NULL,
    priority       bigint           NOT NULL,
    fencing_token  bigint           NOT NULL,
    acquired_at    timestamptz      NOT NULL,
    heartbeat_at   timestamptz      NOT NULL,
    ttl_micros     bigint           NOT NULL,
    has_contenders boolean          NOT NULL DEFAULT true,
    released_at    timestamptz,
    CONSTRAINT {{prefix}}leases_pkey PRIMARY KEY (lease_name)
) WITH (fillfactor = 50);
-- `released_at` came after the table's first version: add it to a table that lacks it. Looked up
-- first, because ALTER TABLE locks the table even when there is nothing to do; a nullable column
-- without a default rewrites nothing.
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '{{prefix}}leases'::regclass
                      AND attname = 'released_at' AND NOT attisdropped) THEN
        ALTER TABLE {{prefix}}leases ADD COLUMN released_at timestamptz;
    END IF;
END
$do$;

-- One row per (lease, contender): every request registers or refreshes its owner's row, a
-- release withdraws it, and rows that are no longer live are pruned by the next request.
CREATE TABLE IF NOT EXISTS {{prefix}}lease_contenders (
    lease_name    text COLLATE "C" NOT NULL,
    owner         text COLLATE "C" NOT NULL,
    priority      bigint           NOT NULL,
    last_seen     timestamptz      NOT NULL,
    ttl_micros    bigint           NOT NULL,
    CONSTRAINT {{prefix}}lease_contenders_pkey PRIMARY KEY (lease_name, owner)
) WITH (fillfactor = 50);
