#!/usr/bin/env bash
# Build (or reuse) the local anvil chain for the Ethereum peer benchmark.
#   bash benches/peers/eth-setup.sh          # idempotent: reuses $D/state.json + chain.json
#   FORCE=1 bash benches/peers/eth-setup.sh  # regenerate
# Env: PEERBENCH_DIR (/tmp/peerbench), ETH_PORT (18545), ETH_BLOCKS (5000).
# Leaves no process running: anvil is started, the chain generated, and anvil
# stopped by PID (SIGTERM makes it write --dump-state).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${PEERBENCH_DIR:-/tmp/peerbench}
D=$ROOT/eth
PORT=${ETH_PORT:-18545}
RPC=http://127.0.0.1:$PORT
BLOCKS=${ETH_BLOCKS:-5000}
STATE=$D/state.json
CHAIN=$D/chain.json
BIN=$D/node_modules/.bin
KEY=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80  # anvil dev account 0
mkdir -p "$D"

log() { echo "[eth-setup] $*" >&2; }

# --- tools (pinned) ----------------------------------------------------------
if [ ! -x "$BIN/anvil" ] || [ ! -x "$BIN/cast" ] || [ ! -e "$BIN/solcjs" ]; then
  log "installing anvil/cast/solc from npm into $D"
  (cd "$D" && timeout 900 npm install --no-audit --no-fund \
     @foundry-rs/anvil-linux-amd64@1.7.1 @foundry-rs/cast-linux-amd64@1.7.1 solc@0.8.37 >&2)
fi
if [ ! -x "$ROOT/venv-ethetl/bin/ethereumetl" ]; then
  log "installing ethereum-etl into $ROOT/venv-ethetl"
  timeout 300 python3 -m venv "$ROOT/venv-ethetl"
  timeout 900 "$ROOT/venv-ethetl/bin/pip" install -q ethereum-etl==2.4.2 >&2
  # eth-abi 2.x pins parsimonious<0.9 which breaks on Python 3.11; 0.9.0 works.
  timeout 300 "$ROOT/venv-ethetl/bin/pip" install -q parsimonious==0.9.0 >&2 2>/dev/null
fi

summary() {
  python3 - "$CHAIN" "$STATE" <<'EOF'
import json, os, sys
c = json.load(open(sys.argv[1]))
print(f"ETH chain ready: blocks {c['start_block']}..{c['end_block']} ({c['blocks']} blocks), "
      f"{c['token_transfers']} token transfers to {c['distinct_token_recipients']} recipients, "
      f"{c['eth_transfers']} ETH transfers, tokens A={c['tokens']['A']} B={c['tokens']['B']}, "
      f"state {os.path.getsize(sys.argv[2]):,} bytes ({sys.argv[2]})")
EOF
}

# --- reuse ---------------------------------------------------------------------
if [ -z "${FORCE:-}" ] && [ -s "$STATE" ] && [ -s "$CHAIN" ] && \
   python3 -c "import json,sys; c=json.load(open('$CHAIN')); sys.exit(0 if c['blocks']>=$BLOCKS and c['token_transfers']==c['token_transfers_expected'] and 'txs' in c else 1)"; then
  log "reusing saved chain"
  summary
  exit 0
fi

if timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PORT" 2>/dev/null; then
  log "ERROR: something already listens on 127.0.0.1:$PORT; stop it or set ETH_PORT"
  exit 1
fi

# --- compile -------------------------------------------------------------------
rm -rf "$D/build" && mkdir -p "$D/build"
# The same ERC-20 the tests deploy, so the bench and the tests measure one contract.
(cd "$HERE/../../chains/testkit/contracts" && timeout 300 "$BIN/solcjs" --bin --abi --optimize -o "$D/build" Token.sol >&2)
TOKEN_BIN=$(cat "$D/build/Token_sol_Token.bin")

# --- start anvil ----------------------------------------------------------------
rm -f "$STATE.tmp" "$CHAIN.tmp"
timeout 3600 "$BIN/anvil" --host 127.0.0.1 --port "$PORT" --chain-id 31337 \
  --prune-history --silent --dump-state "$STATE.tmp" >"$D/anvil-setup.log" 2>&1 &
TPID=$!   # the `timeout` wrapper; SIGTERM to it is forwarded to anvil
cleanup() {
  if kill -0 "$TPID" 2>/dev/null; then kill -TERM "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true; fi
}
trap cleanup EXIT
for _ in $(seq 100); do
  timeout 2 "$BIN/cast" block-number --rpc-url "$RPC" >/dev/null 2>&1 && break
  sleep 0.1
done
log "anvil up (timeout pid $TPID, anvil pid $(python3 "$HERE/benchlib.py" childpid $TPID))"

deploy() {
  timeout 60 "$BIN/cast" send --json --rpc-url "$RPC" --private-key "$KEY" --create "0x$TOKEN_BIN" \
    "constructor(string,string,uint256)" "$1" "$2" 1000000000000000 |
    python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["status"]=="0x1"; print(d["contractAddress"])'
}
A=$(deploy "Tether USD" USDT)
B=$(deploy "USD Coin" USDC)
log "tokens A=$A B=$B; generating $BLOCKS blocks"
T0=$(date +%s.%N)
timeout 1800 python3 "$HERE/eth-gen.py" "$RPC" "$A" "$B" "$CHAIN.tmp" --blocks "$BLOCKS" >/dev/null

# --- stop anvil -> state dump ---------------------------------------------------
kill -TERM "$TPID"
wait "$TPID" 2>/dev/null || true
trap - EXIT
[ -s "$STATE.tmp" ] || { log "ERROR: anvil did not write $STATE.tmp"; exit 1; }
mv "$STATE.tmp" "$STATE"
python3 - "$CHAIN.tmp" "$STATE" "$T0" <<'EOF'
import json, os, sys, time
c = json.load(open(sys.argv[1]))
c["state_file"] = sys.argv[2]
c["state_bytes"] = os.path.getsize(sys.argv[2])
c["setup_seconds"] = round(time.time() - float(sys.argv[3]), 1)
json.dump(c, open(sys.argv[1], "w"), indent=2)
EOF
mv "$CHAIN.tmp" "$CHAIN"
summary
