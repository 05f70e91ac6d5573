#!/usr/bin/env bash
# Runs paywatch on this machine with embedded SQLite and in-process dev chains
# (bitcoin, litecoin, ethereum, tron, solana), a simulated customer paying every
# open intent, and two demo intents. Ctrl-C stops it.
#
#   bash deploy/devnet.sh
#
# PAYWATCH_DEVNET_DIR  work directory (default ./devnet): config, database, pools.
# PAYWATCH_DEVNET_POOL addresses generated per network (default 200).
#
# Safe to run again: the database is kept, the pools re-import as "already
# present", and each run creates demo intents with fresh references.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'devnet: %s\n' "$*" >&2; exit 1; }

command -v cargo >/dev/null 2>&1 \
    || die "cargo is not installed; install Rust (https://rustup.rs, 1.85 or newer) and run again"
if ! command -v cc >/dev/null 2>&1; then
    say "installing a C compiler (needed to build SQLite and TLS)"
    [ "$(id -u)" = 0 ] || die "cc is missing; run: sudo apt-get install -y build-essential"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends build-essential
fi

if ! command -v curl >/dev/null 2>&1; then
    say "installing curl (the script talks to the local litecoind with it)"
    [ "$(id -u)" = 0 ] || die "curl is missing; run: sudo apt-get install -y curl"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl
fi

# Before the build: it also installs protoc, which the Tron crates need.
say "installing the local chain nodes if missing (deploy/install-nodes.sh)"
bash deploy/install-nodes.sh

say "building paywatch"
cargo build --locked --bin paywatch
target_dir="$(cargo metadata --format-version 1 --no-deps --locked \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
paywatch="${target_dir:-$repo/target}/debug/paywatch"
[ -x "$paywatch" ] || die "built binary not found at $paywatch"

dir="${PAYWATCH_DEVNET_DIR:-$repo/devnet}"
mkdir -p "$dir/pools"
dir="$(cd "$dir" && pwd)"
config="$dir/paywatch.toml"

# --- Litecoin: a real Litecoin Core node in regtest --------------------------
ltc_rpc_port="${PAYWATCH_DEVNET_LTC_RPC_PORT:-19643}"
ltc_p2p_port="${PAYWATCH_DEVNET_LTC_P2P_PORT:-19644}"
litecoind="${PAYWATCH_LITECOIND:-/usr/lib/litecoin/litecoind}"
ltc_datadir="$dir/litecoind"
mkdir -p "$ltc_datadir"
ltc_rpc() {
    curl -s --fail-with-body --user devnet:devnet -H 'content-type: application/json' \
        --data "{\"jsonrpc\":\"1.0\",\"id\":0,\"method\":\"$1\",\"params\":${2:-[]}}" \
        "http://127.0.0.1:$ltc_rpc_port/"
}
if ltc_rpc getblockcount >/dev/null 2>&1; then
    die "something already answers on 127.0.0.1:$ltc_rpc_port (another devnet?); stop it or set PAYWATCH_DEVNET_LTC_RPC_PORT"
fi
say "starting litecoind (regtest) in $ltc_datadir, RPC on 127.0.0.1:$ltc_rpc_port"
"$litecoind" -regtest -datadir="$ltc_datadir" -printtoconsole=0 -server=1 \
    -rpcuser=devnet -rpcpassword=devnet -rpcport="$ltc_rpc_port" -rpcbind=127.0.0.1 \
    -rpcallowip=127.0.0.1 -port="$ltc_p2p_port" -bind="127.0.0.1:$ltc_p2p_port" -listenonion=0 \
    -discover=0 -dnsseed=0 -fallbackfee=0.0001 -vbparams=mweb:-2:0 &
ltc_pid=$!
stop_litecoind() {
    if kill -0 "$ltc_pid" 2>/dev/null; then
        say "stopping litecoind"
        ltc_rpc stop >/dev/null 2>&1 || kill "$ltc_pid" 2>/dev/null || true
        wait "$ltc_pid" 2>/dev/null || true
    fi
}
trap stop_litecoind EXIT
for _ in $(seq 1 100); do
    ltc_rpc getblockcount >/dev/null 2>&1 && break
    kill -0 "$ltc_pid" 2>/dev/null || die "litecoind exited; see $ltc_datadir/regtest/debug.log"
    sleep 0.2
done
ltc_rpc getblockcount >/dev/null || die "litecoind does not answer RPC; see $ltc_datadir/regtest/debug.log"
ltc_rpc loadwallet '["devnet"]' >/dev/null 2>&1 || ltc_rpc createwallet '["devnet"]' >/dev/null 2>&1 || true
height="$(ltc_rpc getblockcount | sed -n 's/.*"result":\([0-9]*\).*/\1/p')"
if [ "${height:-0}" -lt 101 ]; then
    say "mining 101 blocks so the devnet wallet can pay"
    miner="$(ltc_rpc getnewaddress | sed -n 's/.*"result":"\([^"]*\)".*/\1/p')"
    ltc_rpc generatetoaddress "[101, \"$miner\"]" >/dev/null
fi
pool_size="${PAYWATCH_DEVNET_POOL:-200}"

cat >"$config" <<EOF
# Written by deploy/devnet.sh; rewritten on each run.
[database]
url = "sqlite://$dir/paywatch.db"

[rates]
source = "fixed"

[rates.fixed]
BTC = "60000"
LTC = "80"
ETH = "3000"
TRX = "0.12"
SOL = "150"

[devchain]
block_secs = 2
autopay = true

# Dev chains mine every 2 s; fewer confirmations than mainnet keep the loop short.
[networks.bitcoin]
enabled = true
source = "devchain"
confirmations = 3
poll_interval_ms = 500
chain = "regtest"
# A dev-only BIP84 account key (m/84'/1'/0' of a fixed test seed): fresh
# addresses are derived from it, as in production from the merchant's zpub.
account_key = "tpubDDPRy5xWxJTuVmsh7YRzK8o2EdMWgn4t41fTLxXRgyRN7EKvN2L8BKCFC1gUfPu8Xp6rr667Yc26zrXsiBZsgBc8dQiYnhPNk2Q7CsBrer5"

[networks.litecoin]
enabled = true
# A real node: raw blocks and the mempool over RPC, as in production.
source = "node"
confirmations = 3
poll_interval_ms = 500
chain = "regtest"
# A dev-only BIP84 account key (m/84'/1'/0' of a fixed test seed): fresh
# addresses are derived from it, as in production from the merchant's zpub.
account_key = "tpubDDPRy5xWxJTuVmsh7YRzK8o2EdMWgn4t41fTLxXRgyRN7EKvN2L8BKCFC1gUfPu8Xp6rr667Yc26zrXsiBZsgBc8dQiYnhPNk2Q7CsBrer5"

[networks.litecoin.rpc]
url = "http://127.0.0.1:$ltc_rpc_port"
user = "devnet"
password = "devnet"

[networks.ethereum]
enabled = true
source = "devchain"
confirmations = 6
poll_interval_ms = 500

[networks.tron]
enabled = true
source = "devchain"
confirmations = 5
poll_interval_ms = 500

[networks.solana]
enabled = true
source = "devchain"
confirmations = 8
poll_interval_ms = 500
EOF

# Deterministic, well-formed (not spendable) addresses, so a re-run re-imports
# the same pool. $1 = number, $2 = alphabet, $3 = width.
encode() {
    local n=$1 alphabet=$2 width=$3 base=${#2} out=""
    while [ "${#out}" -lt "$width" ]; do
        out="${alphabet:$((n % base)):1}$out"
        n=$((n / base))
    done
    printf '%s' "$out"
}
b58=123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz

say "writing address pools ($pool_size per network) to $dir/pools"
for network in ethereum tron solana; do
    file="$dir/pools/$network.txt"
    {
        echo "# devnet pool for $network, generated by deploy/devnet.sh"
        for ((i = 1; i <= pool_size; i++)); do
            case $network in
            ethereum) printf '0xdefe%036x\n' "$i" ;;
            tron) echo "TPaywatchDevnet$(encode "$i" "$b58" 19)" ;;
            solana) echo "PaywatchDevnet$(encode "$i" "$b58" 30)" ;;
            esac
        done
    } >"$file"
done

pw() { "$paywatch" --config "$config" "$@"; }

say "migrating $dir/paywatch.db"
pw migrate
for network in ethereum tron solana; do
    pw addresses import --network "$network" --file "$dir/pools/$network.txt"
done

run_id="$(date +%Y%m%d%H%M%S)-$$"
say "creating demo intents (run $run_id)"
order="$(pw intent create --kind order --reference "demo-order-$run_id" --account demo-customer \
    --asset BTC --network bitcoin --usd 49.99)"
ltc_order="$(pw intent create --kind order --reference "demo-ltc-order-$run_id" --account demo-customer \
    --asset LTC --network litecoin --usd 25)"
topup="$(pw intent create --kind topup --reference "demo-topup-$run_id" --account demo-customer \
    --asset USDT --network tron --usd 100)"
printf '%s\n%s\n%s\n' "$order" "$ltc_order" "$topup"
order_id="$(printf '%s\n' "$order" | awk 'NR == 1 { print $2 }')"
ltc_order_id="$(printf '%s\n' "$ltc_order" | awk 'NR == 1 { print $2 }')"
topup_id="$(printf '%s\n' "$topup" | awk 'NR == 1 { print $2 }')"
printf '%s\n%s\n%s\n' "$order_id" "$ltc_order_id" "$topup_id" >"$dir/demo-intents"

cat >&2 <<EOF

paywatch devnet: database $dir/paywatch.db, config $config
The simulated customer pays each open intent; watch it go
awaiting_payment -> confirming -> paid. In another terminal:

  $paywatch --config $config intent show $order_id
  $paywatch --config $config intent show $ltc_order_id     # LTC on a real regtest node
  $paywatch --config $config intent show $topup_id
  $paywatch --config $config status
  $paywatch --config $config transfers list
  $paywatch --config $config intent create --kind order --reference my-order-1 \\
      --account me --asset ETH --network ethereum --usd 25
  sqlite3 $dir/paywatch.db 'SELECT * FROM paywatch_payment_status'
  sqlite3 $dir/paywatch.db 'SELECT * FROM paywatch_balances'

Starting paywatch run; Ctrl-C stops it.

EOF
# Not exec: litecoind is stopped when paywatch ends.
"$paywatch" --config "$config" run
