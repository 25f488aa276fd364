#!/usr/bin/env bash
# The benchmark process's instructions per lease call, against the single-row UPDATE floor.
#
#   crates/tenure-postgres/benches/client-cost.sh
#
# Needs valgrind and PostgreSQL (TENURE_DATABASE_URL, or as the tests find it). Builds the
# `client_cost` benchmark, runs each side (see `client_cost.rs`) under callgrind twice, with 500
# and 2,500 calls, and prints the difference per call: what one more call costs the process,
# without its start-up and warm-up. Callgrind counts instructions, so
# the figures repeat from run to run whatever else the machine does (within about 2 %: the
# server's answers arrive in more or fewer reads of the socket).
set -euo pipefail
cd "$(dirname "$0")/../../.."
command -v valgrind >/dev/null || { echo "client-cost.sh needs valgrind" >&2; exit 1; }
binary=$(cargo bench -p tenure-postgres --bench client_cost --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*client_cost[^"]*\)".*/\1/p' | tail -1)
[ -x "$binary" ] || { echo "could not build the client_cost benchmark" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Instructions collected in `measured` for side $1 and $2 calls.
count() {
  TENURE_BENCH_SIDE=$1 TENURE_BENCH_CALLS=$2 valgrind --tool=callgrind --collect-atstart=no \
    "--toggle-collect=client_cost::measured*" --callgrind-out-file="$work/out" "$binary" \
    2>"$work/log" >/dev/null || { cat "$work/log" >&2; exit 1; }
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$work/log"
}

few=500
many=2500
printf '%-13s %22s %14s\n' side "instructions per call" "/ floor's"
floor=""
for side in floor renewal standby floor-sqlx renewal-sqlx; do
  per_call=$(( ($(count "$side" "$many") - $(count "$side" "$few")) / (many - few) ))
  [ -n "$floor" ] || floor=$per_call
  awk -v side="$side" -v n="$per_call" -v floor="$floor" \
    'BEGIN { printf "%-13s %22d %13.2fx\n", side, n, n / floor }'
done
