#!/usr/bin/env bash
# Ethereum peer baseline on the anvil chain built by eth-setup.sh:
#   peer : ethereum-etl export_token_transfers (best settings found on this box)
#   peer (block half): ethereum-etl export_blocks_and_transactions
#   floor: eth-floor.py, stdlib-only getLogs + batched getBlockByNumber(n,true)
# Usage:  bash benches/peers/eth-setup.sh && bash benches/peers/eth-peers.sh
# Env: RUNS (3); ETL_BATCH / ETL_WORKERS (export_token_transfers), ETL_TOKENS
#      (1 = pass --tokens A B, the same filter the floor uses); ETLB_BATCH /
#      ETLB_WORKERS (export_blocks_and_transactions); SWEEP=1 first runs every
#      batch x worker combination SWEEP_RUNS (1) times; PEERBENCH_DIR
#      (/tmp/peerbench); ETH_PORT (18545).
# Starts anvil from the saved state (read-only) and stops it by PID on exit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${PEERBENCH_DIR:-/tmp/peerbench}
D=$ROOT/eth
PORT=${ETH_PORT:-18545}
RPC=http://127.0.0.1:$PORT
STATE=$D/state.json
CHAIN=$D/chain.json
BIN=$D/node_modules/.bin
ETL=$ROOT/venv-ethetl/bin/ethereumetl
RUNS=${RUNS:-3}
# Defaults = best of `SWEEP=1 SWEEP_RUNS=3` on the 2-core reference box (README.md).
ETL_BATCH=${ETL_BATCH:-5000}
ETL_WORKERS=${ETL_WORKERS:-2}
ETL_TOKENS=${ETL_TOKENS:-1}
ETLB_BATCH=${ETLB_BATCH:-100}
ETLB_WORKERS=${ETLB_WORKERS:-5}

log() { echo "[eth-peers] $*" >&2; }
[ -s "$STATE" ] && [ -s "$CHAIN" ] || { log "no saved chain; run: bash benches/peers/eth-setup.sh"; exit 1; }
[ -x "$ETL" ] || { log "no ethereum-etl venv; run: bash benches/peers/eth-setup.sh"; exit 1; }
if timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; then
  log "ERROR: something already listens on 127.0.0.1:$PORT; stop it or set ETH_PORT"; exit 1
fi
read -r START END BLOCKS TRANSFERS TXS A B < <(python3 -c "
import json; c=json.load(open('$CHAIN'))
print(c['start_block'], c['end_block'], c['end_block']-c['start_block']+1, c['token_transfers'],
      c['txs'], c['tokens']['A'], c['tokens']['B'])")

OUT=$D/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RES=$OUT/results.jsonl

# --- anvil from the saved state (no --dump-state: the file stays pristine) -------
timeout 7200 "$BIN/anvil" --host 127.0.0.1 --port "$PORT" --chain-id 31337 \
  --load-state "$STATE" --prune-history --silent >"$OUT/anvil.log" 2>&1 &
TPID=$!   # the `timeout` wrapper; SIGTERM to it is forwarded to anvil
cleanup() {
  if kill -0 "$TPID" 2>/dev/null; then kill -TERM "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true; fi
}
trap cleanup EXIT
T0=$(date +%s.%N)
H=
for _ in $(seq 600); do
  H=$(timeout 2 "$BIN/cast" block-number --rpc-url "$RPC" 2>/dev/null || true)
  [ "$H" = "$END" ] && break
  sleep 0.1
done
[ "$H" = "$END" ] || { log "ERROR: anvil head '$H' != $END"; exit 1; }
APID=$(python3 "$HERE/benchlib.py" childpid "$TPID")
log "anvil pid $APID loaded $BLOCKS blocks in $(python3 -c "import time;print(round(time.time()-$T0,1))")s; results in $OUT"

TOKARGS=()
# web3.py 5 (inside ethereum-etl) only accepts checksummed addresses
[ "$ETL_TOKENS" = 1 ] && TOKARGS=(--tokens "$("$BIN/cast" to-check-sum-address "$A")" \
                                  --tokens "$("$BIN/cast" to-check-sum-address "$B")")

etl() {  # etl LABEL BATCH WORKERS [RESULTS]
  rm -f "$OUT/etl.csv"
  python3 "$HERE/benchlib.py" measure --label "$1" --out "${4:-$RES}" --server-pid "$APID" \
    --expect "$TRANSFERS" --count-cmd "tail -n +2 '$OUT/etl.csv' | wc -l" --stderr "$OUT/etl.log" -- \
    timeout 900 "$ETL" export_token_transfers --start-block "$START" --end-block "$END" \
      --batch-size "$2" --max-workers "$3" "${TOKARGS[@]}" --provider-uri "$RPC" \
      --output "$OUT/etl.csv"
}
etl_blocks() {  # etl_blocks LABEL BATCH WORKERS [RESULTS]
  rm -f "$OUT/etl-blocks.csv" "$OUT/etl-txs.csv"
  python3 "$HERE/benchlib.py" measure --label "$1" --out "${4:-$RES}" --server-pid "$APID" \
    --expect "$TXS" --count-cmd "tail -n +2 '$OUT/etl-txs.csv' | wc -l" --stderr "$OUT/etl.log" -- \
    timeout 900 "$ETL" export_blocks_and_transactions --start-block "$START" --end-block "$END" \
      --batch-size "$2" --max-workers "$3" --provider-uri "$RPC" \
      --blocks-output "$OUT/etl-blocks.csv" --transactions-output "$OUT/etl-txs.csv"
}
floor() {  # floor LABEL
  python3 "$HERE/benchlib.py" measure --label "$1" --out "$RES" --server-pid "$APID" \
    --stdout "$OUT/floor.json" --expect "$TRANSFERS" \
    --count-cmd "python3 -c \"import json;print(json.load(open('$OUT/floor.json'))['token_transfers'])\"" -- \
    timeout 900 python3 "$HERE/eth-floor.py" "$CHAIN" --rpc "$RPC"
}

if [ -n "${SWEEP:-}" ]; then
  log "sweep: ${SWEEP_RUNS:-1} run(s) per batch-size x max-workers"
  for _ in $(seq "${SWEEP_RUNS:-1}"); do
    for b in 100 1000 5000; do for w in 1 2 5; do
      etl "export_token_transfers -b $b -w $w" "$b" "$w" "$OUT/sweep.jsonl" || true
      etl_blocks "export_blocks_and_transactions -b $b -w $w" "$b" "$w" "$OUT/sweep.jsonl" || true
    done; done
  done
  python3 "$HERE/benchlib.py" summary "$OUT/sweep.jsonl" --blocks "$BLOCKS" --items "$TRANSFERS" \
    | tee "$OUT/sweep.md" || true
fi

# Fixed start-up cost of the peer (imports, web3 set-up): a 1-block export.
for _ in $(seq "$RUNS"); do
  python3 "$HERE/benchlib.py" measure --label "ethereum-etl start-up (1-block export)" \
    --out "$OUT/startup.jsonl" --stderr "$OUT/etl.log" -- timeout 300 "$ETL" export_token_transfers \
    --start-block "$START" --end-block "$START" "${TOKARGS[@]}" --provider-uri "$RPC" --output /dev/null
done

ETL_LABEL="peer: ethereum-etl export_token_transfers -b $ETL_BATCH -w $ETL_WORKERS$([ "$ETL_TOKENS" = 1 ] && echo ' --tokens A B')"
ETLB_LABEL="peer (block half): ethereum-etl export_blocks_and_transactions -b $ETLB_BATCH -w $ETLB_WORKERS"
FLOOR_LABEL="floor: stdlib getLogs per 1000 blocks + getBlockByNumber(n,true) batches of 100"
for i in $(seq "$RUNS"); do
  log "run $i/$RUNS"
  etl "$ETL_LABEL" "$ETL_BATCH" "$ETL_WORKERS"
  floor "$FLOOR_LABEL"
  cp "$OUT/floor.json" "$OUT/floor-run$i.json"
  etl_blocks "$ETLB_LABEL" "$ETLB_BATCH" "$ETLB_WORKERS"
done

RC=0
{
  echo "Ethereum (anvil $("$BIN/anvil" --version | head -1 | awk '{print $3}'), $BLOCKS blocks $START..$END," \
       "$TRANSFERS token transfers, $TXS txs; $RUNS runs each; count = token transfers found" \
       "(transactions for the block export)"
  echo
  python3 "$HERE/benchlib.py" summary "$RES" --blocks "$BLOCKS" --items "$TRANSFERS" --json "$OUT/summary.json"
  python3 "$HERE/benchlib.py" summary "$OUT/startup.jsonl" --blocks 1 --items 0 | tail -n 1
} >"$OUT/summary.md" || RC=$?
cat "$OUT/summary.md"
echo "floor detail (last run): $(cat "$OUT/floor.json")"
python3 - "$OUT"/floor-run*.json <<'PYEOF2'
import json, statistics, sys
r = [json.load(open(p)) for p in sys.argv[1:]]
m = lambda k: statistics.median(x[k] for x in r)
print(f"floor phases (median of {len(r)}): eth_getLogs {m('logs_seconds'):.3f}s, "
      f"eth_getBlockByNumber(full) {m('blocks_seconds'):.3f}s; {r[0]['http_requests']} HTTP requests, "
      f"{r[0]['bytes_received']:,} bytes of JSON")
PYEOF2
echo "ethereum-etl output: token_transfers.csv $(stat -c %s "$OUT/etl.csv") bytes;" \
     "blocks.csv $(stat -c %s "$OUT/etl-blocks.csv") + transactions.csv $(stat -c %s "$OUT/etl-txs.csv") bytes"
ln -sfn "$OUT" "$D/results/latest"

cleanup; trap - EXIT
python3 - "$OUT/summary.json" "$OUT/startup.jsonl" "$BLOCKS" "$TRANSFERS" <<'PYEOF'
import json, statistics, sys
s = json.load(open(sys.argv[1]))
c = {x["label"].split(":")[0]: x for x in s["cases"]}
e, f = c["peer"], c["floor"]
st = statistics.median(json.loads(l)["wall_s"] for l in open(sys.argv[2]))
ok = all(x["counts"] == [x["expect"]] for x in s["cases"])
print(f"ETH SUMMARY: {sys.argv[3]} blocks, {sys.argv[4]} token transfers; ethereum-etl median "
      f"{e['median_s']:.2f}s ({e['blocks_per_s']:,.0f} blk/s, {e['items_per_s']:,.0f} tr/s, start-up {st:.2f}s); "
      f"floor median {f['median_s']:.2f}s ({f['blocks_per_s']:,.0f} blk/s, {f['items_per_s']:,.0f} tr/s); "
      f"counts match: {ok}")
PYEOF
exit "$RC"
