#!/usr/bin/env bash
# Overload: does a burst slow paywatch down without growing its memory
# without bound or dropping work? Two bursts, on PostgreSQL, loopback:
#   1. 100,000 transfers: the 1,000-block Litecoin regtest chain that
#      benches/peers/ltc-setup.sh builds once (~6 min; ~36k txs, ~120k
#      outputs). Every address paid in the range is imported as the litecoin
#      pool and issued to an intent (POST /v1/intents), so `paywatch run`
#      takes every output through watcher -> ingest -> reconcile. Measured:
#      wall time from start until the cursor is at the chain's end and the
#      reconcile queue is empty; transfers recorded against outputs paid
#      (must be equal); the daemon's peak RSS (VmHWM) over the catch-up,
#      beside the VmHWM of the same daemon, same intents, idle before it.
#   2. 10,000 API requests at once: a bitcoin devchain daemon with a pool of
#      BURST + 1,000 addresses; BURST connections start at the same moment,
#      each sending POST /v1/intents with an Idempotency-Key as soon as it is
#      connected, and sending it again (same key) if its connection fails,
#      as a storefront would. Checked: every request answered 201 (or 200,
#      the intent an earlier attempt made), the intents answered are exactly
#      the rows (none lost, none doubled), no address issued twice. Measured:
#      time until the last answer, latency p50/p99, failed connection
#      attempts, peak RSS during the burst beside idle.
# Prints one `burst, ...` line per burst; fails if any work was dropped.
# Usage: bash benches/burst.sh
# Env: BURST (10000), CONNS (16: connections issuing the litecoin pool),
#      RETRIES (8: sends of a request again, same Idempotency-Key, after its
#      connection failed), PORT (18090), PAYWATCH_TEST_POSTGRES,
#      PEERBENCH (benches/peers), RUNS (1: catch-ups of the 100,000
#      transfers, each from the same issued intents), PAYWATCH_BIN (a paywatch built elsewhere;
#      default: this tree's, built here), SKIP_TRANSFERS=1 / SKIP_API=1
#      (one burst only), KEEP=1 (keep the work directory with logs and the
#      RSS samples, <log>.rss: "ms rss_kib hwm_kib" every 100 ms).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PEERBENCH=${PEERBENCH:-$REPO/benches/peers}
. "$PEERBENCH/ltc-lib.sh"
PG=${PAYWATCH_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432}
BURST=${BURST:-10000}
CONNS=${CONNS:-16}
PORT=${PORT:-18090}
HELPER=$REPO/benches/burst/burst.py
log() { echo "[burst] $*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# The client and paywatch each hold BURST sockets at once.
NOFILE=$(ulimit -Hn)
[ "$NOFILE" != unlimited ] || NOFILE=1048576
ulimit -n "$NOFILE" 2>/dev/null || true
[ "$(ulimit -n)" -gt $((BURST + 1000)) ] || die "ulimit -n $(ulimit -n) is too low for $BURST connections"

TARGET=${CARGO_TARGET_DIR:-$REPO/target}
if [ -n "${PAYWATCH_BIN:-}" ]; then  # measure a paywatch built elsewhere
  BIN=$PAYWATCH_BIN
  [ -n "${SKIP_TRANSFERS:-}" ] || (cd "$REPO" && cargo build --release --example ltc_catchup >&2)
else
  (cd "$REPO" && cargo build --release --bin paywatch --example ltc_catchup >&2)
  BIN=$TARGET/release/paywatch
fi
EXAMPLE=$TARGET/release/examples/ltc_catchup

OUT=$(mktemp -d /tmp/pwburst.XXXXXX)
DBS=()
PW_PID=
RSS_PID=
stop_paywatch() {  # SIGTERM (graceful), SIGKILL after 30 s; the sampler ends with it
  if [ -n "$PW_PID" ]; then
    kill -TERM "$PW_PID" 2>/dev/null || true
    local i
    for i in $(seq 300); do kill -0 "$PW_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$PW_PID" 2>/dev/null; then
      log "paywatch did not stop in 30 s after SIGTERM; killing it"
      kill -KILL "$PW_PID" 2>/dev/null || true
    fi
    wait "$PW_PID" 2>/dev/null || true
  fi
  if [ -n "$RSS_PID" ]; then
    kill -TERM "$RSS_PID" 2>/dev/null || true
    wait "$RSS_PID" 2>/dev/null || true
  fi
  PW_PID= RSS_PID=
}
cleanup() {
  local rc=$?
  stop_paywatch
  ltc_stop
  local db
  for db in "${DBS[@]}"; do
    psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
  if [ "$rc" = 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$OUT"; else log "logs kept in $OUT"; fi
}
trap cleanup EXIT

new_db() {  # new_db NAME: a fresh database dropped on exit
  DBS+=("$1")
  psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1" >/dev/null
}
sql() { psql "$PG/$DB" -qAtc "$1"; }
# start_paywatch CONFIG LOG [VAR=VALUE...]: `paywatch run` with a VmRSS/VmHWM sampler.
start_paywatch() {
  local config=$1 logf=$2; shift 2
  ! port_busy "$PORT" || die "127.0.0.1:$PORT is already in use; set PORT"
  env "$@" RUST_LOG=${RUST_LOG:-warn} "$BIN" --config "$config" run 2>"$logf" &
  PW_PID=$!
  python3 "$HELPER" rss "$PW_PID" "$logf.rss" &
  RSS_PID=$!
  local i
  for i in $(seq 300); do
    curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$PW_PID" 2>/dev/null || die "paywatch exited; see $logf"
    sleep 0.1
  done
  die "paywatch did not answer /healthz; see $logf"
}
status_kib() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$PW_PID/status"; }
mib() { awk -v k="$1" 'BEGIN {printf "%.0f", k / 1024}'; }
wait_queue_empty() {  # up to $1 s
  local i
  for i in $(seq $(($1 * 5))); do
    [ "$(sql "SELECT COUNT(*) FROM reconcile_queue")" = 0 ] && return 0
    sleep 0.2
  done
  die "reconcile queue not empty after $1 s: $(sql "SELECT COUNT(*) FROM reconcile_queue") entries"
}
token_hash() { printf %s "$PAYWATCH_TOKEN" | "$BIN" hash-token; }
export PAYWATCH_TOKEN=burst-token-$$

# --- 1. 100,000 transfers ------------------------------------------------------
transfers_burst() {
  bash "$PEERBENCH/ltc-setup.sh" >&2
  local start end
  read -r start end < <(python3 -c "
import json; c=json.load(open('$CHAIN')); print(c['start_block'], c['end_block'])")
  ltc_start "$OUT/litecoind.log" -disablewallet
  log "litecoind pid $LTC_PID; collecting the addresses paid in $start..$end"
  "$EXAMPLE" collect --rpc "$RPC" --start "$start" --end "$end" --out "$OUT/watch.txt" >"$OUT/collect.json"
  local paid addresses
  read -r paid addresses < <(python3 -c "
import json; c=json.load(open('$OUT/collect.json')); print(c['outputs'], c['addresses'])")

  DB=pwburst_ltc_$$
  new_db "$DB"
  cat >"$OUT/ltc.toml" <<TOML
[database]
url = "$PG/$DB"
[api]
listen = "127.0.0.1:$PORT"
[api.tokens]
storefront = ["$(token_hash)"]
[intents]
# Long enough that no intent expires during the run: expiry is not measured.
expiry_secs = 86400
[rates.fixed]
LTC = "100"
[networks.litecoin]
enabled = true
source = "node"
chain = "regtest"
start_height = $start
[networks.litecoin.rpc]
url = "http://127.0.0.1:$RPCPORT"
user = "$RPCUSER"
password = "$RPCPASS"
TOML
  "$BIN" --config "$OUT/ltc.toml" addresses import --network litecoin --file "$OUT/watch.txt" >&2
  [ "$(sql "SELECT COUNT(*) FROM addresses WHERE network = 'litecoin'")" = "$addresses" ] ||
    die "imported $(sql "SELECT COUNT(*) FROM addresses") addresses of $addresses"

  # Issue every pool address through the API. The node is out of reach of
  # this daemon (its RPC URL points at a closed port), so nothing is caught
  # up yet: the watcher retries while the intents are made.
  local offline=(PAYWATCH__NETWORKS__LITECOIN__RPC__URL=http://127.0.0.1:9)
  start_paywatch "$OUT/ltc.toml" "$OUT/issue.log" "${offline[@]}"
  log "issuing $addresses intents over $CONNS connections"
  python3 "$HELPER" post "http://127.0.0.1:$PORT" --count "$addresses" --conns "$CONNS" \
    --asset LTC --network litecoin --prefix ltc >"$OUT/issue.json"
  python3 -c "
import json; r=json.load(open('$OUT/issue.json')); r.pop('ids')
print('[burst] issued:', json.dumps(r))" >&2
  wait_queue_empty 600
  stop_paywatch
  local intents free
  intents=$(sql "SELECT COUNT(*) FROM intents WHERE network = 'litecoin'")
  free=$(sql "SELECT COUNT(*) FROM addresses WHERE network = 'litecoin' AND issued_at IS NULL")
  [ "$intents" = "$addresses" ] && [ "$free" = 0 ] ||
    die "$intents intents for $addresses pool addresses ($free never issued)"

  # Idle: a fresh daemon, same config and intents, node still out of reach:
  # it loads the watch set and reconciles nothing new.
  start_paywatch "$OUT/ltc.toml" "$OUT/idle.log" "${offline[@]}"
  sleep "${IDLE_SECS:-10}"
  local idle_hwm idle_rss
  idle_hwm=$(status_kib VmHWM)
  idle_rss=$(status_kib VmRSS)
  [ "$(sql "SELECT COALESCE(MAX(cursor_height), 0) FROM chain_state WHERE network = 'litecoin'")" -lt "$start" ] ||
    die "the idle daemon caught up: it was meant to have no node"
  stop_paywatch

  # The burst: the same daemon with the node in reach, from start_height;
  # each run from a copy of the database as issuing left it.
  psql "$PG/postgres" -qAtc "CREATE DATABASE ${DB}_issued TEMPLATE $DB" >/dev/null
  DBS+=("${DB}_issued")
  local run t0 cursor caught ms
  for run in $(seq "${RUNS:-1}"); do
    if [ "$run" -gt 1 ]; then
      psql "$PG/postgres" -qAtc "DROP DATABASE $DB WITH (FORCE)" -c "CREATE DATABASE $DB TEMPLATE ${DB}_issued" >/dev/null
    fi
    log "run $run/${RUNS:-1}: catching up $start..$end, $paid outputs to $addresses issued addresses"
    caught=0
    t0=$(date +%s%N)
    start_paywatch "$OUT/ltc.toml" "$OUT/run.log"
    while :; do
      cursor=$(sql "SELECT COALESCE(MAX(cursor_height), 0) FROM chain_state WHERE network = 'litecoin'")
      if [ "$cursor" -ge "$end" ]; then
        [ "$caught" != 0 ] || caught=$(( ($(date +%s%N) - t0) / 1000000 ))
        [ "$(sql "SELECT COUNT(*) FROM reconcile_queue")" = 0 ] && break
      fi
      kill -0 "$PW_PID" 2>/dev/null || die "paywatch exited during the catch-up; see $OUT/run.log"
      [ $(( ($(date +%s%N) - t0) / 1000000000 )) -lt "${MAX_SECS:-1800}" ] ||
        die "not done after ${MAX_SECS:-1800} s: cursor $cursor of $end, $(sql "SELECT COUNT(*) FROM reconcile_queue") queued"
      sleep 0.2
    done
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    local hwm rss_end
    hwm=$(status_kib VmHWM)
    sleep "${SETTLE_SECS:-5}"
    rss_end=$(status_kib VmRSS)
    stop_paywatch
    local recorded examined
    recorded=$(sql "SELECT COUNT(*) FROM transfers WHERE network = 'litecoin' AND orphaned_at IS NULL")
    examined=$(sql "SELECT COUNT(*) FROM intents WHERE network = 'litecoin' AND (amount_final > 0 OR amount_pending > 0)")
    sql "SELECT status || COALESCE('/' || exception, ''), COUNT(*) FROM intents GROUP BY 1 ORDER BY 1" |
      tr '\n' ' ' | sed 's/^/[burst] intents by status: /' >&2
    echo >&2
    "$BIN" --config "$OUT/ltc.toml" check >&2 || die "paywatch check found money-rule violations"
    local secs
    secs=$(awk -v m="$ms" 'BEGIN {printf "%.1f", m / 1000}')
    echo "burst, $paid transfers: $recorded transfers recorded of $paid paid, $examined of $addresses intents" \
      "credited, catch-up+reconcile $secs s ($(awk -v c="$caught" 'BEGIN {printf "%.1f", c / 1000}') s to the" \
      "chain's end; $(awk -v n="$recorded" -v m="$ms" 'BEGIN {printf "%.0f", n * 1000 / m}') transfers/s)," \
      "peak RSS $(mib "$hwm") MiB (idle $(mib "$idle_hwm") MiB peak, $(mib "$idle_rss") MiB resident;" \
      "$(mib "$rss_end") MiB resident ${SETTLE_SECS:-5} s after)"
    [ "$recorded" = "$paid" ] || die "$recorded transfers recorded, $paid outputs paid: work was dropped"
    [ "$examined" = "$addresses" ] || die "$examined of $addresses paid intents show the money"
  done
  ltc_stop
}

# --- 2. 10,000 API requests at once --------------------------------------------
api_burst() {
  DB=pwburst_api_$$
  new_db "$DB"
  cat >"$OUT/api.toml" <<TOML
[database]
url = "$PG/$DB"
[api]
listen = "127.0.0.1:$PORT"
[api.tokens]
storefront = ["$(token_hash)"]
[rates.fixed]
BTC = "50000"
[networks.bitcoin]
enabled = true
source = "devchain"
[devchain]
enabled = true
TOML
  local pool=$((BURST + 1000))
  python3 "$REPO/benches/api/pool.py" "$pool" >"$OUT/pool.txt"
  "$BIN" --config "$OUT/api.toml" addresses import --network bitcoin --file "$OUT/pool.txt" >&2
  start_paywatch "$OUT/api.toml" "$OUT/api.log"
  sleep "${IDLE_SECS:-10}"
  local idle_hwm
  idle_hwm=$(status_kib VmHWM)
  log "$BURST POST /v1/intents at once"
  python3 "$HELPER" post "http://127.0.0.1:$PORT" --count "$BURST" --conns "$BURST" --at-once \
    --retries "${RETRIES:-8}" --asset BTC --network bitcoin --prefix api >"$OUT/api.json"
  local hwm rss_end
  hwm=$(status_kib VmHWM)
  wait_queue_empty 600
  sleep "${SETTLE_SECS:-5}"
  rss_end=$(status_kib VmRSS)
  stop_paywatch
  python3 -c "
import json; r=json.load(open('$OUT/api.json')); r.pop('ids')
print('[burst] answers:', json.dumps(r))" >&2
  local answered made replayed others failed secs p50 p99 rows distinct ids_match
  read -r answered made replayed others failed secs p50 p99 < <(python3 -c "
import json; r=json.load(open('$OUT/api.json')); s=r['status']
print(sum(v for k, v in s.items() if k != 'no answer'), s.get('201', 0), s.get('200', 0),
      ','.join(f'{k}:{v}' for k, v in sorted(s.items()) if k not in ('200', '201')) or 'none',
      sum(r['transport_failures'].values()), r['seconds'], r['p50_s'], r['p99_s'])")
  rows=$(sql "SELECT COUNT(*) FROM intents")
  distinct=$(sql "SELECT COUNT(DISTINCT address) FROM intents")
  # The intents answered (made now, or by an earlier attempt under the same
  # key) are exactly the rows: none lost, none made twice or unanswered.
  ids_match=$(python3 -c "
import json, sys; ids=json.load(open('$OUT/api.json'))['ids']
rows=[int(x) for x in sys.stdin.read().split()]
print('yes' if sorted(ids) == sorted(rows) else 'no')" < <(sql "SELECT id FROM intents"))
  echo "burst, $BURST API requests at once: $answered answered ($made created, $replayed replayed after a failed" \
    "connection, other: $others; $failed connection attempts failed and were retried) in $secs s (p50 $p50 s," \
    "p99 $p99 s), $rows intents, $distinct distinct addresses, peak RSS $(mib "$hwm") MiB" \
    "(idle $(mib "$idle_hwm") MiB; $(mib "$rss_end") MiB resident ${SETTLE_SECS:-5} s after)"
  [ "$answered" = "$BURST" ] || die "$((BURST - answered)) requests got no answer"
  [ "$others" = none ] || die "answers other than 201/200: $others"
  [ "$ids_match" = yes ] && [ "$rows" = "$BURST" ] || die "$BURST requests answered, $rows intent rows"
  [ "$distinct" = "$rows" ] || die "$((rows - distinct)) addresses issued twice"
}

if [ -z "${SKIP_TRANSFERS:-}" ]; then transfers_burst; fi
if [ -z "${SKIP_API:-}" ]; then api_burst; fi
