#!/usr/bin/env bash
# Litecoin catch-up, side by side in one run on the same 1,000-block regtest
# chain (benches/peers/ltc-setup.sh builds it once, ~6 min):
#   floor : ltc-floor.py, stdlib batched getblockhash + getblock(h,0)
#   peer  : bitcoin-etl export_blocks_and_transactions --chain litecoin -b 50 -w 2
#   paywatch source          : node source + canonical stream (fetch, parse, verify, filter)
#   paywatch daemon (SQLite) : the watcher as `paywatch run` runs it, writing to SQLite
#   paywatch daemon (PostgreSQL)
# Every address paid by a non-coinbase output in the range is watched, so
# paywatch records every payment: its count is transfers, the others' txs.
# Usage: bash benches/ltc-catchup.sh   Env: RUNS (3), PEERBENCH (benches/peers)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PEERBENCH=${PEERBENCH:-$REPO/benches/peers}
. "$PEERBENCH/ltc-lib.sh"
RUNS=${RUNS:-3}
PG=${PAYWATCH_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432}
log() { echo "[ltc-catchup] $*" >&2; }

bash "$PEERBENCH/ltc-setup.sh" >&2
(cd "$REPO" && cargo build --release --example ltc_catchup >&2)
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/examples/ltc_catchup
read -r START END BLOCKS TXS < <(python3 -c "
import json; c=json.load(open('$CHAIN')); print(c['start_block'], c['end_block'], c['blocks'], c['txs'])")

OUT=$L/results/paywatch-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RES=$OUT/results.jsonl
ltc_start "$OUT/litecoind.log" -disablewallet
trap ltc_stop EXIT
log "litecoind pid $LTC_PID; range $START..$END; results in $OUT"

"$BIN" collect --rpc "$RPC" --start "$START" --end "$END" --out "$OUT/watch.txt" > "$OUT/collect.json"
PAYMENTS=$(python3 -c "import json; print(json.load(open('$OUT/collect.json'))['outputs'])")
# A merchant's slice: one address in 121, each paid once in the range.
awk 'NR % 121 == 0' "$OUT/watch.txt" > "$OUT/watch-slice.txt"
SLICE=$(wc -l < "$OUT/watch-slice.txt")
log "watching $(wc -l < "$OUT/watch.txt") addresses paid by $PAYMENTS outputs (slice: $SLICE)"

measure() {  # measure LABEL EXPECT COUNTKEY -- CMD...
  local label=$1 expect=$2 key=$3; shift 4
  python3 "$PEERBENCH/benchlib.py" measure --label "$label" --out "$RES" --server-pid "$LTC_PID" \
    --stdout "$OUT/last.json" --expect "$expect" \
    --count-cmd "python3 -c \"import json;print(json.load(open('$OUT/last.json'))['$key'])\"" -- "$@"
}
pg_db() { psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS pwbench_ltc" -c "CREATE DATABASE pwbench_ltc" >/dev/null 2>&1; }

for i in $(seq "$RUNS"); do
  log "run $i/$RUNS"
  measure "floor: stdlib getblockhash + getblock(h,0) raw hex, batches of 100" "$TXS" txs -- \
    timeout 900 python3 "$PEERBENCH/ltc-floor.py" "$CHAIN" --rpc "$RPC" --verbosity 0 --batch 100
  rm -f "$OUT/b.json" "$OUT/t.json"
  python3 "$PEERBENCH/benchlib.py" measure --label "peer: bitcoin-etl export_blocks_and_transactions -b 50 -w 2" \
    --out "$RES" --server-pid "$LTC_PID" --expect "$TXS" --count-cmd "wc -l < '$OUT/t.json'" --stderr "$OUT/etl.log" -- \
    timeout 900 "$BTCETL" export_blocks_and_transactions --start-block "$START" --end-block "$END" \
      --batch-size 50 --max-workers 2 --provider-uri "$RPC" --chain litecoin \
      --blocks-output "$OUT/b.json" --transactions-output "$OUT/t.json"
  measure "paywatch source: fetch, parse, verify merkle, filter" "$PAYMENTS" transfers -- \
    "$BIN" source --rpc "$RPC" --start "$START" --end "$END" --watch "$OUT/watch.txt"
  rm -f "$OUT/bench.db"*
  measure "paywatch daemon, $SLICE watched: watcher + ingest into SQLite" "$SLICE" transfers -- \
    "$BIN" daemon --rpc "$RPC" --start "$START" --end "$END" --watch "$OUT/watch-slice.txt" --db "sqlite://$OUT/bench.db"
  pg_db
  measure "paywatch daemon, $SLICE watched: watcher + ingest into PostgreSQL" "$SLICE" transfers -- \
    "$BIN" daemon --rpc "$RPC" --start "$START" --end "$END" --watch "$OUT/watch-slice.txt" --db "$PG/pwbench_ltc"
  rm -f "$OUT/bench.db"*
  measure "paywatch daemon, every output watched: watcher + ingest into SQLite" "$PAYMENTS" transfers -- \
    "$BIN" daemon --rpc "$RPC" --start "$START" --end "$END" --watch "$OUT/watch.txt" --db "sqlite://$OUT/bench.db"
done
psql "$PG/postgres" -qAtc "DROP DATABASE IF EXISTS pwbench_ltc" >/dev/null 2>&1

python3 "$PEERBENCH/benchlib.py" summary "$RES" --blocks "$BLOCKS" --items "$TXS" --items-name "txs (paywatch: $PAYMENTS transfers)" \
  --json "$OUT/summary.json" | tee "$OUT/summary.md"
python3 - "$OUT/summary.json" <<'PYEOF'
import json, sys
cases = {c["label"]: c for c in json.load(open(sys.argv[1]))["cases"]}
floor = next(c for k, c in cases.items() if k.startswith("floor"))
peer = next(c for k, c in cases.items() if k.startswith("peer"))
for k, c in cases.items():
    if k.startswith("paywatch"):
        print(f"LTC CATCH-UP: {c['label']}: {c['median_s']:.2f}s = {c['median_s']/floor['median_s']:.2f}x the floor "
              f"({floor['median_s']:.2f}s), {peer['median_s']/c['median_s']:.1f}x faster than bitcoin-etl ({peer['median_s']:.2f}s)")
PYEOF
