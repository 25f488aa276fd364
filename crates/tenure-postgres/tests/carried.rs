//! `request_leases_v1`, which carries lease requests in one call, decides each of them as
//! `request_lease_v4` (for a caller that held the lease at its last answer) or
//! `request_lease_v5` (for any other) called for each in turn does.
//!
//! Random steps on two prefixes of the test server: on one, each step's requests (one to six,
//! on three leases and four owners, with sightings taken from the stored record or none, at a
//! clock the test moves) go in one call of `request_leases_v1`; on the other, one call of
//! `request_lease_v5` each, in the same order, at the same clock. Every answer, and after every
//! step every lease record and every stored registration, must be the same. Each request is
//! marked held or not at random; releases are mixed in, on both. v4 and v5 themselves are held
//! to the domain's state machine by `tests/model.rs`.
//!
//! The check must be able to fail: its negative control installs a `request_leases_v1` that
//! decides the requests in the opposite order (answering each in its place) and requires the
//! check to notice.
//!
//! The adapter carries the requests that wait for a connection this way, and first sends one
//! statement for those it can answer together: for renewals, the renewal statement for many;
//! for standbys' requests, the kept standbys' read. Both are held to v4 or v5 in turn the same
//! way (`play_together`), through the adapter's own carrying code, each with negative controls
//! that edit one condition of the statement.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use support::{XorShift, server};
use tenure_pg_test::PrefixGuard;
use tenure_ports::{FencingToken, LeaseRequest, Sighting, Timestamp};
use tenure_postgres::{PostgresDriver, PostgresEventStorage};

/// One of `of`, at random.
fn pick<'a>(rng: &mut XorShift, of: &[&'a str]) -> &'a str {
    of[rng.below(of.len() as u64) as usize]
}

/// One request, as `request_leases_v1`'s arrays take it.
struct Request {
    lease: String,
    owner: String,
    priority: i64,
    ttl_micros: i64,
    seen: [i64; 3],
    held: bool,
}

async fn prefix_with_schema(client: &tokio_postgres::Client) -> PrefixGuard {
    let guard = PrefixGuard::new(server().url.clone(), tenure_pg_test::unique_prefix());
    let ddl = tenure_postgres::ddl(guard.prefix()).unwrap();
    client
        .batch_execute(&tenure_pg_test::serialized(&ddl))
        .await
        .unwrap();
    guard
}

/// The lease records and the stored registrations of `prefix`, as text.
async fn state(client: &tokio_postgres::Client, prefix: &str) -> Vec<String> {
    let rows = client
        .query(
            &format!(
                "SELECT 'lease ' || (l.*)::text FROM {prefix}leases l \
                 UNION ALL \
                 SELECT 'registration ' || (c.*)::text FROM {prefix}lease_contenders c \
                 ORDER BY 1"
            ),
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// The sighting of `lease`'s stored tenure, seen unchanged for a whole ttl, or none.
async fn sighting(client: &tokio_postgres::Client, prefix: &str, lease: &str) -> [i64; 3] {
    let row = client
        .query_opt(
            &format!(
                "SELECT fencing_token, (extract(epoch FROM heartbeat_at) * 1000000)::bigint, \
                        ttl_micros FROM {prefix}leases WHERE lease_name = $1"
            ),
            &[&lease],
        )
        .await
        .unwrap();
    row.map_or([0; 3], |r| [r.get(0), r.get(1), r.get(2)])
}

/// Plays `steps` random steps from `seed` on prefixes `carried` (one call of
/// `request_leases_v1` per step) and `alone` (one call of `request_lease_v5` per request);
/// the first difference, if any.
async fn play(
    client: &tokio_postgres::Client,
    carried: &str,
    alone: &str,
    seed: u64,
    steps: usize,
) -> Result<BTreeSet<String>, String> {
    let mut rng = XorShift(seed);
    let mut transitions = BTreeSet::new();
    // A fixed start, so that the clock the test moves never meets the server's.
    let mut now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let (leases, owners) = (["a", "b", "c"], ["o1", "o2", "o3", "o4"]);
    for step in 0..steps {
        now += Duration::from_micros(rng.below(2_500_000));
        if rng.below(8) == 0 {
            let (lease, owner) = (pick(&mut rng, &leases), pick(&mut rng, &owners));
            for prefix in [carried, alone] {
                client
                    .execute(
                        &format!("SELECT {prefix}release_lease_v1($1, $2, $3)"),
                        &[&lease, &owner, &now],
                    )
                    .await
                    .unwrap();
            }
        }
        let mut requests = Vec::new();
        for _ in 0..=rng.below(6) {
            let lease = pick(&mut rng, &leases).to_owned();
            let seen = if rng.below(2) == 0 {
                sighting(client, alone, &lease).await
            } else {
                [0; 3]
            };
            requests.push(Request {
                lease,
                owner: pick(&mut rng, &owners).to_owned(),
                priority: rng.below(3) as i64,
                ttl_micros: [1_000_000, 3_000_000][rng.below(2) as usize],
                seen,
                held: rng.below(2) == 0,
            });
        }
        let names: Vec<&str> = requests.iter().map(|r| r.lease.as_str()).collect();
        let owners_of: Vec<&str> = requests.iter().map(|r| r.owner.as_str()).collect();
        let column = |f: fn(&Request) -> i64| requests.iter().map(f).collect::<Vec<i64>>();
        let held: Vec<bool> = requests.iter().map(|r| r.held).collect();
        let answers: Vec<Option<String>> = client
            .query(
                &format!(
                    "SELECT CASE WHEN o_decided THEN o_outcome::text END \
                       FROM {carried}request_leases_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)"
                ),
                &[
                    &names,
                    &owners_of,
                    &column(|r| r.priority),
                    &column(|r| r.ttl_micros),
                    &column(|r| r.seen[0]),
                    &column(|r| r.seen[1]),
                    &column(|r| r.seen[2]),
                    &held,
                    &now,
                ],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut expected = Vec::new();
        for r in &requests {
            let row = client
                .query_one(
                    &format!(
                        "SELECT {alone}request_lease_v{}($1, $2, $3, $4, $5, $6, $7, $8)::text",
                        if r.held { 4 } else { 5 }
                    ),
                    &[
                        &r.lease,
                        &r.owner,
                        &r.priority,
                        &r.ttl_micros,
                        &r.seen[0],
                        &r.seen[1],
                        &r.seen[2],
                        &now,
                    ],
                )
                .await
                .unwrap();
            expected.push(Some(row.get::<_, String>(0)));
        }
        for answer in expected.iter().flatten() {
            if let Some(transition) = answer.split(',').nth(1) {
                transitions.insert(transition.to_owned());
            }
        }
        if answers != expected {
            return Err(format!(
                "step {step}: carried answers {answers:?}, in turn {expected:?}"
            ));
        }
        let (ours, theirs) = (state(client, carried).await, state(client, alone).await);
        if ours != theirs {
            return Err(format!(
                "step {step}: carried leaves {ours:?}, in turn {theirs:?}"
            ));
        }
    }
    Ok(transitions)
}

#[tokio::test]
async fn carried_requests_are_decided_as_calls_in_turn() {
    let client = tenure_pg_test::connect(&server().url).await.unwrap();
    let carried = prefix_with_schema(&client).await;
    let alone = prefix_with_schema(&client).await;
    let mut seen = BTreeSet::new();
    for seed in [0x9e37_79b9_7f4a_7c15, 0x2545_f491_4f6c_dd1d] {
        seen.extend(
            play(&client, carried.prefix(), alone.prefix(), seed, 150)
                .await
                .unwrap(),
        );
    }
    // The steps reach every kind of decision.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["created", "reacquired", "renewed", "standby", "taken_over"]
    );
}

#[tokio::test]
async fn the_check_catches_carried_requests_decided_out_of_turn() {
    let client = tenure_pg_test::connect(&server().url).await.unwrap();
    let carried = prefix_with_schema(&client).await;
    let alone = prefix_with_schema(&client).await;
    // Decided last to first, each answer still in its request's place.
    let definition: String = client
        .query_one(
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.proname = $1",
            &[&format!("{}request_leases_v1", carried.prefix())],
        )
        .await
        .unwrap()
        .get(0);
    let shipped = "FOR i IN 1 .. v_count LOOP";
    assert_eq!(definition.matches(shipped).count(), 1, "the loop moved");
    let broken = definition
        .replace(shipped, "FOR i IN REVERSE v_count .. 1 LOOP")
        .replace(
            "RETURNS TABLE(o_decided boolean,",
            "RETURNS TABLE(o_item integer, o_decided boolean,",
        )
        .replace("RETURN NEXT;", "o_item := i; RETURN NEXT;");
    client
        .batch_execute(&format!(
            "DROP FUNCTION {p}request_leases_v1; {broken}; \
             ALTER FUNCTION {p}request_leases_v1 RENAME TO {p}request_leases_v1_reversed; \
             CREATE FUNCTION {p}request_leases_v1(text[], text[], bigint[], bigint[], bigint[], \
                bigint[], bigint[], boolean[], timestamptz) \
             RETURNS TABLE (o_decided boolean, o_outcome {p}lease_outcome_v1) LANGUAGE sql AS \
             $$ SELECT o_decided, o_outcome \
                  FROM {p}request_leases_v1_reversed($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ORDER BY o_item $$",
            p = carried.prefix()
        ))
        .await
        .unwrap();
    let caught = play(
        &client,
        carried.prefix(),
        alone.prefix(),
        0x9e37_79b9_7f4a_7c15,
        150,
    )
    .await;
    assert!(
        caught.is_err(),
        "the check missed requests decided out of turn"
    );
}

/// The leases and owners of the renewals' steps.
const LEASES: [&str; 4] = ["a", "b", "c", "d"];
const OWNERS: [&str; 4] = ["o1", "o2", "o3", "o4"];

/// `lease`'s stored owner and expiry (µs since the Unix epoch) on `prefix`, if it has a record.
async fn holder(
    client: &tokio_postgres::Client,
    prefix: &str,
    lease: &str,
) -> Option<(String, i64)> {
    client
        .query_opt(
            &format!(
                "SELECT owner, (extract(epoch FROM heartbeat_at) * 1000000)::bigint + ttl_micros \
                   FROM {prefix}leases WHERE lease_name = $1 AND released_at IS NULL"
            ),
            &[&lease],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

/// The sighting of `lease`'s stored tenure, unchanged since its heartbeat, at `now`.
async fn implied_sighting(
    client: &tokio_postgres::Client,
    prefix: &str,
    lease: &str,
    now: Timestamp,
) -> Option<Sighting> {
    let [token, heartbeat, _] = sighting(client, prefix, lease).await;
    Some(Sighting {
        fencing_token: FencingToken::new(u64::try_from(token).ok()?)?,
        heartbeat_at: Timestamp::from_micros(heartbeat),
        unchanged_for: Duration::from_micros(
            u64::try_from(now.as_micros() - heartbeat).unwrap_or(0),
        ),
    })
}

/// What the renewals' steps reached: the transitions answered, and how many renewals were
/// answered while a registration stood (so that the registrations' bound was in play).
#[derive(Debug, Default)]
struct Reached {
    transitions: BTreeSet<String>,
    challenged_renewals: usize,
    at_expiry: usize,
    /// Standbys' requests whose registration was fresh, with their priority and ttl, on a
    /// live lease held by another: those the kept standbys' read answers.
    kept: usize,
    /// Steps whose clock landed exactly where a registration stops being fresh.
    at_half_ttl: usize,
}

/// What the steps carry together: holders' renewals (the renewal statement for many first)
/// or standbys' requests (the kept standbys' read first).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Renewals,
    Standbys,
}

/// `lease`'s registrations on `prefix`: owner, priority, ttl in µs, last seen (µs since the
/// Unix epoch).
async fn registrations(
    client: &tokio_postgres::Client,
    prefix: &str,
) -> Vec<(String, String, i64, i64, i64)> {
    client
        .query(
            &format!(
                "SELECT lease_name, owner, priority, ttl_micros, \
                        (extract(epoch FROM last_seen) * 1000000)::bigint \
                   FROM {prefix}lease_contenders ORDER BY 1, 2"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// One step's renewals: one to eight holders' requests, mostly by the stored holder, with its
/// sighting or none.
async fn renewals_of_step(
    rng: &mut XorShift,
    client: &tokio_postgres::Client,
    alone: &str,
    now: Timestamp,
) -> Vec<(LeaseRequest, Option<Sighting>)> {
    let mut requests = Vec::new();
    for _ in 0..=rng.below(8) {
        let lease = pick(rng, &LEASES);
        let owner = match holder(client, alone, lease).await {
            Some((owner, _)) if rng.below(4) != 0 => owner,
            _ => pick(rng, &OWNERS).to_owned(),
        };
        let request = LeaseRequest::new(
            lease,
            owner,
            rng.below(4) as i64,
            Duration::from_secs([1, 3][rng.below(2) as usize]),
        );
        let sighting = if rng.below(2) == 0 {
            implied_sighting(client, alone, lease, now).await
        } else {
            None
        };
        requests.push((request, sighting));
    }
    requests
}

/// One step's standbys' requests: on each lease picked, either its stored holder's request
/// alone (a renewal that the read must leave), or each other owner's at even odds, each with its
/// usual priority and ttl mostly (so that registrations are kept), with a sighting mostly. No
/// owner asks twice for one lease, and a holder's renewal is its lease's only request: then
/// the requests of one lease that the read answers could not have been answered otherwise
/// after those it leaves (standbys write only their own registrations), and the calls in turn
/// in the steps' order decide what the read and `request_leases_v1` decide.
async fn standbys_of_step(
    rng: &mut XorShift,
    client: &tokio_postgres::Client,
    alone: &str,
    now: Timestamp,
) -> Vec<(LeaseRequest, Option<Sighting>)> {
    let mut requests = Vec::new();
    for lease in LEASES {
        if rng.below(3) == 0 {
            continue;
        }
        let stored = holder(client, alone, lease).await.map(|(owner, _)| owner);
        let owners: Vec<&str> = match &stored {
            Some(owner) if rng.below(6) == 0 => vec![owner.as_str()],
            _ => OWNERS
                .iter()
                .copied()
                .filter(|o| Some(*o) != stored.as_deref() && rng.below(2) == 0)
                .collect(),
        };
        for owner in owners {
            let usual = OWNERS.iter().position(|o| *o == owner).unwrap_or(0) as i64 % 3;
            let (priority, ttl) = if rng.below(5) == 0 {
                (rng.below(4) as i64, [1, 3][rng.below(2) as usize])
            } else {
                (usual, 3)
            };
            let request = LeaseRequest::new(lease, owner, priority, Duration::from_secs(ttl));
            let sighting = if rng.below(4) != 0 {
                implied_sighting(client, alone, lease, now).await
            } else {
                None
            };
            requests.push((request, sighting));
        }
    }
    requests
}

/// Whether `request` would be answered from its kept registration at `now` on `prefix`:
/// sighted, the lease live and held by another, its registration with its priority and ttl
/// younger than half its ttl.
async fn kept_at(
    client: &tokio_postgres::Client,
    prefix: &str,
    (request, sighting): &(LeaseRequest, Option<Sighting>),
    now: Timestamp,
) -> bool {
    let live_other = matches!(
        holder(client, prefix, &request.lease_name).await,
        Some((owner, expiry)) if owner != request.owner.as_str() && now.as_micros() < expiry
    );
    let fresh = registrations(client, prefix).await.iter().any(|r| {
        r.0 == request.lease_name.as_str()
            && r.1 == request.owner.as_str()
            && r.2 == request.priority
            && Some(r.3) == i64::try_from(request.ttl.as_micros()).ok()
            && r.4 <= now.as_micros()
            && 2 * (now.as_micros() - r.4) < r.3
    });
    sighting.is_some() && live_other && fresh
}

/// Plays `steps` random steps from `seed`: on `together`'s storage, each step's requests of
/// `kind` ([`renewals_of_step`], [`standbys_of_step`]) carried together as the adapter
/// carries the requests of one kind that wait (`request_leases_renewing_at` or
/// `request_leases_standing_by_at`, or `…_with_at` with `statement` in place of the statement
/// sent first); on `alone`'s, `request_lease_v4` (renewals) or `_v5` (standbys) for each in
/// turn; at the same clock, which now and then lands exactly on a lease's expiry (or, for
/// standbys, where a registration stops being fresh). Standbys' requests and releases are
/// mixed in, the same on both. The first difference, if any.
async fn play_together(
    client: &tokio_postgres::Client,
    together: &(PostgresEventStorage, PrefixGuard),
    alone: &(PostgresEventStorage, PrefixGuard),
    (kind, seed, steps): (Kind, u64, usize),
    statement: Option<&str>,
) -> Result<Reached, String> {
    let mut rng = XorShift(seed);
    let mut reached = Reached::default();
    let mut now = Timestamp::from_micros(1_800_000_000_000_000);
    let on_both = [&together.0, &alone.0];
    for step in 0..steps {
        now = Timestamp::from_micros(now.as_micros() + rng.below(1_500_000) as i64);
        if rng.below(4) == 0 {
            // Exactly at a lease's expiry, if one is ahead.
            let lease = pick(&mut rng, &LEASES);
            if let Some((_, expiry)) = holder(client, alone.1.prefix(), lease).await
                && expiry >= now.as_micros()
            {
                now = Timestamp::from_micros(expiry);
                reached.at_expiry += 1;
            }
        } else if matches!(kind, Kind::Standbys) && rng.below(3) == 0 {
            // Exactly where a registration stops being fresh, if one is ahead.
            let all = registrations(client, alone.1.prefix()).await;
            if !all.is_empty() {
                let r = &all[rng.below(all.len() as u64) as usize];
                let half = r.4 + r.3 / 2;
                if r.3 % 2 == 0 && half >= now.as_micros() {
                    now = Timestamp::from_micros(half);
                    reached.at_half_ttl += 1;
                }
            }
        }
        if rng.below(8) == 0 {
            let (lease, owner) = (pick(&mut rng, &LEASES), pick(&mut rng, &OWNERS));
            for storage in on_both {
                storage.release_lease_at(lease, owner, now).await.unwrap();
            }
        }
        for _ in 0..rng.below(3) {
            let request = LeaseRequest::new(
                pick(&mut rng, &LEASES),
                pick(&mut rng, &OWNERS),
                rng.below(4) as i64,
                Duration::from_secs([1, 3][rng.below(2) as usize]),
            );
            for storage in on_both {
                storage
                    .request_lease_unheld_sighted_at(&request, now, None)
                    .await
                    .unwrap();
            }
        }
        let requests = match kind {
            Kind::Renewals => renewals_of_step(&mut rng, client, alone.1.prefix(), now).await,
            Kind::Standbys => standbys_of_step(&mut rng, client, alone.1.prefix(), now).await,
        };
        if requests.is_empty() {
            continue;
        }
        for request in &requests {
            if kept_at(client, alone.1.prefix(), request, now).await {
                reached.kept += 1;
            }
        }
        let ours = match (kind, statement) {
            (Kind::Renewals, None) => together.0.request_leases_renewing_at(&requests, now).await,
            (Kind::Renewals, Some(statement)) => {
                together
                    .0
                    .request_leases_renewing_with_at(&requests, now, statement)
                    .await
            }
            (Kind::Standbys, None) => {
                together
                    .0
                    .request_leases_standing_by_at(&requests, now)
                    .await
            }
            (Kind::Standbys, Some(statement)) => {
                together
                    .0
                    .request_leases_standing_by_with_at(&requests, now, statement)
                    .await
            }
        };
        let mut theirs = Vec::new();
        for (request, sighting) in &requests {
            let challenged = !unregistered(client, alone.1.prefix(), &request.lease_name).await;
            let answer = match kind {
                Kind::Renewals => {
                    alone
                        .0
                        .request_lease_sighted_at(request, now, *sighting)
                        .await
                }
                Kind::Standbys => {
                    alone
                        .0
                        .request_lease_unheld_sighted_at(request, now, *sighting)
                        .await
                }
            };
            if let Ok((transition, _)) = &answer {
                let transition = format!("{transition:?}");
                if challenged && transition == "Renewed" {
                    reached.challenged_renewals += 1;
                }
                reached.transitions.insert(transition);
            }
            theirs.push(answer);
        }
        let (ours, theirs) = (
            format!("{ours:?}"),
            format!("{:?}", theirs.into_iter().collect::<Result<Vec<_>, _>>()),
        );
        if ours != theirs {
            return Err(format!(
                "step {step}: carried together answers {ours}, in turn {theirs}"
            ));
        }
        let (ours, theirs) = (
            state(client, together.1.prefix()).await,
            state(client, alone.1.prefix()).await,
        );
        if ours != theirs {
            return Err(format!(
                "step {step}: carried together leaves {ours:?}, in turn {theirs:?}"
            ));
        }
    }
    Ok(reached)
}

/// Whether `lease` has no stored registration on `prefix`.
async fn unregistered(client: &tokio_postgres::Client, prefix: &str, lease: &str) -> bool {
    client
        .query_one(
            &format!("SELECT count(*) = 0 FROM {prefix}lease_contenders WHERE lease_name = $1"),
            &[&lease],
        )
        .await
        .unwrap()
        .get(0)
}

/// Requests of `kind` carried together on `driver`'s storage against `request_lease_v4` or
/// `_v5` in turn, from `seed`, with `statement` in place of the statement sent first.
async fn against_in_turn(
    driver: PostgresDriver,
    (kind, seed, steps): (Kind, u64, usize),
    statement: impl Fn(&str) -> Option<String>,
) -> Result<Reached, String> {
    let client = tenure_pg_test::connect(&server().url).await.unwrap();
    let together = support::fresh_storage(driver).await;
    let alone = support::fresh_storage(driver).await;
    let first = match kind {
        Kind::Renewals => together.0.renewals_statement_at(),
        Kind::Standbys => together.0.kept_statement_at(),
    };
    let statement = statement(&first);
    play_together(
        &client,
        &together,
        &alone,
        (kind, seed, steps),
        statement.as_deref(),
    )
    .await
}

/// Requests of `kind` carried together on `driver`'s storage, held to v4 or v5 in turn over
/// 300 steps that reach every kind of decision and at least ten expiries; what they reached.
async fn decided_as_calls_in_turn(driver: PostgresDriver, kind: Kind) -> Reached {
    let reached = against_in_turn(driver, (kind, 0x9e37_79b9_7f4a_7c15, 300), |_| None)
        .await
        .unwrap();
    assert_eq!(
        reached
            .transitions
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["Created", "Reacquired", "Renewed", "Standby", "TakenOver"],
        "{reached:?}"
    );
    assert!(reached.at_expiry >= 10, "{reached:?}");
    reached
}

async fn carried_renewals_are_decided_as_calls_in_turn(driver: PostgresDriver) {
    // Renewals of challenged leases among them.
    let reached = decided_as_calls_in_turn(driver, Kind::Renewals).await;
    assert!(reached.challenged_renewals >= 10, "{reached:?}");
}

#[tokio::test]
async fn carried_renewals_are_decided_as_calls_in_turn_on_deadpool() {
    carried_renewals_are_decided_as_calls_in_turn(PostgresDriver::Deadpool).await;
}

#[tokio::test]
async fn carried_renewals_are_decided_as_calls_in_turn_on_sqlx() {
    carried_renewals_are_decided_as_calls_in_turn(PostgresDriver::Sqlx09).await;
}

/// The renewal statement for many, with `shipped` replaced by `broken`, must be caught.
async fn caught_renewals(shipped: &str, broken: &str, what: &str) {
    caught(Kind::Renewals, shipped, broken, what).await;
}

/// The statement sent first for requests of `kind`, with `shipped` replaced by `broken`, must
/// be caught.
async fn caught(kind: Kind, shipped: &str, broken: &str, what: &str) {
    let caught = against_in_turn(
        PostgresDriver::Deadpool,
        (kind, 0x2545_f491_4f6c_dd1d, 300),
        |sql| {
            assert_eq!(
                sql.matches(shipped).count(),
                1,
                "{what}: the statement moved"
            );
            Some(sql.replace(shipped, broken))
        },
    )
    .await;
    assert!(caught.is_err(), "the check missed {what}");
}

#[tokio::test]
async fn the_check_catches_carried_renewals_at_expiry() {
    caught_renewals(
        "c.now < l.heartbeat_at",
        "c.now <= l.heartbeat_at",
        "a renewal of an expired lease",
    )
    .await;
}

#[tokio::test]
async fn the_check_catches_carried_renewals_that_miss_a_challenger() {
    caught_renewals(
        "l.contender_priority_bound <= r.priority",
        "l.contender_priority_bound <= r.priority + 1",
        "a renewal that misses a challenger",
    )
    .await;
}

async fn carried_standbys_are_decided_as_calls_in_turn(driver: PostgresDriver) {
    // Kept registrations among them, and clocks on the edge of freshness.
    let reached = decided_as_calls_in_turn(driver, Kind::Standbys).await;
    assert!(reached.kept >= 50, "{reached:?}");
    assert!(reached.at_half_ttl >= 10, "{reached:?}");
}

#[tokio::test]
async fn carried_standbys_are_decided_as_calls_in_turn_on_deadpool() {
    carried_standbys_are_decided_as_calls_in_turn(PostgresDriver::Deadpool).await;
}

#[tokio::test]
async fn carried_standbys_are_decided_as_calls_in_turn_on_sqlx() {
    carried_standbys_are_decided_as_calls_in_turn(PostgresDriver::Sqlx09).await;
}

#[tokio::test]
async fn the_check_catches_kept_standbys_at_expiry() {
    caught(
        Kind::Standbys,
        "c.now < l.heartbeat_at",
        "c.now <= l.heartbeat_at",
        "a standby kept past its lease's expiry",
    )
    .await;
}

#[tokio::test]
async fn the_check_catches_kept_standbys_at_half_their_ttl() {
    caught(
        Kind::Standbys,
        "2 * (c.now - k.last_seen) <",
        "2 * (c.now - k.last_seen) <=",
        "a registration kept at half its ttl",
    )
    .await;
}

#[tokio::test]
async fn the_check_catches_kept_standbys_with_another_priority() {
    caught(
        Kind::Standbys,
        "k.priority = u.priority",
        "k.priority >= u.priority",
        "a registration kept with another priority",
    )
    .await;
}
