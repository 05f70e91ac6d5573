#!/usr/bin/env bash
# Several `paywatch run` instances on one PostgreSQL (issue 8's figures):
#   1. failover: three instances watch Ethereum on an anvil that mines a
#      block a second, with the default lease settings (ttl 10 s, renewed
#      every 2 s, asked for every 1 s). The leader is SIGKILLed KILLS times
#      (20); each time the script measures, from the kill, when another
#      instance holds the lease and when its watcher first writes (the
#      chain_state row it updates at every poll). The killed instance is
#      started again each time, so three are always up. Median and worst.
#   2. throughput: intent creation (POST /v1/intents) against 1, 2 and 3
#      instances on one database, each with its own API listener; one wrk
#      per instance, CONNS connections shared among them, SECS seconds.
# Usage: bash benches/replicas.sh
# Env: KILLS (20), SECS (10), CONNS (16), POOL (90000), PAYWATCH_BIN (a
#      built binary; default: cargo build --release),
#      PAYWATCH_TEST_POSTGRES (postgres://postgres@127.0.0.1:5432)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
KILLS=${KILLS:-20}
SECS=${SECS:-10}
CONNS=${CONNS:-16}
POOL=${POOL:-90000}
PG=${PAYWATCH_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432}
ANVIL=${PAYWATCH_ANVIL:-${PAYWATCH_TOOLS:-/var/cache/paywatch-tools}/evm/node_modules/.bin/anvil}
ETH_PORT=${ETH_PORT:-18546}
API_PORT=${API_PORT:-18180}
log() { echo "[replicas] $*" >&2; }

command -v wrk >/dev/null || { log "installing wrk"; apt-get install -y wrk >&2; }
[ -x "$ANVIL" ] || bash "$REPO/deploy/install-nodes.sh" >&2
if [ -z "${PAYWATCH_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release --bin paywatch >&2)
fi
BIN=${PAYWATCH_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/paywatch}
WORK=$(mktemp -d /tmp/pw-replicas.XXXXXX)
DB=pwreplicas_$$
PIDS=()
APID=
cleanup() {
  # Only the script itself cleans up: a subshell ($(...), <(...)) that
  # exits under set -e runs this trap too.
  [ "$BASHPID" = "$$" ] || return 0
  for p in "${PIDS[@]}" $APID; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB" >&2 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
sql() { psql "$PG/$DB" -qAtc "$1"; }
# Before the first instance has migrated, the lease table is not there yet.
sql2() { psql "$PG/$DB" -qAtc "$1" 2>/dev/null || true; }
fresh_db() {
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $DB" >&2 2>/dev/null
  psql "$PG/postgres" -qc "CREATE DATABASE $DB" >&2
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
start_instance() { # index, config
  PAYWATCH__LEASES__INSTANCE="i$1" RUST_LOG=info,sqlx=warn \
    "$BIN" --config "$2" run >> "$WORK/i$1.log" 2>&1 &
  PIDS[$1]=$!
}
stop_all() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
  done
  PIDS=()
}

# --- 1. failover ----------------------------------------------------------
"$ANVIL" --host 127.0.0.1 --port "$ETH_PORT" --block-time 1 --silent > "$WORK/anvil.log" 2>&1 &
APID=$!
for _ in $(seq 100); do
  curl -fs -X POST -H 'content-type: application/json' \
    -d '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}' \
    "http://127.0.0.1:$ETH_PORT" >/dev/null 2>&1 && break
  sleep 0.1
done
fresh_db
cat > "$WORK/failover.toml" <<TOML
[database]
url = "$PG/$DB"
[rates.fixed]
ETH = "2000"
[networks.ethereum]
enabled = true
source = "node"
chain_id = 31337
finality = "confirmations"
confirmations = 2
poll_interval_ms = 200
[networks.ethereum.rpc]
url = "http://127.0.0.1:$ETH_PORT"
TOML
for i in 0 1 2; do start_instance "$i" "$WORK/failover.toml"; done
holder() { sql2 "SELECT holder || ' ' || token FROM watcher_leases WHERE network = 'ethereum' AND expires_at > CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"; }
for _ in $(seq 300); do [ -n "$(holder)" ] && break; sleep 0.1; done
[ -n "$(holder)" ] || { log "ERROR: no instance took the lease"; cat "$WORK"/i*.log >&2; exit 1; }
TAKEN=()
WROTE=()
for k in $(seq "$KILLS"); do
  # Kill at a random point within a renewal period, after the new leader
  # has been watching a while.
  sleep "$(( 3 + RANDOM % 3 )).$(( RANDOM % 10 ))"
  read -r name token < <(holder)
  idx=${name#i}
  t0=$(now_ms)
  kill -KILL "${PIDS[$idx]}"
  wait "${PIDS[$idx]}" 2>/dev/null || true
  taken=
  wrote=
  while :; do
    t=$(now_ms)
    if [ -z "$taken" ]; then
      tok2=
      read -r _ tok2 < <(holder) || true
      if [ -n "${tok2:-}" ] && [ "$tok2" != "$token" ]; then taken=$((t - t0)); fi
    fi
    if [ -n "$taken" ] && [ -z "$wrote" ]; then
      # The new leader's watcher has written once its state row moves
      # past the kill (it is written at every poll).
      up=$(sql "SELECT updated_at FROM chain_state WHERE network = 'ethereum'")
      [ "${up:-0}" -gt "$t0" ] && [ "$(sql "SELECT holder FROM watcher_leases WHERE network = 'ethereum'")" != "$name" ] \
        && wrote=$((t - t0))
    fi
    [ -n "$wrote" ] && break
    if [ $((t - t0)) -gt 60000 ]; then log "ERROR: no takeover within 60 s of kill $k"; tail -n 20 "$WORK"/i*.log >&2; exit 1; fi
    sleep 0.02
  done
  log "kill $k: $name (token $token) killed; lease taken after ${taken} ms, new leader writing after ${wrote} ms"
  TAKEN+=("$taken")
  WROTE+=("$wrote")
  start_instance "$idx" "$WORK/failover.toml"
done
stop_all
kill -TERM "$APID" 2>/dev/null || true; wait "$APID" 2>/dev/null || true; APID=
stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {m = (NR % 2) ? a[(NR+1)/2] : int((a[NR/2] + a[NR/2+1]) / 2); printf "median %d ms, worst %d ms, best %d ms over %d kills", m, a[NR], a[1], NR}'; }
echo "failover, lease taken by another instance: $(stats "${TAKEN[@]}")"
echo "failover, new leader's watcher writing:    $(stats "${WROTE[@]}")"

# --- 2. throughput with 1, 2, 3 instances --------------------------------
export PAYWATCH_TOKEN=replicas-token-$$
HASH=$(printf %s "$PAYWATCH_TOKEN" | "$BIN" hash-token)
[ -d "$WORK" ] || { log "ERROR: $WORK vanished"; exit 1; }
python3 "$REPO/benches/api/pool.py" "$POOL" > "$WORK/pool.txt"
for n in 1 2 3; do
  fresh_db
  for i in $(seq 0 $((n - 1))); do
    cat > "$WORK/api$i.toml" <<TOML
[database]
url = "$PG/$DB"
[api]
listen = "127.0.0.1:$((API_PORT + i))"
[api.tokens]
storefront = ["$HASH"]
[rates.fixed]
BTC = "50000"
[networks.bitcoin]
enabled = true
source = "devchain"
[devchain]
enabled = true
TOML
  done
  "$BIN" --config "$WORK/api0.toml" addresses import --network bitcoin --file "$WORK/pool.txt" >&2
  for i in $(seq 0 $((n - 1))); do
    RUST_LOG=warn "$BIN" --config "$WORK/api$i.toml" run 2>> "$WORK/api$i.log" &
    PIDS[$i]=$!
  done
  for i in $(seq 0 $((n - 1))); do
    for _ in $(seq 100); do curl -fs "http://127.0.0.1:$((API_PORT + i))/readyz" >/dev/null && break; sleep 0.1; done
  done
  conns=$(( CONNS / n ))
  WRKS=()
  for i in $(seq 0 $((n - 1))); do
    wrk -t1 -c"$conns" -d"${SECS}s" --latency -s "$REPO/benches/api/create.lua" \
      "http://127.0.0.1:$((API_PORT + i))" > "$WORK/wrk$n-$i.txt" &
    WRKS+=($!)
  done
  for w in "${WRKS[@]}"; do wait "$w"; done
  total=0; errors=0; p99s=
  for i in $(seq 0 $((n - 1))); do
    r=$(awk '/Requests\/sec/ {printf "%d", $2}' "$WORK/wrk$n-$i.txt")
    e=$(awk '/Non-2xx/ {print $NF}' "$WORK/wrk$n-$i.txt")
    total=$((total + r)); errors=$((errors + ${e:-0}))
    p99s="$p99s $(awk '$1 == "99%" {print $2}' "$WORK/wrk$n-$i.txt")"
  done
  made=$(sql "SELECT COUNT(*) FROM intents")
  distinct=$(sql "SELECT COUNT(DISTINCT address) FROM intents")
  echo "throughput, $n instance(s): $total intents/s created (p99 per instance:$p99s; non-2xx $errors; $made intents, $distinct distinct addresses)"
  [ "$made" = "$distinct" ] || { log "ERROR: an address was issued twice"; exit 1; }
  stop_all
done
