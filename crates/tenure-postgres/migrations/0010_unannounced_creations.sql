-- Tenure: a lease's first tenure is not announced (issue 13).
--
-- 0007 announces `acquired` on every new tenure, a new record included. A transaction that
-- notifies takes a cluster-wide lock at commit and holds it through the commit's flush, so
-- notifying commits are serialized, one flush after another. A new record is the first
-- tenure of a lease nobody could have been waiting for (a registration needs a record), and
-- `acquired` wakes no elector (it is informational: `LeaseChangeKind::Acquired`); but a cold
-- start (a deploy, a database restart) creates thousands of leases within a second, and
-- their announcements queued every other lease call behind that lock for seconds
-- (docs/benchmarks.md, "Overload"). The trigger `leases_created` now fires only for a record
-- created with a token above 1, which no release creates: the first tenure of a lease is not
-- announced; every later one is, by `leases_changed`, as before.
--
-- Versioning: this trigger keeps its name, against the rule that a trigger whose behaviour
-- changes gets a new name, so that processes of the previous release keep working during a
-- rolling upgrade: their `Validate` requires a trigger of that name to exist and be enabled,
-- and their `Ensure` creates it only when missing, so it leaves this one as it is. The
-- trigger is replaced once, when it has no WHEN clause (as 0007 created it).

DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger
                WHERE tgrelid = '{{prefix}}leases'::regclass
                  AND tgname = '{{prefix}}leases_created'
                  AND tgqual IS NULL) THEN
        DROP TRIGGER {{prefix}}leases_created ON {{prefix}}leases;
        CREATE TRIGGER {{prefix}}leases_created
            AFTER INSERT ON {{prefix}}leases
            FOR EACH ROW
            WHEN (NEW.fencing_token > 1)
            EXECUTE FUNCTION {{prefix}}notify_lease_v1();
    END IF;
END
$do$;
