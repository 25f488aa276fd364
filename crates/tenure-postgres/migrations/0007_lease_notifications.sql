-- Tenure: wake-ups, LISTEN/NOTIFY on the lease tables (issue 15).
--
-- A storage with notifications on keeps one session connection that LISTENs on the channel
-- `{{prefix}}lease_changes` and wakes its electors: a standby requests at once when the lease
-- it waits for is released, a holder renews at once when a higher-priority contender
-- registers. The poll stays the correctness path: a lost notification costs at most one poll
-- interval, never safety (docs/postgres.md, "Wake-ups").
--
-- The notifications come from triggers, not from the lease functions, so that the functions
-- (and their renewal path) are exactly as they were, and processes of any release, calling
-- any version of the functions, notify alike. The payload is `<kind>:<lease name>`, kind one
-- of `released`, `acquired`, `step_down_requested` (a lease name may hold ':', a kind never
-- does). Only state changes notify: a transaction that notifies takes a cluster-wide lock at
-- commit, so a plain renewal (same token, heartbeat moved) must not, and does not even call a
-- trigger function: the renewal's UPDATE sets priority, heartbeat_at and ttl_micros only, and
-- the update triggers fire only for `UPDATE OF fencing_token, released_at` (leases) or are
-- filtered out by their WHEN clause (contenders) before any function runs.
--
-- The triggers are created only when missing (a CREATE TRIGGER takes a lock on the table that
-- blocks lease calls); a trigger whose behaviour changes gets a new name, as a function gets a
-- new version. Creating them needs the TRIGGER privilege on the tables (or their ownership);
-- using them needs nothing (pg_notify needs no privilege).

-- `acquired` on a new tenure (a new record, or a new token), `released` on a release (its
-- instant set by release_lease_v1).
CREATE OR REPLACE FUNCTION {{prefix}}notify_lease_v1()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
AS $fn$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.fencing_token IS DISTINCT FROM OLD.fencing_token THEN
        PERFORM pg_notify('{{prefix}}lease_changes', 'acquired:' || NEW.lease_name);
    ELSIF NEW.released_at IS NOT NULL AND NEW.released_at IS DISTINCT FROM OLD.released_at THEN
        PERFORM pg_notify('{{prefix}}lease_changes', 'released:' || NEW.lease_name);
    END IF;
    RETURN NULL;
END
$fn$;

-- `step_down_requested` when a contender registers (or raises or changes its priority, or
-- comes back after its registration lapsed) with a priority above the holder's: the holder's
-- next renewal is answered LeaderStepDownRequested. A standby refreshing its registration as
-- it was (same priority, still live) is filtered out by the trigger's WHEN clause.
CREATE OR REPLACE FUNCTION {{prefix}}notify_contender_v1()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM {{prefix}}leases l
                WHERE l.lease_name = NEW.lease_name
                  AND l.owner <> NEW.owner
                  AND l.priority < NEW.priority) THEN
        PERFORM pg_notify('{{prefix}}lease_changes', 'step_down_requested:' || NEW.lease_name);
    END IF;
    RETURN NULL;
END
$fn$;

DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = '{{prefix}}leases'::regclass
                      AND tgname = '{{prefix}}leases_created') THEN
        CREATE TRIGGER {{prefix}}leases_created
            AFTER INSERT ON {{prefix}}leases
            FOR EACH ROW EXECUTE FUNCTION {{prefix}}notify_lease_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = '{{prefix}}leases'::regclass
                      AND tgname = '{{prefix}}leases_changed') THEN
        CREATE TRIGGER {{prefix}}leases_changed
            AFTER UPDATE OF fencing_token, released_at ON {{prefix}}leases
            FOR EACH ROW
            WHEN (NEW.fencing_token IS DISTINCT FROM OLD.fencing_token
                  OR (NEW.released_at IS NOT NULL
                      AND NEW.released_at IS DISTINCT FROM OLD.released_at))
            EXECUTE FUNCTION {{prefix}}notify_lease_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = '{{prefix}}lease_contenders'::regclass
                      AND tgname = '{{prefix}}contenders_joined') THEN
        CREATE TRIGGER {{prefix}}contenders_joined
            AFTER INSERT ON {{prefix}}lease_contenders
            FOR EACH ROW EXECUTE FUNCTION {{prefix}}notify_contender_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = '{{prefix}}lease_contenders'::regclass
                      AND tgname = '{{prefix}}contenders_changed') THEN
        CREATE TRIGGER {{prefix}}contenders_changed
            AFTER UPDATE OF priority, last_seen ON {{prefix}}lease_contenders
            FOR EACH ROW
            WHEN (NEW.priority <> OLD.priority
                  OR OLD.last_seen + OLD.ttl_micros * interval '1 microsecond' <= NEW.last_seen)
            EXECUTE FUNCTION {{prefix}}notify_contender_v1();
    END IF;
END
$do$;
