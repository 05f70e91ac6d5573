#!/usr/bin/env bash
# Ethereum catch-up, side by side in one run on the same 5,003-block anvil
# chain (benches/peers/eth-setup.sh builds it once, ~1 min):
#   floor : eth-floor.py, stdlib getLogs per 1,000 blocks + getBlockByNumber(n,true) batches of 100
#   peer  : ethereum-etl export_token_transfers -b 5000 -w 2 --tokens A B (as eth-peers.sh)
#   peer (block half): ethereum-etl export_blocks_and_transactions -b 100 -w 5 (as eth-peers.sh)
#   paywatch source          : EvmSource + canonical stream (fetch, decode, filter), everything watched
#   paywatch daemon (SQLite) : the watcher as `paywatch run` runs it, a slice watched, writing to SQLite
#   paywatch daemon (PostgreSQL)
# Every case checks its count: the floor and paywatch source find every
# payment (token Transfer logs + ETH-carrying transactions), ethereum-etl
# its token transfers / transactions, the daemons the slice's payments.
# Usage: bash benches/eth-catchup.sh
# Env: RUNS (3), PEERBENCH (benches/peers), PEERBENCH_DIR (/tmp/peerbench),
#      ETH_PORT (18545), PAYWATCH_TEST_POSTGRES (postgres://postgres@127.0.0.1:5432),
#      PW_BLOCKS_PER_REQUEST (100), PW_BATCHES_IN_FLIGHT (2): the EvmConfig the example passes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PEERBENCH=${PEERBENCH:-$REPO/benches/peers}
ROOT=${PEERBENCH_DIR:-/tmp/peerbench}
D=$ROOT/eth
PORT=${ETH_PORT:-18545}
RPC=http://127.0.0.1:$PORT
STATE=$D/state.json
CHAIN=$D/chain.json
NODEBIN=$D/node_modules/.bin
ETL=$ROOT/venv-ethetl/bin/ethereumetl
RUNS=${RUNS:-3}
PG=${PAYWATCH_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432}
PW_TUNING=(--blocks-per-request "${PW_BLOCKS_PER_REQUEST:-100}" --batches-in-flight "${PW_BATCHES_IN_FLIGHT:-2}")
log() { echo "[eth-catchup] $*" >&2; }

bash "$PEERBENCH/eth-setup.sh" >&2
(cd "$REPO" && cargo build --release --example eth_catchup >&2)
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/eth_catchup
if timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; then
  log "ERROR: something already listens on 127.0.0.1:$PORT; stop it or set ETH_PORT"; exit 1
fi
read -r START END BLOCKS TRANSFERS ETHTX TXS A B < <(python3 -c "
import json; c=json.load(open('$CHAIN'))
print(c['start_block'], c['end_block'], c['end_block']-c['start_block']+1, c['token_transfers'],
      c['eth_transfers'], c['txs'], c['tokens']['A'], c['tokens']['B'])")

OUT=$D/results/paywatch-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RES=$OUT/results.jsonl

# --- anvil from the saved state, as eth-peers.sh starts it ---------------------
timeout 7200 "$NODEBIN/anvil" --host 127.0.0.1 --port "$PORT" --chain-id 31337 \
  --load-state "$STATE" --prune-history --silent >"$OUT/anvil.log" 2>&1 &
TPID=$!   # the `timeout` wrapper; SIGTERM to it is forwarded to anvil
cleanup() {
  if kill -0 "$TPID" 2>/dev/null; then kill -TERM "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true; fi
}
trap cleanup EXIT
H=
for _ in $(seq 600); do
  H=$(timeout 2 "$NODEBIN/cast" block-number --rpc-url "$RPC" 2>/dev/null || true)
  [ "$H" = "$END" ] && break
  sleep 0.1
done
[ "$H" = "$END" ] || { log "ERROR: anvil head '$H' != $END"; exit 1; }
APID=$(python3 "$PEERBENCH/benchlib.py" childpid "$TPID")
log "anvil pid $APID; range $START..$END; results in $OUT"

"$BIN" collect --rpc "$RPC" --start "$START" --end "$END" --tokens "$A,$B" --out "$OUT/watch.txt" > "$OUT/collect.json"
PAYMENTS=$(python3 -c "import json; print(json.load(open('$OUT/collect.json'))['payments'])")
[ "$PAYMENTS" = $((TRANSFERS + ETHTX)) ] || { log "ERROR: collect found $PAYMENTS payments, chain.json says $TRANSFERS + $ETHTX"; exit 1; }
# A merchant's slice: one address in 20, with however many payments each got.
awk 'NR % 20 == 0 {print $1}' "$OUT/watch.txt.counts" > "$OUT/watch-slice.txt"
SLICE_PAYMENTS=$(awk 'NR % 20 == 0 {s += $2} END {print s}' "$OUT/watch.txt.counts")
SLICE=$(wc -l < "$OUT/watch-slice.txt")
log "watching $(wc -l < "$OUT/watch.txt") addresses paid $PAYMENTS times (slice: $SLICE addresses, $SLICE_PAYMENTS payments)"

measure() {  # measure LABEL EXPECT COUNT-PYTHON-EXPR -- CMD...   (expr over j = the JSON line printed)
  local label=$1 expect=$2 expr=$3; shift 4
  python3 "$PEERBENCH/benchlib.py" measure --label "$label" --out "$RES" --server-pid "$APID" \
    --stdout "$OUT/last.json" --stderr "$OUT/stderr.log" --expect "$expect" \
    --count-cmd "python3 -c \"import json;j=json.load(open('$OUT/last.json'));print($expr)\"" -- "$@"
}
pg_db() { psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS pwbench_eth" -c "CREATE DATABASE pwbench_eth" >/dev/null 2>&1; }
# web3.py 5 (inside ethereum-etl) only accepts checksummed addresses
TOKARGS=(--tokens "$("$NODEBIN/cast" to-check-sum-address "$A")" --tokens "$("$NODEBIN/cast" to-check-sum-address "$B")")

FLOOR_LABEL="floor: stdlib getLogs per 1000 blocks + getBlockByNumber(n,true) batches of 100"
ETL_LABEL="peer: ethereum-etl export_token_transfers -b 5000 -w 2 --tokens A B"
ETLB_LABEL="peer (block half): ethereum-etl export_blocks_and_transactions -b 100 -w 5"
SRC_LABEL="paywatch source: EvmSource + canonical stream, all $(wc -l < "$OUT/watch.txt") watched"
for i in $(seq "$RUNS"); do
  log "run $i/$RUNS"
  measure "$FLOOR_LABEL" "$PAYMENTS" "j['token_transfers']+j['eth_transfers']" -- \
    timeout 900 python3 "$PEERBENCH/eth-floor.py" "$CHAIN" --rpc "$RPC"
  rm -f "$OUT/etl.csv"
  python3 "$PEERBENCH/benchlib.py" measure --label "$ETL_LABEL" --out "$RES" --server-pid "$APID" \
    --expect "$TRANSFERS" --count-cmd "tail -n +2 '$OUT/etl.csv' | wc -l" --stderr "$OUT/etl.log" -- \
    timeout 900 "$ETL" export_token_transfers --start-block "$START" --end-block "$END" \
      --batch-size 5000 --max-workers 2 "${TOKARGS[@]}" --provider-uri "$RPC" --output "$OUT/etl.csv"
  rm -f "$OUT/etl-blocks.csv" "$OUT/etl-txs.csv"
  python3 "$PEERBENCH/benchlib.py" measure --label "$ETLB_LABEL" --out "$RES" --server-pid "$APID" \
    --expect "$TXS" --count-cmd "tail -n +2 '$OUT/etl-txs.csv' | wc -l" --stderr "$OUT/etl.log" -- \
    timeout 900 "$ETL" export_blocks_and_transactions --start-block "$START" --end-block "$END" \
      --batch-size 100 --max-workers 5 --provider-uri "$RPC" \
      --blocks-output "$OUT/etl-blocks.csv" --transactions-output "$OUT/etl-txs.csv"
  measure "$SRC_LABEL" "$PAYMENTS" "j['transfers']" -- \
    "$BIN" source --rpc "$RPC" --start "$START" --end "$END" --tokens "$A,$B" --watch "$OUT/watch.txt" "${PW_TUNING[@]}"
  rm -f "$OUT/bench.db"*
  measure "paywatch daemon, $SLICE watched: watcher + ingest into SQLite" "$SLICE_PAYMENTS" "j['transfers']" -- \
    "$BIN" daemon --rpc "$RPC" --start "$START" --end "$END" --tokens "$A,$B" --watch "$OUT/watch-slice.txt" \
      --db "sqlite://$OUT/bench.db" "${PW_TUNING[@]}"
  pg_db
  measure "paywatch daemon, $SLICE watched: watcher + ingest into PostgreSQL" "$SLICE_PAYMENTS" "j['transfers']" -- \
    "$BIN" daemon --rpc "$RPC" --start "$START" --end "$END" --tokens "$A,$B" --watch "$OUT/watch-slice.txt" \
      --db "$PG/pwbench_eth" "${PW_TUNING[@]}"
done
psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS pwbench_eth" >/dev/null 2>&1 || true
rm -f "$OUT/bench.db"*
cleanup; trap - EXIT

RC=0
{
  echo "Ethereum (anvil $("$NODEBIN/anvil" --version | head -1 | awk '{print $3}'), $BLOCKS blocks $START..$END," \
       "$TRANSFERS token transfers + $ETHTX ETH transfers = $PAYMENTS payments, $TXS txs; $RUNS runs each." \
       "count: floor and paywatch source = payments; ethereum-etl = token transfers / txs; daemons = the slice's payments"
  echo
  python3 "$PEERBENCH/benchlib.py" summary "$RES" --blocks "$BLOCKS" --items "$PAYMENTS" --items-name "payments" \
    --json "$OUT/summary.json"
} >"$OUT/summary.md" || RC=$?
cat "$OUT/summary.md"
python3 - "$OUT/summary.json" <<'PYEOF'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
by = lambda p: next(c for c in cases if c["label"].startswith(p))
floor, etl, etlb, src = by("floor"), by("peer:"), by("peer (block half)"), by("paywatch source")
s = src["median_s"]
print(f"ETH CATCHUP: paywatch source {s:.2f} s = {s / floor['median_s']:.2f}× floor ({floor['median_s']:.2f} s), "
      f"{etl['median_s'] / s:.1f}× faster than ethereum-etl tokens ({etl['median_s']:.2f} s), "
      f"{(etl['median_s'] + etlb['median_s']) / s:.1f}× faster than both ethereum-etl exports combined "
      f"({etl['median_s'] + etlb['median_s']:.2f} s)")
PYEOF
ln -sfn "$OUT" "$D/results/latest-paywatch"
exit "$RC"
