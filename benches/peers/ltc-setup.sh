#!/usr/bin/env bash
# Build (or reuse) the Litecoin regtest chain for the peer benchmark.
#   bash benches/peers/ltc-setup.sh          # idempotent: reuses $L/datadir + chain.json
#   FORCE=1 bash benches/peers/ltc-setup.sh  # regenerate from scratch
# Env: PEERBENCH_DIR (/tmp/peerbench), LTC_BLOCKS (1000), LTC_MIN_TX (20),
#      LTC_MAX_TX (50), LTC_RPCPORT (19443), LTC_P2PPORT (19444).
# Leaves no process running (litecoind is stopped by PID at the end).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/ltc-lib.sh"
BLOCKS=${LTC_BLOCKS:-1000}
log() { echo "[ltc-setup] $*" >&2; }
mkdir -p "$L"

# --- tools -------------------------------------------------------------------
if [ -z "$LTCD" ] || ! command -v litecoin-cli >/dev/null; then
  log "installing litecoind from Debian"
  timeout 600 apt-get update >&2
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y litecoind >&2
  LTCD=/usr/lib/litecoin/litecoind
fi
if [ ! -x "$BTCETL" ]; then
  log "installing bitcoin-etl into $ROOT/venv-btcetl"
  timeout 300 python3 -m venv "$ROOT/venv-btcetl"
  timeout 900 "$ROOT/venv-btcetl/bin/pip" install -q bitcoin-etl==1.5.2 >&2
fi

summary() {
  python3 - "$CHAIN" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
print(f"LTC chain ready: blocks {c['start_block']}..{c['end_block']} ({c['blocks']} blocks), {c['txs']} txs "
      f"({c['payment_txs']} wallet txs, {c['multi_input_txs']} multi-input, + coinbases), {c['payment_outputs']} outputs to fresh addresses, "
      f"{c['block_bytes']:,} block bytes; datadir {c['datadir_bytes']:,} bytes ({c['datadir']})")
EOF
}

# --- reuse ---------------------------------------------------------------------
if [ -z "${FORCE:-}" ] && [ -s "$CHAIN" ] && [ -d "$DATADIR/regtest/blocks" ] && \
   python3 -c "import json,sys; c=json.load(open('$CHAIN')); sys.exit(0 if c['blocks']>=$BLOCKS and 'datadir_bytes' in c else 1)"; then
  log "reusing saved chain"
  summary
  exit 0
fi

# --- generate from scratch -------------------------------------------------------
rm -rf "$DATADIR" "$CHAIN" "$CHAIN.tmp"
ltc_start "$L/litecoind-setup.log"
trap ltc_stop EXIT
log "litecoind up (pid $LTC_PID, $("$LTCD" -version | head -1))"
cli createwallet bench >/dev/null
T0=$(date +%s.%N)
timeout 3600 python3 "$HERE/ltc-gen.py" "$RPC" bench "$CHAIN.tmp" --blocks "$BLOCKS" \
  --min-tx "${LTC_MIN_TX:-20}" --max-tx "${LTC_MAX_TX:-50}" >/dev/null
ltc_stop
trap - EXIT
python3 - "$CHAIN.tmp" "$DATADIR" "$T0" "$(du -sb "$DATADIR" | cut -f1)" "$(du -sb "$DATADIR/regtest/blocks" | cut -f1)" <<'EOF'
import json, sys, time
c = json.load(open(sys.argv[1]))
c["datadir"] = sys.argv[2]
c["datadir_bytes"] = int(sys.argv[4])
c["blocks_dir_bytes"] = int(sys.argv[5])
c["setup_seconds"] = round(time.time() - float(sys.argv[3]), 1)
json.dump(c, open(sys.argv[1], "w"), indent=2)
EOF
mv "$CHAIN.tmp" "$CHAIN"
summary
