-- Tenure: request_lease_v4, renewals among standbys answered from the lease record (issue 13).
--
-- request_lease_v3 (0008) renews a lease without standbys in one UPDATE of its record, but a
-- lease with registrations (two of three calls in a three-replica deployment are a holder's
-- renewal among two standbys) also reads and sums up every registration at every renewal, to
-- find a live one that outranks the holder (rule 6) and lapsed ones to prune (rule 7). v4
-- keeps an upper bound of the registrations' priorities on the lease record,
-- `contender_priority_bound`, and decides exactly what the domain's `decide_request_sighted`
-- followed by `RequestOutcome::keeping_fresh_registration` and
-- `RequestOutcome::sparing_registrations_on_unchallenged_renewal` decides: a renewal whose
-- request's priority is at least the bound cannot be challenged by any registration, live or
-- lapsed, so it is answered `leader` from the record alone, and leaves the registrations as
-- they are (the next request that reads them prunes the lapsed ones). Every other call is
-- v3's, and also sets the bound to what remains when it reads the registrations.
--
-- The bound: when not NULL, no row of `<prefix>lease_contenders` for the lease has a priority
-- above it. Deleting a row keeps that true. A row inserted, or updated to a higher priority,
-- raises the bound in the same transaction, by a trigger, so that processes of earlier
-- releases (calling v1 to v3, which know nothing of the bound) keep it true as well; NULL
-- (every record before this migration, and every record an earlier release creates) means
-- unknown, and such a renewal reads the registrations as v3 does, then sets the bound. A
-- standby refreshing its registration at the same priority fires no trigger function (the
-- trigger's WHEN clause filters it out) and writes nothing more than in v3.
--
-- A standby's registration is also written without waiting for the flush of the log
-- (`synchronous_commit` off for that transaction alone): it is soft state, rewritten at least
-- every half ttl by a live contender, and nothing that decides who leads depends on it (a
-- takeover depends on the lease record and the caller's sighting; the lease record's writes,
-- renewals and acquisitions, still wait for the flush). A server that crashes may lose the
-- registrations written in the last moments before it, as if those standbys had requested a
-- moment earlier; they are written again at their next request. The log is one sequence, so
-- a lease call that waits for its flush also makes every registration written before it
-- durable: no record is ever durable without the registrations it was decided on.
--
-- Versioning: v1 to v3 stay as they were; processes of earlier releases keep calling them
-- during a rolling upgrade. All serialize on the same advisory lock and write the same rows.

-- The bound, nullable: adding it is a change of the catalog only (no rewrite of the table).
-- Checked first, because ALTER TABLE locks the table even when there is nothing to do.
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = '{{prefix}}leases'::regclass
                      AND attname = 'contender_priority_bound' AND NOT attisdropped) THEN
        ALTER TABLE {{prefix}}leases ADD COLUMN contender_priority_bound bigint;
    END IF;
END
$do$;

-- Raises the bound of the registration's lease to the registration's priority (a NULL bound
-- stays unknown). Runs as the caller of the lease function, which may update the lease table.
CREATE OR REPLACE FUNCTION {{prefix}}priority_bound_v1()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
AS $fn$
BEGIN
    UPDATE {{prefix}}leases
       SET contender_priority_bound = NEW.priority
     WHERE lease_name = NEW.lease_name
       AND contender_priority_bound < NEW.priority;
    RETURN NULL;
END
$fn$;

DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = '{{prefix}}lease_contenders'::regclass
                      AND tgname = '{{prefix}}priority_bound_joined') THEN
        CREATE TRIGGER {{prefix}}priority_bound_joined
            AFTER INSERT ON {{prefix}}lease_contenders
            FOR EACH ROW EXECUTE FUNCTION {{prefix}}priority_bound_v1();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                    WHERE tgrelid = '{{prefix}}lease_contenders'::regclass
                      AND tgname = '{{prefix}}priority_bound_raised') THEN
        CREATE TRIGGER {{prefix}}priority_bound_raised
            AFTER UPDATE OF priority ON {{prefix}}lease_contenders
            FOR EACH ROW
            WHEN (NEW.priority > OLD.priority)
            EXECUTE FUNCTION {{prefix}}priority_bound_v1();
    END IF;
END
$do$;

CREATE OR REPLACE FUNCTION {{prefix}}request_lease_v4(
    p_lease_name        text,
    p_owner             text,
    p_priority          bigint,
    p_ttl_micros        bigint,
    p_seen_token        bigint,
    p_seen_heartbeat    bigint,
    p_seen_for_micros   bigint,
    p_now               timestamptz DEFAULT NULL)
RETURNS {{prefix}}lease_outcome_v1
LANGUAGE plpgsql
VOLATILE
AS $fn$
DECLARE
    v_now            timestamptz;
    v_lease          record;
    v_locked         boolean;
    v_has_contenders boolean;
    v_bound          bigint;
    v_flags          integer;
    -- Over the registrations of others: the highest priority, and the highest of the live ones.
    v_top_other      bigint;
    v_top_live       bigint;
    -- What the record says of the registrations after this call.
    v_new_has        boolean;
    v_new_bound      bigint;
    -- The answer, field by field.
    o_status         text;
    o_transition     text;
    o_owner          text;
    o_priority       bigint;
    o_fencing_token  bigint;
    o_acquired_at    timestamptz;
    o_heartbeat_at   timestamptz;
    o_ttl_micros     bigint;
BEGIN
    -- The lock, then the clock: two plain assignments (cheaper than PERFORM), each its own
    -- statement, both before anything is read.
    v_locked := pg_advisory_xact_lock(hashtextextended('{{prefix}}leases:' || p_lease_name, 0))
                IS NULL;
    v_now := coalesce(p_now, clock_timestamp());

    -- Rule 3, renewal: the caller holds the live lease. The common call, in one statement that
    -- touches the lease row alone and fills in the whole answer; when the lease has no
    -- registrations (`has_contenders` is false), or none that could challenge the renewal (the
    -- request's priority is at least the bound), it is the whole call: `leader`, with the
    -- registrations spared (`sparing_registrations_on_unchallenged_renewal`).
    UPDATE {{prefix}}leases l
       SET priority = p_priority, heartbeat_at = v_now, ttl_micros = p_ttl_micros
     WHERE l.lease_name = p_lease_name
       AND l.owner = p_owner
       AND v_now < l.heartbeat_at + l.ttl_micros * interval '1 microsecond'
    RETURNING 'leader', 'renewed', l.owner, l.priority, l.fencing_token, l.acquired_at,
              l.heartbeat_at, l.ttl_micros, l.has_contenders, l.contender_priority_bound
         INTO o_status, o_transition, o_owner, o_priority, o_fencing_token, o_acquired_at,
              o_heartbeat_at, o_ttl_micros, v_has_contenders, v_bound;
    IF FOUND AND (NOT v_has_contenders OR v_bound <= p_priority) THEN
        RETURN ROW(o_status, o_transition, o_owner, o_priority, o_fencing_token, o_acquired_at,
                   o_heartbeat_at, o_ttl_micros)::{{prefix}}lease_outcome_v1;
    END IF;

    v_flags := 0;
    IF NOT FOUND THEN
        -- Every other case: no record, someone else's live lease, or an expired one.
        SELECT l.owner, l.priority, l.fencing_token, l.acquired_at, l.heartbeat_at, l.ttl_micros,
               l.has_contenders, l.released_at, l.contender_priority_bound
          INTO v_lease
          FROM {{prefix}}leases l
         WHERE l.lease_name = p_lease_name;
        IF NOT FOUND THEN
            -- Rule 2: no record yet.
            o_transition := 'created';
            o_fencing_token := 1;
            v_has_contenders := true; -- nothing to go by: look
        ELSE
            v_has_contenders := v_lease.has_contenders;
            v_bound := v_lease.contender_priority_bound;
            IF v_now < v_lease.heartbeat_at + v_lease.ttl_micros * interval '1 microsecond' THEN
                -- Rule 4: someone else holds it (the caller's own live lease was renewed above).
                o_transition := 'standby';
            ELSE
                -- Rule 3, second half (the last holder comes back) or rule 5 (takeover).
                IF v_lease.owner = p_owner THEN
                    o_transition := 'reacquired';
                ELSIF v_lease.released_at IS NOT NULL
                      OR (p_seen_token = v_lease.fencing_token
                          AND p_seen_heartbeat
                              = extract(epoch FROM v_lease.heartbeat_at) * 1000000
                          AND p_seen_for_micros >= v_lease.ttl_micros) THEN
                    -- Rule 5: released, or seen by the caller, on its own monotonic clock, to
                    -- have stayed this very tenure and heartbeat for a whole ttl.
                    o_transition := 'taken_over';
                ELSE
                    -- Rule 5, not yet: expired on this server's clock only (which may have
                    -- stepped). The record is not touched; the caller stands by.
                    o_transition := 'standby';
                END IF;
                IF o_transition <> 'standby' THEN
                    IF v_lease.fencing_token >= 9223372036854775807 THEN
                        RAISE EXCEPTION 'fencing tokens of lease % are exhausted', p_lease_name
                            USING ERRCODE = 'TN001';
                    END IF;
                    o_fencing_token := v_lease.fencing_token + 1;
                END IF;
            END IF;
        END IF;
    END IF;

    -- The registrations, as they were before this call, summed up as bits (`flags`):
    --   1  another contender, live, with a priority above p_priority (rule 6: a holder is the
    --      caller with the caller's priority, so "a live contender other than the holder with
    --      a strictly higher priority than the holder's" is exactly this);
    --   2  another contender that is no longer live (rule 7: to prune);
    --   4  a row of the caller's own (to remove when the caller holds the lease: the holder's
    --      registration is the lease record itself, with its priority, ttl, and heartbeat as
    --      last_seen, which is exactly what its last request registered);
    --   8  another contender, live (whatever its priority: it keeps `has_contenders` true);
    --  16  with 4: the caller's row is fresh, with p_priority and p_ttl_micros, and younger
    --      than half its ttl (`tenure_domain::Contender::is_fresh_at`): a standby keeps it.
    --  32  with 4: the caller's row has p_priority (a refresh need not name the priority, so
    --      that the bound's trigger on `UPDATE OF priority` is not even considered).
    -- A row of the caller's exists only while `has_contenders` is true (every writer keeps
    -- that so), so without the flag there is nothing to keep.
    IF v_has_contenders THEN
        SELECT coalesce(bit_or(
                 CASE WHEN c.owner = p_owner
                           AND c.priority = p_priority
                           AND c.ttl_micros = p_ttl_micros
                           AND c.last_seen <= v_now
                           AND 2 * (v_now - c.last_seen) < c.ttl_micros * interval '1 microsecond'
                      THEN 52
                      WHEN c.owner = p_owner AND c.priority = p_priority THEN 36
                      WHEN c.owner = p_owner THEN 4
                      WHEN c.last_seen + c.ttl_micros * interval '1 microsecond' <= v_now THEN 2
                      WHEN c.priority > p_priority THEN 9
                      ELSE 8 END), 0),
               max(c.priority) FILTER (WHERE c.owner <> p_owner),
               max(c.priority) FILTER (
                   WHERE c.owner <> p_owner
                     AND v_now < c.last_seen + c.ttl_micros * interval '1 microsecond')
          INTO v_flags, v_top_other, v_top_live
          FROM {{prefix}}lease_contenders c
         WHERE c.lease_name = p_lease_name;
    END IF;

    IF o_transition = 'standby' THEN
        -- Rule 1 for a contender that stands by: its row (and the flag that says rows exist),
        -- then rule 7; unless its registration is fresh and says what this request says
        -- (bit 16): then nothing is written (no write, no flush of the log), nothing pruned.
        IF v_flags & 16 = 0 THEN
            -- A registration is soft state (see the header): its write need not wait for the
            -- flush of the log.
            PERFORM set_config('synchronous_commit', 'off', true);
            IF v_flags & 32 <> 0 THEN
                -- The caller's row, at its priority: refreshed in place (one index scan, where
                -- the upsert below first tries an insertion).
                UPDATE {{prefix}}lease_contenders c
                   SET last_seen = v_now, ttl_micros = p_ttl_micros
                 WHERE c.lease_name = p_lease_name
                   AND c.owner = p_owner;
            ELSE
                INSERT INTO {{prefix}}lease_contenders AS c
                       (lease_name, owner, priority, last_seen, ttl_micros)
                VALUES (p_lease_name, p_owner, p_priority, v_now, p_ttl_micros)
                ON CONFLICT (lease_name, owner) DO UPDATE
                   SET priority = excluded.priority,
                       last_seen = excluded.last_seen,
                       ttl_micros = excluded.ttl_micros;
            END IF;
            IF NOT v_has_contenders THEN
                UPDATE {{prefix}}leases SET has_contenders = true WHERE lease_name = p_lease_name;
            END IF;
            IF v_flags & 2 <> 0 THEN
                DELETE FROM {{prefix}}lease_contenders c
                 WHERE c.lease_name = p_lease_name
                   AND c.owner <> p_owner
                   AND c.last_seen + c.ttl_micros * interval '1 microsecond' <= v_now;
            END IF;
        END IF;
        o_status := 'standby';
        o_owner := v_lease.owner;
        o_priority := v_lease.priority;
        o_fencing_token := v_lease.fencing_token;
        o_acquired_at := v_lease.acquired_at;
        o_heartbeat_at := v_lease.heartbeat_at;
        o_ttl_micros := v_lease.ttl_micros;
    ELSE
        -- The caller holds the lease. Rule 1 for the holder is the record itself, so the
        -- caller's own row, if any, goes. A renewal that no registration of another owner can
        -- challenge (none above p_priority, live or lapsed) spares them all: what is left are
        -- the rows of others, and the bound is their highest priority. Otherwise rule 7
        -- prunes: what is left are the live rows of others (bit 8), and the bound is the
        -- highest of their priorities.
        IF o_transition = 'renewed' AND (v_top_other IS NULL OR v_top_other <= p_priority) THEN
            IF v_flags & 4 <> 0 THEN
                DELETE FROM {{prefix}}lease_contenders c
                 WHERE c.lease_name = p_lease_name
                   AND c.owner = p_owner;
            END IF;
            v_new_has := v_top_other IS NOT NULL;
            v_new_bound := v_top_other;
        ELSE
            IF v_flags & 6 <> 0 THEN
                DELETE FROM {{prefix}}lease_contenders c
                 WHERE c.lease_name = p_lease_name
                   AND (c.owner = p_owner
                        OR c.last_seen + c.ttl_micros * interval '1 microsecond' <= v_now);
            END IF;
            v_new_has := v_flags & 8 <> 0;
            v_new_bound := v_top_live;
        END IF;
        IF v_flags & 1 <> 0 THEN
            o_status := 'leader_step_down_requested';
        ELSE
            o_status := 'leader';
        END IF;
        IF o_transition = 'renewed' THEN
            -- The record was written above; only the flag and the bound may have to follow.
            IF v_new_has IS DISTINCT FROM v_has_contenders
               OR v_new_bound IS DISTINCT FROM v_bound THEN
                UPDATE {{prefix}}leases
                   SET has_contenders = v_new_has, contender_priority_bound = v_new_bound
                 WHERE lease_name = p_lease_name;
            END IF;
        ELSE
            -- A new tenure.
            o_owner := p_owner;
            o_priority := p_priority;
            o_acquired_at := v_now;
            o_heartbeat_at := v_now;
            o_ttl_micros := p_ttl_micros;
            IF o_transition = 'created' THEN
                INSERT INTO {{prefix}}leases
                       (lease_name, owner, priority, fencing_token, acquired_at, heartbeat_at,
                        ttl_micros, has_contenders, contender_priority_bound)
                VALUES (p_lease_name, p_owner, p_priority, 1, v_now, v_now, p_ttl_micros,
                        v_new_has, v_new_bound);
            ELSE
                UPDATE {{prefix}}leases
                   SET owner = p_owner, priority = p_priority, fencing_token = o_fencing_token,
                       acquired_at = v_now, heartbeat_at = v_now, ttl_micros = p_ttl_micros,
                       has_contenders = v_new_has, contender_priority_bound = v_new_bound,
                       released_at = NULL
                 WHERE lease_name = p_lease_name;
            END IF;
        END IF;
    END IF;
    RETURN ROW(o_status, o_transition, o_owner, o_priority, o_fencing_token, o_acquired_at,
               o_heartbeat_at, o_ttl_micros)::{{prefix}}lease_outcome_v1;
END
$fn$;
