#!/usr/bin/env bash
# Litecoin peer baseline on the regtest chain built by ltc-setup.sh:
#   peer  : bitcoin-etl export_blocks_and_transactions --chain litecoin (best settings)
#   floor : ltc-floor.py, stdlib-only batched getblockhash + getblock(hash, 0) (raw hex)
#   floor : the same with getblock(hash, 2) (verbose JSON)
# Usage:  bash benches/peers/ltc-setup.sh && bash benches/peers/ltc-peers.sh
# Env: RUNS (3); BTCETL_BATCH / BTCETL_WORKERS; FLOOR_BATCH (100); SWEEP=1 first
#      runs every batch x worker combination SWEEP_RUNS (1) times;
#      PEERBENCH_DIR (/tmp/peerbench); LTC_RPCPORT (19443); LTC_P2PPORT (19444).
# Starts litecoind (-disablewallet) on the saved datadir; stops it by PID on exit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/ltc-lib.sh"
RUNS=${RUNS:-3}
# Defaults = best of `SWEEP=1 SWEEP_RUNS=3` on the 2-core reference box (README.md).
BTCETL_BATCH=${BTCETL_BATCH:-50}
BTCETL_WORKERS=${BTCETL_WORKERS:-2}
FLOOR_BATCH=${FLOOR_BATCH:-100}

log() { echo "[ltc-peers] $*" >&2; }
[ -s "$CHAIN" ] && [ -d "$DATADIR/regtest/blocks" ] || { log "no saved chain; run: bash benches/peers/ltc-setup.sh"; exit 1; }
[ -x "$BTCETL" ] || { log "no bitcoin-etl venv; run: bash benches/peers/ltc-setup.sh"; exit 1; }
read -r START END BLOCKS TXS OUTS BYTES < <(python3 -c "
import json; c=json.load(open('$CHAIN'))
print(c['start_block'], c['end_block'], c['blocks'], c['txs'], c['payment_outputs'], c['block_bytes'])")

OUT=$L/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
RES=$OUT/results.jsonl

ltc_start "$OUT/litecoind.log" -disablewallet
trap ltc_stop EXIT
H=$(cli getblockcount)
[ "$H" -ge "$END" ] || { log "ERROR: litecoind height $H < $END"; exit 1; }
log "litecoind pid $LTC_PID at height $H; range $START..$END; results in $OUT"

etl() {  # etl LABEL BATCH WORKERS [RESULTS]
  rm -f "$OUT/b.json" "$OUT/t.json"
  python3 "$HERE/benchlib.py" measure --label "$1" --out "${4:-$RES}" --server-pid "$LTC_PID" \
    --expect "$TXS" --count-cmd "wc -l < '$OUT/t.json'" --stderr "$OUT/etl.log" -- \
    timeout 900 "$BTCETL" export_blocks_and_transactions --start-block "$START" --end-block "$END" \
      --batch-size "$2" --max-workers "$3" --provider-uri "$RPC" --chain litecoin \
      --blocks-output "$OUT/b.json" --transactions-output "$OUT/t.json"
}
floor() {  # floor LABEL VERBOSITY
  python3 "$HERE/benchlib.py" measure --label "$1" --out "$RES" --server-pid "$LTC_PID" \
    --stdout "$OUT/floor$2.json" --expect "$TXS" \
    --count-cmd "python3 -c \"import json;print(json.load(open('$OUT/floor$2.json'))['txs'])\"" -- \
    timeout 900 python3 "$HERE/ltc-floor.py" "$CHAIN" --rpc "$RPC" --verbosity "$2" --batch "$FLOOR_BATCH"
}

if [ -n "${SWEEP:-}" ]; then
  log "sweep: ${SWEEP_RUNS:-1} run(s) per batch-size x max-workers"
  for _ in $(seq "${SWEEP_RUNS:-1}"); do
    for b in 1 10 50 100; do for w in 1 2 5; do
      etl "export_blocks_and_transactions -b $b -w $w" "$b" "$w" "$OUT/sweep.jsonl" || true
    done; done
  done
  python3 "$HERE/benchlib.py" summary "$OUT/sweep.jsonl" --blocks "$BLOCKS" --items "$TXS" \
    --items-name txs | tee "$OUT/sweep.md" || true
fi

# Fixed start-up cost of the peer: a 1-block export.
for _ in $(seq "$RUNS"); do
  python3 "$HERE/benchlib.py" measure --label "bitcoin-etl start-up (1-block export)" \
    --out "$OUT/startup.jsonl" --stderr "$OUT/etl.log" -- timeout 300 "$BTCETL" \
    export_blocks_and_transactions --start-block "$START" --end-block "$START" --provider-uri "$RPC" \
    --chain litecoin --blocks-output /dev/null --transactions-output /dev/null
done

ETL_LABEL="peer: bitcoin-etl export_blocks_and_transactions -b $BTCETL_BATCH -w $BTCETL_WORKERS"
F0_LABEL="floor: stdlib getblockhash + getblock(h,0) raw hex, batches of $FLOOR_BATCH"
F2_LABEL="floor: stdlib getblockhash + getblock(h,2) verbose JSON, batches of $FLOOR_BATCH"
for i in $(seq "$RUNS"); do
  log "run $i/$RUNS"
  etl "$ETL_LABEL" "$BTCETL_BATCH" "$BTCETL_WORKERS"
  floor "$F0_LABEL" 0
  floor "$F2_LABEL" 2
done
# Untimed cross-check: parsing the raw blocks finds the same outputs as verbose JSON.
timeout 600 python3 "$HERE/ltc-floor.py" "$CHAIN" --rpc "$RPC" --verbosity 0 --parse >"$OUT/floor0-parse.json"
OUTS_OK=$(python3 -c "
import json; a=json.load(open('$OUT/floor0-parse.json')); b=json.load(open('$OUT/floor2.json'))
print('yes' if a['outputs']==b['outputs'] and a['txs']==b['txs'] else 'NO (%s vs %s)' % (a['outputs'], b['outputs']))")

RC=0
{
  echo "Litecoin (litecoind $("$LTCD" -version | head -1 | awk '{print $NF}') regtest, $BLOCKS blocks $START..$END," \
       "$TXS txs incl. coinbases, $OUTS payment outputs, $BYTES block bytes; $RUNS runs each; count = txs found)"
  echo
  python3 "$HERE/benchlib.py" summary "$RES" --blocks "$BLOCKS" --items "$TXS" --items-name txs \
    --json "$OUT/summary.json"
  python3 "$HERE/benchlib.py" summary "$OUT/startup.jsonl" --blocks 1 --items 0 --items-name txs | tail -n 1
} >"$OUT/summary.md" || RC=$?
cat "$OUT/summary.md"
echo "floor raw (last run): $(cat "$OUT/floor0.json")"
echo "floor verbose (last run): $(cat "$OUT/floor2.json")"
echo "raw-parse outputs == verbose outputs: $OUTS_OK"
echo "bitcoin-etl output: blocks.json $(stat -c %s "$OUT/b.json") + transactions.json $(stat -c %s "$OUT/t.json") bytes"
ln -sfn "$OUT" "$L/results/latest"

ltc_stop; trap - EXIT
[ "${OUTS_OK%% *}" = yes ] || RC=1
python3 - "$OUT/summary.json" "$OUT/startup.jsonl" "$BLOCKS" "$TXS" <<'PYEOF'
import json, statistics, sys
s = json.load(open(sys.argv[1]))
c = {x["label"].split(",")[0].split(" ")[0] + ("0" if "(h,0)" in x["label"] else "2" if "(h,2)" in x["label"] else ""): x
     for x in s["cases"]}
e, f0, f2 = c["peer:"], c["floor:0"], c["floor:2"]
st = statistics.median(json.loads(l)["wall_s"] for l in open(sys.argv[2]))
ok = all(x["counts"] == [x["expect"]] for x in s["cases"])
fmt = lambda x: f"{x['median_s']:.2f}s ({x['blocks_per_s']:,.0f} blk/s, {x['items_per_s']:,.0f} tx/s)"
print(f"LTC SUMMARY: {sys.argv[3]} blocks, {sys.argv[4]} txs; bitcoin-etl median {fmt(e)} start-up {st:.2f}s; "
      f"floor raw {fmt(f0)}; floor verbose {fmt(f2)}; counts match: {ok}")
PYEOF
exit "$RC"
