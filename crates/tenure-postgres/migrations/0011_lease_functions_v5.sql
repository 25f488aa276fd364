-- Tenure: request_lease_v5, the call of a contender that did not hold the lease at its last
-- answer, with a standby whose registration is fresh answered from two reads (issue 13).
--
-- Two calls of three in a three-replica deployment are standbys' requests, and at the
-- elector's cadence every second one of them finds the caller's registration fresh
-- (`tenure_domain::Contender::is_fresh_at`) and writes nothing. v4 answers such a call after
-- trying the renewal's UPDATE (which matches nothing: the caller does not hold the lease),
-- reading the lease record, and summing up every registration of the lease. v5 reads the lease
-- record first, and when the caller stands by and its registration is fresh with this
-- request's priority and ttl, it answers `standby` from the record and that one registration
-- (two index look-ups), writing nothing, whatever the other registrations are: what v4 decides
-- (rule 4, rule 1 kept, rule 7's pruning left to the next call that writes:
-- `RequestOutcome::keeping_fresh_registration`). A standby whose registration must be written
-- goes on as in v4, without v4's UPDATE that matches nothing. A caller that holds the live
-- lease after all is renewed by v4's UPDATE, one statement later than in v4.
--
-- So v5 decides exactly what v4 decides, for any caller (the differential check runs both);
-- the order of its reads is chosen for a standby, v4's for a holder. The adapter calls v4 when
-- the caller held the lease at its last answer and v5 otherwise.
--
-- Versioning: v1 to v4 stay as they were; processes of earlier releases keep calling them
-- during a rolling upgrade, and this release calls v4 as well. All serialize on the same
-- advisory lock and write the same rows.

CREATE OR REPLACE FUNCTION {{prefix}}request_lease_v5(
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

    -- The lease record first (v4 tries the renewal's UPDATE first): the caller did not hold
    -- the lease at its last answer, so it most likely stands by.
    SELECT l.owner, l.priority, l.fencing_token, l.acquired_at, l.heartbeat_at, l.ttl_micros,
           l.has_contenders, l.released_at, l.contender_priority_bound
      INTO v_lease
      FROM {{prefix}}leases l
     WHERE l.lease_name = p_lease_name;
    v_flags := 0;
    IF NOT FOUND THEN
        -- Rule 2: no record yet.
        o_transition := 'created';
        o_fencing_token := 1;
        v_has_contenders := true; -- nothing to go by: look
    ELSE
        v_has_contenders := v_lease.has_contenders;
        v_bound := v_lease.contender_priority_bound;
        IF v_now < v_lease.heartbeat_at + v_lease.ttl_micros * interval '1 microsecond' THEN
            IF v_lease.owner = p_owner THEN
                -- Rule 3, renewal (the caller held the lease after all): v4's UPDATE, and
                -- v4's answer from it when no registration can challenge the renewal.
                UPDATE {{prefix}}leases l
                   SET priority = p_priority, heartbeat_at = v_now, ttl_micros = p_ttl_micros
                 WHERE l.lease_name = p_lease_name
                RETURNING 'leader', 'renewed', l.owner, l.priority, l.fencing_token,
                          l.acquired_at, l.heartbeat_at, l.ttl_micros, l.has_contenders,
                          l.contender_priority_bound
                     INTO o_status, o_transition, o_owner, o_priority, o_fencing_token,
                          o_acquired_at, o_heartbeat_at, o_ttl_micros, v_has_contenders,
                          v_bound;
                IF NOT v_has_contenders OR v_bound <= p_priority THEN
                    RETURN ROW(o_status, o_transition, o_owner, o_priority, o_fencing_token,
                               o_acquired_at, o_heartbeat_at,
                               o_ttl_micros)::{{prefix}}lease_outcome_v1;
                END IF;
            ELSE
                -- Rule 4: someone else holds it.
                o_transition := 'standby';
            END IF;
        ELSE
            -- Rule 3, second half (the last holder comes back) or rule 5 (takeover).
            IF v_lease.owner = p_owner THEN
                o_transition := 'reacquired';
            ELSIF v_lease.released_at IS NOT NULL
                  OR (p_seen_token = v_lease.fencing_token
                      AND p_seen_heartbeat = extract(epoch FROM v_lease.heartbeat_at) * 1000000
                      AND p_seen_for_micros >= v_lease.ttl_micros) THEN
                -- Rule 5: released, or seen by the caller, on its own monotonic clock, to have
                -- stayed this very tenure and heartbeat for a whole ttl.
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

    -- Rule 1 kept for a contender that stands by: its registration says what this request
    -- says and is younger than half its ttl (`tenure_domain::Contender::is_fresh_at`). Then
    -- nothing is written and nothing pruned, whatever the other registrations are, and this is
    -- the whole call. A row of the caller's exists only while `has_contenders` is true.
    IF o_transition = 'standby' AND v_has_contenders THEN
        PERFORM
           FROM {{prefix}}lease_contenders c
          WHERE c.lease_name = p_lease_name
            AND c.owner = p_owner
            AND c.priority = p_priority
            AND c.ttl_micros = p_ttl_micros
            AND c.last_seen <= v_now
            AND 2 * (v_now - c.last_seen) < c.ttl_micros * interval '1 microsecond';
        IF FOUND THEN
            RETURN ROW('standby', 'standby', v_lease.owner, v_lease.priority,
                       v_lease.fencing_token, v_lease.acquired_at, v_lease.heartbeat_at,
                       v_lease.ttl_micros)::{{prefix}}lease_outcome_v1;
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
    --  16  (v4's fresh registration: never set here, such a call was answered above.)
    --  32  with 4: the caller's row has p_priority (a refresh need not name the priority, so
    --      that the bound's trigger on `UPDATE OF priority` is not even considered).
    -- A row of the caller's exists only while `has_contenders` is true (every writer keeps
    -- that so), so without the flag there is nothing to keep.
    IF v_has_contenders THEN
        SELECT coalesce(bit_or(
                 CASE WHEN c.owner = p_owner AND c.priority = p_priority THEN 36
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
        -- then rule 7. (A fresh registration, v4's bit 16, was answered above: every standby
        -- that gets here writes.)
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
