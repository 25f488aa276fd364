#!/usr/bin/env bash
# Server CPU per lease call, against the single-row UPDATE floor, on one PostgreSQL.
#
#   crates/tenure-postgres/benches/server-cpu.sh [transactions per round, default 10000]
#
# Needs psql, pgbench and a built `tenure` binary (target/release or target/debug). The server
# is TENURE_DATABASE_URL's (default postgres://postgres@127.0.0.1:5432/postgres). Everything is
# made in a schema of its own, dropped at the end.
#
# Each side is one pgbench client running one statement per transaction; the figure is the CPU
# time (user + system, from /proc) of that client's backend over its transactions, so that
# other load on the machine changes it little. The sides, over 1,000 rows or leases each:
#
#   floor              UPDATE t SET v = v + 1 WHERE id = $1 (fillfactor 50, integer key)
#   standby, kept      request_lease_v4 by a standby whose registration is fresh (a day's ttl)
#   standby, refresh   request_lease_v2 by the same standby: v2 refreshes at every call
#   standby, mixed     request_lease_v4 by a standby whose ttl is one of two values a
#                      microsecond apart, at random: a call whose ttl differs from the stored
#                      one refreshes the (live) registration, about every second call; the
#                      others keep it
#   standby, mixed, v3 the same calls of request_lease_v3 (the previous release), on leases of
#                      their own
#   standby, kept, v5  the same call as "standby, kept" through request_lease_v5, which this
#                      release calls for a caller that did not hold the lease at its last answer
#   standby, mixed, v5 the same calls as "standby, mixed" through request_lease_v5 (on the same
#                      leases: v4 and v5 write the same rows)
#   renewal            request_lease_v4 by the holder of a lease without standbys
#   renewal, standby   request_lease_v4 by the holder of a lease with one live standby of its
#                      priority (answered from the lease record: the registrations' bound)
#   renewal, standby, v3   the same call of request_lease_v3 (the previous release), which reads
#                      the registrations at every renewal
#
# Rounds alternate the sides; the median of the rounds is printed, with its ratio to the floor.
set -euo pipefail
cd "$(dirname "$0")/../../.."
url=${TENURE_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
n=${1:-10000}
rounds=${TENURE_BENCH_ROUNDS:-3}
tenure=""
for candidate in target/release/tenure target/debug/tenure; do
  [ -x "$candidate" ] && { tenure=$candidate; break; }
done
[ -n "$tenure" ] || { echo "build the tenure binary first (cargo build -p tenure-cli)" >&2; exit 1; }
schema="tenure_cpu_$$"
work=$(mktemp -d)
export PGOPTIONS="-c search_path=$schema"
cleanup() { PGOPTIONS="-c client_min_messages=warning" psql -q "$url" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null; rm -rf "$work"; }
trap cleanup EXIT

PGOPTIONS= psql -q -v ON_ERROR_STOP=1 "$url" -c "CREATE SCHEMA $schema" >/dev/null
"$tenure" ddl --prefix cpu_ | psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null
day=86400000000
psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null <<EOF
CREATE TABLE floor_rows (id integer PRIMARY KEY, v bigint NOT NULL) WITH (fillfactor = 50);
INSERT INTO floor_rows SELECT g, 0 FROM generate_series(1, 1000) g;
SELECT count(cpu_request_lease_v4('s' || g, 'holder', 0, $day, 0, 0, 0)) FROM generate_series(1, 1000) g;
SELECT count(cpu_request_lease_v4('s' || g, 'standby', 0, $day, 0, 0, 0)) FROM generate_series(1, 1000) g;
SELECT count(cpu_request_lease_v4('a' || g, 'holder', 0, $day, 0, 0, 0)) FROM generate_series(1, 1000) g;
SELECT count(cpu_request_lease_v4(p || g, 'holder', 0, $day, 0, 0, 0)) FROM generate_series(1, 1000) g, unnest(array['r', 'q']) p;
SELECT count(cpu_request_lease_v4(p || g, 'standby', 0, $day, 0, 0, 0)) FROM generate_series(1, 1000) g, unnest(array['r', 'q']) p;
-- The renewals that read the registrations once and set the bound.
SELECT count(cpu_request_lease_v4('s' || g, 'holder', 0, $day, 0, 0, 0)) FROM generate_series(1, 1000) g;
VACUUM ANALYZE floor_rows; VACUUM ANALYZE cpu_leases; VACUUM ANALYZE cpu_lease_contenders;
EOF

side() { # name, statement with :id (and :t, 0 or 1 at random)
  printf '\\set id random(1, 1000)\n\\set t random(0, 1)\n%s;\n' "$2" > "$work/$1.sql"
}
side floor "UPDATE floor_rows SET v = v + 1 WHERE id = :id"
side standby_kept "SELECT cpu_request_lease_v4('s' || :id, 'standby', 0, $day, 0, 0, 0)"
side standby_refresh "SELECT cpu_request_lease_v2('s' || :id, 'standby', 0, $day, 0, 0, 0)"
side standby_mixed "SELECT cpu_request_lease_v4('r' || :id, 'standby', 0, $day + :t, 0, 0, 0)"
side standby_mixed_v3 "SELECT cpu_request_lease_v3('q' || :id, 'standby', 0, $day + :t, 0, 0, 0)"
side standby_kept_v5 "SELECT cpu_request_lease_v5('s' || :id, 'standby', 0, $day, 0, 0, 0)"
side standby_mixed_v5 "SELECT cpu_request_lease_v5('r' || :id, 'standby', 0, $day + :t, 0, 0, 0)"
side renewal "SELECT cpu_request_lease_v4('a' || :id, 'holder', 0, $day, 0, 0, 0)"
side renewal_standby "SELECT cpu_request_lease_v4('s' || :id, 'holder', 0, $day, 0, 0, 0)"
side renewal_standby_v3 "SELECT cpu_request_lease_v3('s' || :id, 'holder', 0, $day, 0, 0, 0)"
sides="floor standby_kept standby_kept_v5 standby_refresh standby_mixed standby_mixed_v5 standby_mixed_v3 renewal renewal_standby renewal_standby_v3"

# Microseconds of server CPU per transaction of one pgbench client running $1.
measure() {
  local tck pid last=0 v
  tck=$(getconf CLK_TCK)
  # The previous side's backend may still be listed for a moment after its client left.
  for _ in $(seq 1 200); do
    [ "$(PGOPTIONS= psql -At "$url" -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'")" = 0 ] && break
    sleep 0.02
  done
  # Only a backend started after this instant is this side's (the previous one may linger).
  local t0
  t0=$(PGOPTIONS= psql -At "$url" -c "SELECT now()")
  pgbench -n -c 1 -t "$n" -f "$work/$1.sql" "$url" >"$work/out" 2>&1 &
  local bench=$!
  pid=""
  for _ in $(seq 1 200); do
    # pgbench's first session only logs in and leaves; the client's runs the statements.
    pid=$(PGOPTIONS= psql -At "$url" -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' AND backend_start >= '$t0' AND query <> '' LIMIT 1")
    [ -n "$pid" ] && break
    sleep 0.02
  done
  [ -n "$pid" ] || { echo "no pgbench backend found" >&2; exit 1; }
  while kill -0 "$bench" 2>/dev/null; do
    v=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || true)
    [ -n "$v" ] && last=$v
    sleep 0.02
  done
  wait "$bench" || { cat "$work/out" >&2; exit 1; }
  echo "$last $tck $n" | awk '{printf "%.1f", $1 * 1000000 / $2 / $3}'
}

for r in $(seq 1 "$rounds"); do
  for s in $sides; do
    measure "$s" >>"$work/$s.us"
    echo >>"$work/$s.us"
  done
done
median() { sort -n "$work/$1.us" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
floor=$(median floor)
printf '%-20s %10s %8s   (%s rounds of %s transactions; all rounds: µs)\n' side "µs/call" "/ floor" "$rounds" "$n"
for s in $sides; do
  m=$(median "$s")
  printf '%-20s %10s %7.2fx   %s\n' "$s" "$m" "$(echo "$m $floor" | awk '{print $1 / $2}')" "$(tr '\n' ' ' <"$work/$s.us")"
done
