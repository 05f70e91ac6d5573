#!/usr/bin/env bash
# The one-command devnet: paywatch on embedded SQLite against local dev
# chains, one intent per payment method, each paid on its chain, and the
# status table moving awaiting_payment -> confirming -> paid. Besides the
# eight, three payments that land in the review queue (one paid late, one
# underpaid, one sent on the wrong network), so the console has cases to
# open and act on. paywatch serves its API, operator console and metrics
# on loopback; the script prints their URLs and a dev token per role.
#
#   bash deploy/devnet.sh                # runs until Ctrl-C
#   bash deploy/devnet.sh --until-paid   # exits 0 once all eight are paid (CI)
#
# Chains: Litecoin Core in regtest (litecoind); anvil with two ERC-20s for
# USDT and USDC, the Tron gRPC test node with a TRC-20 USDT and the Solana
# JSON-RPC test node (litesvm), all three in `paywatch-devnodes`
# (chains/testkit). Bitcoin runs on paywatch's in-process dev chain, whose
# simulated customer pays the BTC intent: Debian packages no bitcoind.
#
# Everything listens on 127.0.0.1 only. On exit (Ctrl-C, the end of
# --until-paid, or an error) every process this script started is stopped.
#
# PAYWATCH_DEVNET_DIR         work directory (default ./devnet): config,
#                             database, logs, litecoind's datadir; the
#                             previous run's state in it is removed at start.
# PAYWATCH_DEVNET_UNTIL_PAID  1: as --until-paid.
# PAYWATCH_DEVNET_TIMEOUT     seconds --until-paid waits for the eight intents
#                             to be paid, from their creation (default 240).
# PAYWATCH_DEVNET_LTC_RPC_PORT, PAYWATCH_DEVNET_LTC_P2P_PORT
#                             litecoind's ports (default: free ones).
# PAYWATCH_DEVNET_API_PORT, PAYWATCH_DEVNET_METRICS_PORT
#                             paywatch's API (with the console) and metrics
#                             ports (default: free ones).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

until_paid="${PAYWATCH_DEVNET_UNTIL_PAID:-0}"
for arg in "$@"; do
    case "$arg" in
    --until-paid) until_paid=1 ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        printf 'devnet: unknown argument %s (try --help)\n' "$arg" >&2
        exit 2
        ;;
    esac
done
[ "$until_paid" = 1 ] || until_paid=0
timeout_secs="${PAYWATCH_DEVNET_TIMEOUT:-240}"

say() { printf '==> %s\n' "$*" >&2; }
die() {
    printf 'devnet: %s\n' "$*" >&2
    exit 1
}

# --- what it needs -----------------------------------------------------------
command -v cargo >/dev/null 2>&1 \
    || die "cargo is not installed; install Rust (https://rustup.rs, 1.89 or newer) and run again"
apt_updated=
apt_install() {
    [ "$(id -u)" = 0 ] || die "$1 is missing; run: sudo apt-get install -y $2"
    command -v apt-get >/dev/null 2>&1 || die "$1 is missing and there is no apt-get; install $2"
    if [ -z "$apt_updated" ]; then
        apt-get update
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$2"
}
if ! command -v cc >/dev/null 2>&1; then
    say "installing a C compiler (needed to build SQLite and TLS)"
    apt_install cc build-essential
fi
if ! command -v curl >/dev/null 2>&1; then
    say "installing curl (the script talks to litecoind and paywatch-devnodes with it)"
    apt_install curl curl
fi
# Before the build: it also installs protoc, which the Tron crates need.
say "installing the local chain nodes if missing (deploy/install-nodes.sh)"
bash deploy/install-nodes.sh

say "building paywatch and paywatch-devnodes"
# One build with the test suite's features (`deploy/test.sh` builds the same
# set), so after the tests this is already done, and on a fresh machine the
# devnet's build is the tests' build. paywatch-devnodes needs the Solana test
# node (litesvm) that the `devnodes` feature brings; release builds of
# paywatch (`cargo build --release --bin paywatch`) never link it.
cargo build --locked --workspace --all-features --bins
target_dir="$(cargo metadata --format-version 1 --no-deps --locked \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
paywatch="${target_dir:-$repo/target}/debug/paywatch"
devnodes="${target_dir:-$repo/target}/debug/paywatch-devnodes"
[ -x "$paywatch" ] || die "built binary not found at $paywatch"
[ -x "$devnodes" ] || die "built binary not found at $devnodes"

# --- a fresh work directory --------------------------------------------------
dir="${PAYWATCH_DEVNET_DIR:-$repo/devnet}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
lock="$dir/devnet.pid"
if [ -f "$lock" ] && other="$(cat "$lock" 2>/dev/null)" && [ -n "$other" ] && [ "$other" != $$ ] \
    && tr '\0' ' ' 2>/dev/null <"/proc/$other/cmdline" | grep -q 'devnet\.sh'; then
    die "another devnet (pid $other) runs in $dir; stop it (Ctrl-C there, or kill $other) or set PAYWATCH_DEVNET_DIR"
fi
echo $$ >"$lock"
# The dev chains start from genesis each run, so the previous run's database
# would describe blocks that no longer exist: start clean.
rm -rf "$dir/litecoind" "$dir/logs" "$dir/pools" "$dir/paywatch.db" "$dir/paywatch.db-wal" \
    "$dir/paywatch.db-shm" "$dir/paywatch.toml" "$dir/devnodes.env" "$dir/intents" "$dir/demo-intents"
mkdir -p "$dir/logs" "$dir/pools"
config="$dir/paywatch.toml"

# --- stopping what it started ------------------------------------------------
ltc_pid=
devnodes_pid=
paywatch_pid=
# Running and not a zombie (a child that exited stays a zombie until waited for).
alive() {
    local state
    [ -n "$1" ] && [ -r "/proc/$1/stat" ] || return 1
    state="$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}
# $1 name, $2 pid: SIGTERM, up to 15 s for a clean exit, then SIGKILL.
stop_process() {
    local name=$1 pid=$2
    alive "$pid" || {
        wait "$pid" 2>/dev/null || true
        return 0
    }
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        say "$name did not stop on SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_process "paywatch run" "$paywatch_pid"
    stop_process paywatch-devnodes "$devnodes_pid"
    if alive "$ltc_pid"; then
        ltc_rpc stop >/dev/null 2>&1 || true
    fi
    stop_process litecoind "$ltc_pid"
    rm -f "$lock"
    case "$rc" in
    0 | 130 | 143) say "devnet stopped; its config, database and logs stay in $dir until the next run" ;;
    esac
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- Litecoin: a real Litecoin Core node in regtest --------------------------
if [ -z "${PAYWATCH_DEVNET_LTC_RPC_PORT:-}" ] || [ -z "${PAYWATCH_DEVNET_LTC_P2P_PORT:-}" ]; then
    ports="$("$devnodes" free-ports 2)" || die "no free ports on 127.0.0.1"
fi
ltc_rpc_port="${PAYWATCH_DEVNET_LTC_RPC_PORT:-$(printf '%s\n' "$ports" | sed -n 1p)}"
ltc_p2p_port="${PAYWATCH_DEVNET_LTC_P2P_PORT:-$(printf '%s\n' "$ports" | sed -n 2p)}"
litecoind="${PAYWATCH_LITECOIND:-/usr/lib/litecoin/litecoind}"
ltc_datadir="$dir/litecoind"
mkdir -p "$ltc_datadir"
ltc_rpc() {
    curl -s --fail-with-body --max-time 30 --user devnet:devnet -H 'content-type: application/json' \
        --data "{\"jsonrpc\":\"1.0\",\"id\":0,\"method\":\"$1\",\"params\":${2:-[]}}" \
        "http://127.0.0.1:$ltc_rpc_port/"
}
result() { sed -n 's/.*"result":"\{0,1\}\([^",}]*\)"\{0,1\}[,}].*/\1/p'; }
if ltc_rpc getblockcount >/dev/null 2>&1; then
    die "something already answers on 127.0.0.1:$ltc_rpc_port; set PAYWATCH_DEVNET_LTC_RPC_PORT"
fi
say "starting litecoind (regtest), RPC on 127.0.0.1:$ltc_rpc_port"
"$litecoind" -regtest -datadir="$ltc_datadir" -printtoconsole=0 -server=1 \
    -rpcuser=devnet -rpcpassword=devnet -rpcport="$ltc_rpc_port" -rpcbind=127.0.0.1 \
    -rpcallowip=127.0.0.1 -port="$ltc_p2p_port" -bind="127.0.0.1:$ltc_p2p_port" -listenonion=0 \
    -discover=0 -dnsseed=0 -fallbackfee=0.0001 -vbparams=mweb:-2:0 \
    >"$dir/logs/litecoind.out" 2>&1 &
ltc_pid=$!
for _ in $(seq 1 150); do
    ltc_rpc getblockcount >/dev/null 2>&1 && break
    alive "$ltc_pid" || die "litecoind exited; see $ltc_datadir/regtest/debug.log"
    sleep 0.2
done
ltc_rpc getblockcount >/dev/null || die "litecoind does not answer RPC; see $ltc_datadir/regtest/debug.log"
ltc_rpc createwallet '["devnet"]' >/dev/null || die "litecoind: createwallet failed"
ltc_miner="$(ltc_rpc getnewaddress | result)"
[ -n "$ltc_miner" ] || die "litecoind: getnewaddress failed"
# Coinbase outputs mature after 100 blocks: 101 give the wallet coins to pay with.
ltc_rpc generatetoaddress "[101, \"$ltc_miner\"]" >/dev/null || die "litecoind: mining failed"
ltc_mine() { ltc_rpc generatetoaddress "[1, \"$ltc_miner\"]" >/dev/null 2>&1 || true; }

# --- anvil, the Tron and the Solana test nodes --------------------------------
say "starting paywatch-devnodes (anvil, the Tron and the Solana test nodes)"
env_file="$dir/devnodes.env"
"$devnodes" --env-file "$env_file" --exit-with $$ >"$dir/logs/devnodes.log" 2>&1 &
devnodes_pid=$!
for _ in $(seq 1 600); do
    [ -f "$env_file" ] && break
    alive "$devnodes_pid" || die "paywatch-devnodes exited:
$(tail -n 20 "$dir/logs/devnodes.log")"
    sleep 0.1
done
[ -f "$env_file" ] || die "paywatch-devnodes did not start within 60 s:
$(tail -n 20 "$dir/logs/devnodes.log")"
# shellcheck disable=SC1090
. "$env_file"

"$devnodes" solana-pool 50 >"$dir/pools/solana.txt"

# --- paywatch ----------------------------------------------------------------
if [ -z "${PAYWATCH_DEVNET_API_PORT:-}" ] || [ -z "${PAYWATCH_DEVNET_METRICS_PORT:-}" ]; then
    ports="$("$devnodes" free-ports 2)" || die "no free ports on 127.0.0.1"
fi
api_port="${PAYWATCH_DEVNET_API_PORT:-$(printf '%s\n' "$ports" | sed -n 1p)}"
metrics_port="${PAYWATCH_DEVNET_METRICS_PORT:-$(printf '%s\n' "$ports" | sed -n 2p)}"
api="http://127.0.0.1:$api_port"
# One dev token per role, made fresh each run: the configuration holds only
# their hashes; the tokens are printed at the end and kept in $dir/tokens.
token_lines=
: >"$dir/tokens"
chmod 600 "$dir/tokens"
for role in storefront operator support; do
    out="$("$paywatch" new-token "$role" "devnet-$role")" || die "paywatch new-token failed"
    token="$(printf '%s\n' "$out" | awk '$1 == "token:" { print $2 }')"
    line="$(printf '%s\n' "$out" | grep "^api.tokens.$role = ")"
    [ -n "$token" ] && [ -n "$line" ] || die "unexpected new-token output:
$out"
    printf '%s %s\n' "$role" "$token" >>"$dir/tokens"
    token_lines+="${line#api.tokens.}"$'\n'
done
token_of() { awk -v r="$1" '$1 == r { print $2 }' "$dir/tokens"; }

# A dev-only BIP84 account key (m/84'/1'/0' of a fixed test seed): bitcoin and
# litecoin addresses are derived from it, as in production from a zpub.
tpub="tpubDDPRy5xWxJTuVmsh7YRzK8o2EdMWgn4t41fTLxXRgyRN7EKvN2L8BKCFC1gUfPu8Xp6rr667Yc26zrXsiBZsgBc8dQiYnhPNk2Q7CsBrer5"
cat >"$config" <<EOF
# Written by deploy/devnet.sh for this run; the nodes' ports change each run.
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

[reconcile]
interval_ms = 500

# The API and the operator console on loopback, and Prometheus metrics.
[api]
listen = "127.0.0.1:$api_port"

[api.tokens]
$token_lines
[metrics]
listen = "127.0.0.1:$metrics_port"

[devchain]
# A development setup: Bitcoin runs on an in-process chain that mines every
# second, and its simulated customer pays open BTC intents. The regtest
# wallet customer stays off: this script pays on the real nodes itself.
enabled = true
block_secs = 1
autopay = true
regtest_customer = false

# Confirmations and finality are far shorter than mainnet's, so that all
# eight payments are final within a minute.
[networks.bitcoin]
enabled = true
# In process: Debian has no bitcoind package to run a regtest node from.
source = "devchain"
confirmations = 3
poll_interval_ms = 500
chain = "regtest"
account_key = "$tpub"

[networks.litecoin]
enabled = true
source = "node"
confirmations = 3
poll_interval_ms = 500
chain = "regtest"
account_key = "$tpub"

[networks.litecoin.rpc]
url = "http://127.0.0.1:$ltc_rpc_port"
user = "devnet"
password = "devnet"

[networks.ethereum]
enabled = true
source = "node"
# anvil mines a block a second; its finalized block is 4 behind the tip.
finality = "finalized"
chain_id = $ETHEREUM_CHAIN_ID
poll_interval_ms = 500
account_key = "$ETHEREUM_ACCOUNT_KEY"

[networks.ethereum.rpc]
url = "$ETHEREUM_RPC_URL"
ws_url = "$ETHEREUM_WS_URL"

[networks.ethereum.contracts]
USDT = "$ETHEREUM_USDT"
USDC = "$ETHEREUM_USDC"

[networks.tron]
enabled = true
source = "node"
# A block every 3 s; solidified 2 blocks behind the tip.
poll_interval_ms = 500
account_key = "$TRON_ACCOUNT_KEY"

[networks.tron.rpc]
url = "$TRON_RPC_URL"
solidity_url = "$TRON_SOLIDITY_URL"

[networks.tron.contracts]
USDT = "$TRON_USDT"

[networks.solana]
enabled = true
source = "node"
# A block every 400 ms; finalized 9 blocks behind the newest.
poll_interval_ms = 500

[networks.solana.rpc]
url = "$SOLANA_RPC_URL"
requests_per_second = 0
EOF

pw() { "$paywatch" --config "$config" "$@"; }
# The review cases' intents expire in 20 s, so that a late payment and an
# underpayment happen within the demo: a copy of the configuration used only
# to create those two (each intent keeps the expiry it was made with).
review_config="$dir/paywatch-review-cases.toml"
cp "$config" "$review_config"
printf '\n# Only for creating the review cases: a short expiry.\n[intents]\nexpiry_secs = 20\n' >>"$review_config"
pw_review() { "$paywatch" --config "$review_config" "$@"; }
pw migrate >/dev/null
pw addresses import --network solana --file "$dir/pools/solana.txt"

say "starting paywatch run (log: $dir/logs/paywatch.log)"
"$paywatch" --config "$config" run >"$dir/logs/paywatch.log" 2>&1 &
paywatch_pid=$!

log_tails() {
    local f
    for f in "$dir/logs/paywatch.log" "$dir/logs/devnodes.log" "$ltc_datadir/regtest/debug.log"; do
        [ -f "$f" ] || continue
        printf '\n--- last lines of %s ---\n' "$f" >&2
        tail -n 25 "$f" >&2
    done
}

# A fresh database starts each watcher at its node's tip: create the intents
# once all five are reading, so no payment lands below where they start.
started_at=$SECONDS
while :; do
    alive "$paywatch_pid" || {
        log_tails
        die "paywatch run exited"
    }
    reading="$(pw status 2>/dev/null | grep -c 'cursor Some' || true)"
    [ "$reading" -ge 5 ] && break
    if [ $((SECONDS - started_at)) -ge 60 ]; then
        pw status >&2 || true
        log_tails
        die "the watchers did not all start within 60 s"
    fi
    sleep 0.5
done

# --- one intent per method ---------------------------------------------------
# asset network usd
methods=(
    "BTC bitcoin 49.99"
    "LTC litecoin 25"
    "ETH ethereum 30"
    "USDT ethereum 20"
    "USDC ethereum 15"
    "TRX tron 12"
    "USDT tron 10"
    "SOL solana 25"
)
run_id="$(date +%Y%m%d%H%M%S)"
ids=()
labels=()
say "creating one intent per method"
for m in "${methods[@]}"; do
    read -r asset network usd <<<"$m"
    out="$(pw intent create --kind order --reference "devnet-$run_id-$asset-$network" \
        --account devnet --asset "$asset" --network "$network" --usd "$usd")" \
        || die "creating the $asset on $network intent failed"
    id="$(printf '%s\n' "$out" | awk 'NR == 1 { print $2 }')"
    address="$(printf '%s\n' "$out" | awk '$1 == "pay" { print $NF }')"
    coin="$(printf '%s\n' "$out" | awk '$1 == "pay" { print $2 }')"
    due="$(printf '%s\n' "$out" | awk '$1 == "due" { print $2 }')"
    [ -n "$id" ] && [ -n "$address" ] && [ -n "$due" ] || die "unexpected intent output:
$out"
    ids+=("$id")
    labels+=("$asset/$network")
    printf '%s %s %s %s %s %s\n' "$id" "$asset" "$network" "$address" "$due" "$coin" >>"$dir/intents"
done
created_at=$SECONDS

# --- three cases for the review queue -----------------------------------------
# Field $3 of the line of `intent create` output whose first word is $2.
field() { printf '%s\n' "$1" | awk -v k="$2" -v n="$3" '$1 == k { print $n }'; }
say "creating three payments that go to review: late, underpaid, wrong network"
out="$(pw_review intent create --kind order --reference "devnet-$run_id-late" \
    --account devnet --asset LTC --network litecoin --usd 12)" || die "creating the late intent failed"
late_id="$(field "$out" intent 2)"
late_address="$(field "$out" pay 7)"
late_coin="$(field "$out" pay 2)"
out="$(pw_review intent create --kind order --reference "devnet-$run_id-underpaid" \
    --account devnet --asset LTC --network litecoin --usd 14)" || die "creating the underpaid intent failed"
under_id="$(field "$out" intent 2)"
under_address="$(field "$out" pay 7)"
under_due="$(field "$out" due 2)"
out="$(pw intent create --kind order --reference "devnet-$run_id-wrong-network" \
    --account devnet --asset USDT --network ethereum --usd 16)" || die "creating the wrong-network intent failed"
wrong_id="$(field "$out" intent 2)"
wrong_twin="$(field "$out" twin 3)"
wrong_due="$(field "$out" due 2)"
[ -n "$late_id" ] && [ -n "$under_id" ] && [ -n "$wrong_id" ] && [ -n "$wrong_twin" ] \
    || die "unexpected intent output while creating the review cases:
$out"
late_created=$SECONDS
late_paid=0
review_ids=("$late_id" "$under_id" "$wrong_id")
review_labels=("paid late" "underpaid" "wrong network")

# --- the status table --------------------------------------------------------
# One line per intent from `paywatch intent show`: status, amounts due and
# received (final and pending), in coins.
table=
all_paid=0
stuck=
read_table() {
    local i id out status due fin pend
    table=
    all_paid=1
    stuck=
    for i in "${!ids[@]}"; do
        id=${ids[$i]}
        out="$(pw intent show "$id" 2>/dev/null)" || out=
        status="$(printf '%s\n' "$out" | awk '$1 == "status" { print $2 }')"
        due="$(printf '%s\n' "$out" | awk '$1 == "pay" { print $2 }')"
        fin="$(printf '%s\n' "$out" | awk '$1 == "received" { print $3 }')"
        pend="$(printf '%s\n' "$out" | awk '$1 == "received" { print $5 }')"
        table+="$(printf '  %-4s %-15s %-17s due %-12s final %-12s pending %s' \
            "$id" "${labels[$i]}" "${status:-?}" "${due:-?}" "${fin:-?}" "${pend:-?}")"$'\n'
        [ "$status" = paid ] || all_paid=0
        case "$status" in
        expired | needs_review | resolved) stuck+=" $id ($status)" ;;
        esac
    done
    review_ready=1
    for i in "${!review_ids[@]}"; do
        id=${review_ids[$i]}
        out="$(pw intent show "$id" 2>/dev/null)" || out=
        status="$(printf '%s\n' "$out" | awk '$1 == "status" { print $2, $3 }')"
        table+="$(printf '  %-4s %-15s %s' "$id" "${review_labels[$i]}" "${status:-?}")"$'\n'
        case "$status" in
        needs_review*) ;;
        *) review_ready=0 ;;
        esac
    done
}
print_table() {
    printf '\n%s s after creation (amounts in coins):\n%s' "$((SECONDS - created_at))" "$table"
}

read_table
print_table
last=$table

# --- pay each on its chain ---------------------------------------------------
say "paying each intent on its chain"
while read -r id asset network address due coin; do
    case "$network" in
    bitcoin)
        printf '    %-15s intent %s: paid by the in-process chain'"'"'s customer\n' "$asset/$network" "$id" >&2
        ;;
    litecoin)
        txid="$(ltc_rpc sendtoaddress "[\"$address\", \"$coin\"]" | result)" \
            || die "litecoind could not pay intent $id"
        printf '    %-15s intent %s: %s LTC, tx %s\n' "$asset/$network" "$id" "$coin" "$txid" >&2
        ;;
    *)
        answer="$(curl -s --fail-with-body --max-time 30 -H 'content-type: application/json' \
            --data "{\"network\":\"$network\",\"asset\":\"$asset\",\"to\":\"$address\",\"amount\":\"$due\"}" \
            "$DEVNODES_CONTROL_URL/pay")" || die "paying intent $id on $network failed: $answer"
        txid="$(printf '%s' "$answer" | sed -n 's/.*"txid":"\([^"]*\)".*/\1/p')"
        printf '    %-15s intent %s: %s base units, tx %s\n' "$asset/$network" "$id" "$due" "$txid" >&2
        ;;
    esac
done <"$dir/intents"

half=$((under_due / 2))
half_coin="$(printf '%d.%08d' $((half / 100000000)) $((half % 100000000)))"
txid="$(ltc_rpc sendtoaddress "[\"$under_address\", \"$half_coin\"]" | result)" \
    || die "litecoind could not pay the underpaid intent"
printf '    %-15s intent %s: %s LTC, half its due, tx %s\n' "underpaid" "$under_id" "$half_coin" "$txid" >&2
answer="$(curl -s --fail-with-body --max-time 30 -H 'content-type: application/json' \
    --data "{\"network\":\"tron\",\"asset\":\"USDT\",\"to\":\"$wrong_twin\",\"amount\":\"$wrong_due\"}" \
    "$DEVNODES_CONTROL_URL/pay")" || die "paying the wrong-network intent failed: $answer"
printf '    %-15s intent %s: USDT sent on Tron to %s, the twin of its Ethereum address\n' \
    "wrong network" "$wrong_id" "$wrong_twin" >&2

tick=0
while :; do
    for name in paywatch_pid devnodes_pid ltc_pid; do
        alive "${!name}" || {
            log_tails
            print_table
            die "${name%_pid} exited unexpectedly"
        }
    done
    # The late payment: in full, once its intent has expired.
    if [ "$late_paid" = 0 ] && [ $((SECONDS - late_created)) -ge 25 ]; then
        txid="$(ltc_rpc sendtoaddress "[\"$late_address\", \"$late_coin\"]" | result)" \
            || die "litecoind could not pay the late intent"
        printf '    %-15s intent %s: %s LTC after it expired, tx %s\n' "paid late" "$late_id" "$late_coin" "$txid" >&2
        late_paid=1
    fi
    read_table
    if [ "$table" != "$last" ]; then
        print_table
        last=$table
    fi
    if [ "$all_paid" = 1 ] && [ "$review_ready" = 1 ]; then
        break
    fi
    if [ "$until_paid" = 1 ] && [ -n "$stuck" ]; then
        log_tails
        print_table
        die "not paid:$stuck"
    fi
    if [ "$until_paid" = 1 ] && [ $((SECONDS - created_at)) -ge "$timeout_secs" ]; then
        log_tails
        pw status >&2 || true
        print_table
        die "not all eight paid, or not all three review cases in review, within ${timeout_secs}s"
    fi
    # Litecoin blocks come from here: one every 2 s.
    tick=$((tick + 1))
    [ $((tick % 2)) -eq 0 ] && ltc_mine
    sleep 1
done

elapsed=$((SECONDS - created_at))
printf '\nAll eight intents paid and three cases in review, %s s after they were created.\n' "$elapsed"

# --- what it serves ------------------------------------------------------------
get() { curl -s --fail-with-body --max-time 10 "$@"; }
get "$api/readyz" >/dev/null || die "the API at $api does not answer /readyz"
queue="$(get -H "Authorization: Bearer $(token_of operator)" "$api/v1/review-queue")" \
    || die "the review queue does not answer: $queue"
for id in "${review_ids[@]}"; do
    printf '%s' "$queue" | grep -Eq "\"(intent_)?id\": ?$id[,}]" \
        || die "intent $id is not in the API's review queue: $queue"
done
# Each answer read whole before it is searched: `grep -q` stops at its first
# match, and curl writing into the closed pipe would fail the pipeline.
login_page="$(get "$api/console/login")" || die "the console's login page does not answer at $api/console/login"
printf '%s' "$login_page" | grep -q '<form' || die "the console's login page at $api/console/login has no form"
metrics="$(get "http://127.0.0.1:$metrics_port/metrics")" \
    || die "the metrics at http://127.0.0.1:$metrics_port/metrics do not answer"
printf '%s\n' "$metrics" | grep -q '^paywatch_' \
    || die "no paywatch metrics at http://127.0.0.1:$metrics_port/metrics"
# One intent left open, to pay from its hosted page.
out="$(pw intent create --kind order --reference "devnet-$run_id-open" \
    --account devnet --asset LTC --network litecoin --usd 10)" || die "creating the open intent failed"
open_id="$(field "$out" intent 2)"
open_address="$(field "$out" pay 7)"
open_coin="$(field "$out" pay 2)"
open_page="$(field "$out" pay_page 2)"
page="$(get "$api$open_page")" || die "the payment page $api$open_page does not answer"
printf '%s' "$page" | grep -q "$open_address" || die "the payment page $api$open_page does not show its address"

cat <<SERVED

Open in a browser (everything on 127.0.0.1):
  operator console  $api/console   (log in with the operator or support token)
  payment page      $api$open_page
                    (intent $open_id, still open: pay it as below and watch it change)
  API               $api/v1/openapi.json
  metrics           http://127.0.0.1:$metrics_port/metrics

Dev tokens (this run only; also in $dir/tokens):
  storefront  $(token_of storefront)
  operator    $(token_of operator)
  support     $(token_of support)

Three cases wait in the review queue: intent $late_id (paid late), $under_id
(underpaid) and $wrong_id (USDT sent on Tron to its Ethereum address's twin).

Pay the open intent $open_id ($open_coin LTC) while its page is open:
  curl -s --user devnet:devnet --data '{"method":"sendtoaddress","params":["$open_address","$open_coin"]}' http://127.0.0.1:$ltc_rpc_port/
SERVED
if [ "$until_paid" = 1 ]; then
    exit 0
fi

cat <<EOF

paywatch keeps watching; Ctrl-C stops it and every node this script started
(paywatch run, paywatch-devnodes, litecoind). Meanwhile, in another shell:

  $paywatch --config $config status
  $paywatch --config $config intent show ${ids[0]}
  curl -s -H "Authorization: Bearer $(token_of storefront)" $api/v1/intents/${ids[0]}
  $paywatch --config $config transfers list
  $paywatch --config $config intent create --kind order --reference my-order-1 \\
      --account me --asset ETH --network ethereum --usd 25

Pay on the dev chains: BTC intents are paid by the in-process customer; LTC:
  curl -s --user devnet:devnet --data '{"method":"sendtoaddress","params":["ADDRESS","COINS"]}' http://127.0.0.1:$ltc_rpc_port/
and the rest (amount in base units: wei, token units, sun, lamports):
  curl -s --data '{"network":"ethereum","asset":"ETH","to":"ADDRESS","amount":"BASE_UNITS"}' $DEVNODES_CONTROL_URL/pay

Logs: $dir/logs/ (paywatch.log, devnodes.log); endpoints: $env_file
EOF
while :; do
    for name in paywatch_pid devnodes_pid ltc_pid; do
        alive "${!name}" || {
            log_tails
            die "${name%_pid} exited unexpectedly"
        }
    done
    ltc_mine
    sleep 2
done
