-- Tenure: request_leases_v1, lease requests carried together in one call (issue 13).
--
-- Past about three quarters of the server's capacity, requests queue in the adapter for a
-- connection. Most of a call's cost on the server is the call itself, not its decision: the
-- round trip, the statement's set-up and its transaction. Measured with `pgbench` (one client,
-- the backend's CPU per call): a standby's request at the elector's cadence 140 µs alone, 42 µs
-- among ten in one statement; a kept one 77 against 22; a renewal 203 against 35. So the
-- adapter sends the requests that wait when a connection comes free as one call of this
-- function (renewals with renewals, standbys' requests with standbys' requests), which decides
-- each of them by calling the function its own call would have called, in the order given:
-- request_lease_v4 (0009) where p_held says the caller held the lease at its last answer,
-- request_lease_v5 (0011) otherwise. It answers one row per request, in that order. Nothing is
-- decided here: each decision is v4's or v5's, with its own advisory lock, its own clock
-- reading after the lock, and its own writes; a request of a lease that appears earlier in the
-- same call sees that one's writes, as two calls in a row would.
--
-- The difference from separate calls is that the locks are held, and the writes become
-- visible, until the whole statement commits. A request whose lease's lock is held elsewhere
-- (a call in flight, a fence in an application's open transaction) is therefore not waited
-- for: the lock is tried, and on failure the request is left undecided (o_decided false,
-- nothing written for it) for the adapter to send on its own, so that one busy lease never
-- holds up the others in the call, and no two calls of this function can wait on each other
-- (a lock is only ever tried here; v4's or v5's own lock, taken after, is then held).
--
-- Durability: request_lease_v4 and v5 turn `synchronous_commit` off for the transaction of a
-- standby's registration (soft state, see 0009). Carried with it, an acquisition, a takeover,
-- or a renewal would then be committed without waiting for the flush of the log, and a crash
-- could lose a fencing token already handed out. So when any request of the call changed a
-- lease record (any transition but `standby`), the setting the call started with is put back
-- before the commit, which reads it.
--
-- Versioning: nothing earlier changes. A process of an earlier release never calls it.

CREATE OR REPLACE FUNCTION {{prefix}}request_leases_v1(
    p_lease_names       text[],
    p_owners            text[],
    p_priorities        bigint[],
    p_ttl_micros        bigint[],
    p_seen_tokens       bigint[],
    p_seen_heartbeats   bigint[],
    p_seen_for_micros   bigint[],
    p_held              boolean[],
    p_now               timestamptz DEFAULT NULL)
RETURNS TABLE (o_decided boolean, o_outcome {{prefix}}lease_outcome_v1)
LANGUAGE plpgsql
VOLATILE
AS $fn$
DECLARE
    v_count integer;
    v_synchronous_commit text := current_setting('synchronous_commit');
    v_record_written boolean := false;
BEGIN
    v_count := coalesce(cardinality(p_lease_names), 0);
    IF coalesce(cardinality(p_owners), 0) <> v_count
       OR coalesce(cardinality(p_priorities), 0) <> v_count
       OR coalesce(cardinality(p_ttl_micros), 0) <> v_count
       OR coalesce(cardinality(p_seen_tokens), 0) <> v_count
       OR coalesce(cardinality(p_seen_heartbeats), 0) <> v_count
       OR coalesce(cardinality(p_seen_for_micros), 0) <> v_count
       OR coalesce(cardinality(p_held), 0) <> v_count THEN
        RAISE EXCEPTION 'request_leases_v1: the arrays differ in length'
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. v_count LOOP
        o_decided := pg_try_advisory_xact_lock(
            hashtextextended('{{prefix}}leases:' || p_lease_names[i], 0));
        IF o_decided AND p_held[i] THEN
            o_outcome := {{prefix}}request_lease_v4(
                p_lease_names[i], p_owners[i], p_priorities[i], p_ttl_micros[i],
                p_seen_tokens[i], p_seen_heartbeats[i], p_seen_for_micros[i], p_now);
        ELSIF o_decided THEN
            o_outcome := {{prefix}}request_lease_v5(
                p_lease_names[i], p_owners[i], p_priorities[i], p_ttl_micros[i],
                p_seen_tokens[i], p_seen_heartbeats[i], p_seen_for_micros[i], p_now);
            v_record_written := v_record_written OR (o_outcome).o_transition <> 'standby';
        ELSE
            o_outcome := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
    IF v_record_written THEN
        PERFORM set_config('synchronous_commit', v_synchronous_commit, true);
    END IF;
END
$fn$;
