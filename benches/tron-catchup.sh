#!/usr/bin/env bash
# Tron catch-up on the testkit Tron node (java-tron's gRPC API from an
# in-memory chain), served by its own process so its CPU is measured apart:
#   tron_catchup serve : genesis 70,000,000, USDT at TR7NHqjeKQxGTCi8q8ZY4pL8otSzgjLj6t,
#                        then fill_blocks(BLOCKS, TXS) (4/10 TRX transfers, 4/10 TRC-20,
#                        1/10 reverted TRC-20, 1/10 contract-made TRC-20, each to a new
#                        address), everything solidified
#   floor (sequential) : GetBlockByLimitNext2 per 100 blocks + GetTransactionInfoByBlockNum
#                        per block, decoded into the prost messages, one connection, one call at a time
#   floor (concurrent) : the same with TronSource's concurrency: 2 ranges in flight,
#                        8 info calls in flight in each
#   paywatch source    : TronSource + canonical stream (fetch, decode, filter), every paid address watched
#   paywatch source (slice) : the same watching the daemons' slice: the per-block cost without
#                        the per-transfer cost of 9 payments in 10 transactions
#   paywatch daemon (SQLite)     : the watcher as `paywatch run` runs it, a slice watched
#   paywatch daemon (PostgreSQL)
# Every case checks its count: the floors every transaction, paywatch source
# every payment (TRX with a nonzero amount + nonzero Transfer logs of
# successful transactions: 9 in 10 transactions), the daemons the slice's payments.
# Two timings per case: the process wall (benchlib: start-up and loading the
# watch set included) and the catch-up alone, measured inside the process
# with its CPU (`cpu_s`, all threads); the final line uses the catch-up.
# Usage: bash benches/tron-catchup.sh
# Env: BLOCKS (10000), TXS (300 per block), RUNS (3), SLICE_EVERY (100: the
#      daemons watch one paid address in this many), PEERBENCH (benches/peers),
#      PEERBENCH_DIR (/tmp/peerbench), PAYWATCH_TEST_POSTGRES (postgres://postgres@127.0.0.1:5432),
#      PW_BLOCKS_PER_REQUEST (100), PW_BATCHES_IN_FLIGHT (2), PW_INFOS_IN_FLIGHT (8):
#      the TronConfig the example passes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PEERBENCH=${PEERBENCH:-$REPO/benches/peers}
ROOT=${PEERBENCH_DIR:-/tmp/peerbench}
D=$ROOT/tron
BLOCKS=${BLOCKS:-10000}
TXS=${TXS:-300}
RUNS=${RUNS:-3}
SLICE_EVERY=${SLICE_EVERY:-100}
PG=${PAYWATCH_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432}
PW_TUNING=(--blocks-per-request "${PW_BLOCKS_PER_REQUEST:-100}" --batches-in-flight "${PW_BATCHES_IN_FLIGHT:-2}"
           --infos-in-flight "${PW_INFOS_IN_FLIGHT:-8}")
log() { echo "[tron-catchup] $*" >&2; }

(cd "$REPO" && cargo build --release --example tron_catchup >&2)
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/tron_catchup

OUT=$D/results/paywatch-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RES=$OUT/results.jsonl
INNER=$OUT/catchup.jsonl

# --- the node, in its own process ----------------------------------------------
log "building the chain: $BLOCKS blocks × $TXS transactions (10,000 × 300: ~10 s and ~1.7 GB on an idle machine)"
timeout 7200 "$BIN" serve --blocks "$BLOCKS" --txs "$TXS" --port-file "$OUT/node.ports" >"$OUT/node.log" 2>&1 &
TPID=$!   # the `timeout` wrapper; SIGTERM to it is forwarded to the node
cleanup() {
  if kill -0 "$TPID" 2>/dev/null; then kill -TERM "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true; fi
}
trap cleanup EXIT
for _ in $(seq 12000); do
  [ -s "$OUT/node.ports" ] && break
  kill -0 "$TPID" 2>/dev/null || { log "ERROR: the node exited: $(cat "$OUT/node.log")"; exit 1; }
  sleep 0.1
done
[ -s "$OUT/node.ports" ] || { log "ERROR: no port file after 20 min"; exit 1; }
read -r URL SURL START END TXTOTAL < "$OUT/node.ports"
NPID=$(python3 "$PEERBENCH/benchlib.py" childpid "$TPID")
NBLOCKS=$((END - START + 1))
log "$(cat "$OUT/node.log")"
log "node pid $NPID; range $START..$END; results in $OUT"

"$BIN" collect --url "$URL" --start "$START" --end "$END" --out "$OUT/watch.txt" > "$OUT/collect.json"
read -r PAYMENTS TRX TOKENS < <(python3 -c "
import json; j=json.load(open('$OUT/collect.json')); print(j['payments'], j['trx_transfers'], j['token_transfers'])")
# fill_blocks: transaction n pays iff n % 10 != 8 (the reverted TRC-20 one)
WANT=$(python3 -c "n=$TXTOTAL; r=n%10; print(9*(n//10) + r - (r > 8))")
[ "$PAYMENTS" = "$WANT" ] || { log "ERROR: collect found $PAYMENTS payments, fill_blocks makes $WANT"; exit 1; }
# A merchant's slice: one paid address in SLICE_EVERY, with however many payments each got.
awk -v k="$SLICE_EVERY" 'NR % k == 0 {print $1}' "$OUT/watch.txt.counts" > "$OUT/watch-slice.txt"
SLICE_PAYMENTS=$(awk -v k="$SLICE_EVERY" 'NR % k == 0 {s += $2} END {print s + 0}' "$OUT/watch.txt.counts")
SLICE=$(wc -l < "$OUT/watch-slice.txt")
WATCHED=$(wc -l < "$OUT/watch.txt")
log "$TXTOTAL transactions; watching $WATCHED addresses paid $PAYMENTS times ($TRX TRX, $TOKENS USDT); slice: $SLICE addresses, $SLICE_PAYMENTS payments"

measure() {  # measure LABEL EXPECT COUNT-PYTHON-EXPR -- CMD...   (expr over j = the JSON line printed)
  local label=$1 expect=$2 expr=$3; shift 4
  local rc=0
  python3 "$PEERBENCH/benchlib.py" measure --label "$label" --out "$RES" --server-pid "$NPID" \
    --stdout "$OUT/last.json" --stderr "$OUT/stderr.log" --expect "$expect" \
    --count-cmd "python3 -c \"import json;j=json.load(open('$OUT/last.json'));print($expr)\"" -- "$@" || rc=$?
  if [ "$rc" = 0 ]; then
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['label']=sys.argv[2]; print(json.dumps(j))" \
      "$OUT/last.json" "$label" >> "$INNER"
  else
    log "FAILED ($rc): $label; see $OUT/stderr.log"
  fi
}
pg_db() { psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS pwbench_tron" -c "CREATE DATABASE pwbench_tron" >/dev/null 2>&1; }

FLOOR1="floor: GetBlockByLimitNext2 ×100 + GetTransactionInfoByBlockNum per block, sequential, one connection"
FLOOR2="floor: the same, 2 ranges × 8 info calls in flight (TronSource's concurrency), one connection"
SRC="paywatch source: TronSource + canonical stream, all $WATCHED watched"
SRCS="paywatch source (slice): TronSource + canonical stream, $SLICE watched"
SQ="paywatch daemon, $SLICE watched: watcher + ingest into SQLite"
PQ="paywatch daemon, $SLICE watched: watcher + ingest into PostgreSQL"
for i in $(seq "$RUNS"); do
  log "run $i/$RUNS"
  measure "$FLOOR1" "$TXTOTAL" "j['txs']" -- \
    timeout 1800 "$BIN" floor --url "$URL" --start "$START" --end "$END" --ranges-in-flight 1 --infos-in-flight 1
  measure "$FLOOR2" "$TXTOTAL" "j['txs']" -- \
    timeout 1800 "$BIN" floor --url "$URL" --start "$START" --end "$END" --ranges-in-flight 2 --infos-in-flight 8
  measure "$SRC" "$PAYMENTS" "j['transfers']" -- \
    timeout 1800 "$BIN" source --url "$URL" --solidity-url "$SURL" --start "$START" --end "$END" \
      --watch "$OUT/watch.txt" "${PW_TUNING[@]}"
  measure "$SRCS" "$SLICE_PAYMENTS" "j['transfers']" -- \
    timeout 1800 "$BIN" source --url "$URL" --solidity-url "$SURL" --start "$START" --end "$END" \
      --watch "$OUT/watch-slice.txt" "${PW_TUNING[@]}"
  rm -f "$OUT/bench.db"*
  measure "$SQ" "$SLICE_PAYMENTS" "j['transfers']" -- \
    timeout 1800 "$BIN" daemon --url "$URL" --solidity-url "$SURL" --start "$START" --end "$END" \
      --watch "$OUT/watch-slice.txt" --db "sqlite://$OUT/bench.db" "${PW_TUNING[@]}"
  pg_db
  measure "$PQ" "$SLICE_PAYMENTS" "j['transfers']" -- \
    timeout 1800 "$BIN" daemon --url "$URL" --solidity-url "$SURL" --start "$START" --end "$END" \
      --watch "$OUT/watch-slice.txt" --db "$PG/pwbench_tron" "${PW_TUNING[@]}"
done
psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS pwbench_tron" >/dev/null 2>&1 || true
rm -f "$OUT/bench.db"*
cleanup; trap - EXIT

RC=0
{
  echo "Tron (paywatch-testkit node in its own process), $NBLOCKS blocks $START..$END, $TXTOTAL txs" \
       "($TXS a block), $PAYMENTS payments ($TRX TRX + $TOKENS USDT); $RUNS runs each." \
       "count: floors = txs; paywatch source = payments; source (slice) and daemons = the slice's payments." \
       "Process wall (start-up and loading the watch set included); node CPU from /proc."
  echo
  python3 "$PEERBENCH/benchlib.py" summary "$RES" --blocks "$NBLOCKS" --items "$TXTOTAL" --items-name "txs" \
    --json "$OUT/summary.json"
} >"$OUT/summary.md" || RC=$?
python3 - "$INNER" "$NBLOCKS" "$OUT/summary.json" >>"$OUT/summary.md" <<'PYEOF' || RC=$?
import json, statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j["label"] not in rows:
        order.append(j["label"])
    rows.setdefault(j["label"], []).append(j)
blocks = int(sys.argv[2])
node = {c["label"]: c.get("server_cpu_s") for c in json.load(open(sys.argv[3]))["cases"]}
print()
print("Catch-up alone, timed inside the process (medians); client CPU = the process's own, all threads:")
print()
print("| case | catch-up s | blocks/s | client CPU s | blocks per client CPU-s | node CPU s |")
print("|---|---|---|---|---|---|")
med = {}
for label in order:
    s = statistics.median(j["seconds"] for j in rows[label])
    cpu = max(statistics.median(j["cpu_s"] for j in rows[label]), 0.01)
    med[label] = (s, cpu)
    n = node.get(label)
    print(f"| {label} | {s:.2f} | {blocks / s:,.0f} | {cpu:.2f} | {blocks / cpu:,.0f} |"
          f" {'n/a' if n is None else f'{n:.2f}'} |")
by = lambda p: next((k for k in order if k.startswith(p)), None)
src, seq, conc = by("paywatch source:"), by("floor: GetBlock"), by("floor: the same")
floors = [k for k in (seq, conc) if k]
print()
for label in order:
    if label.startswith(("paywatch daemon", "paywatch source (slice)")):
        s, cpu = med[label]
        print(f"TRON CATCHUP {'daemon' if 'daemon' in label else 'source (slice)'}: {label}: {s:.2f} s ({blocks / s:,.0f} blocks/s, {blocks / s * 3:,.0f}× mainnet), "
              f"client CPU {cpu:.2f} s ({blocks / cpu:,.0f} blocks per CPU-second)")
if src and floors:
    best = min(floors, key=lambda k: med[k][0])
    s, cpu = med[src]
    fs = med[best][0]
    print(f"TRON CATCHUP: paywatch source {s:.2f} s ({blocks / s:,.0f} blocks/s) = {s / fs:.2f}× floor; "
          f"{blocks / s * 3:,.0f}× faster than mainnet's 3 s blocks; "
          f"floor {fs:.2f} s ({'sequential' if best == seq else 'concurrent'}, the faster); "
          f"paywatch client CPU {cpu:.2f} s = {blocks / cpu:,.0f} blocks per CPU-second "
          f"({blocks / cpu * 3:,.0f}× mainnet's block rate on one core)")
PYEOF
cat "$OUT/summary.md"
ln -sfn "$OUT" "$D/results/latest-paywatch"
exit "$RC"
