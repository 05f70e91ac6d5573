#!/usr/bin/env bash
# Fuzzes the parsers with AFL++ (cargo-afl, on stable Rust): each target for
# SECONDS, seeded from fuzz/seeds/TARGET. Fails if a run found a crash or a
# hang, and names the inputs; prints what each run did either way.
#
#   bash fuzz/run.sh TARGET SECONDS     one of: utxo_block evm_answers tron_block solana_block
#   bash fuzz/run.sh all SECONDS        each in turn
#
# On a fresh Debian machine it installs what is missing: a C compiler (AFL++
# is built from C), protoc (Tron's protos) and cargo-afl from crates.io,
# which builds AFL++ as it installs. The instrumented build lives in
# $CARGO_TARGET_DIR/afl (target/afl by default), apart from the normal
# build, whose flags it does not share. What the fuzzer keeps goes to
# $PAYWATCH_FUZZ_OUT/TARGET (default: $CARGO_TARGET_DIR/fuzz-out).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

say() { printf '==> %s\n' "$*" >&2; }
die() {
    printf '\nfuzz/run.sh: %s\n' "$*" >&2
    exit 1
}

targets_all=(utxo_block evm_answers tron_block solana_block)
# The cargo-afl matching the afl crate in Cargo.lock.
cargo_afl_version=0.18.2

[ $# -eq 2 ] || die "usage: bash fuzz/run.sh TARGET|all SECONDS"
case "$1" in
    all) targets=("${targets_all[@]}") ;;
    utxo_block | evm_answers | tron_block | solana_block) targets=("$1") ;;
    *) die "unknown target '$1' (one of: ${targets_all[*]}, or all)" ;;
esac
seconds="$2"
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || die "SECONDS must be a positive number, not '$seconds'"

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $*"
    fi
}

apt_updated=
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "cannot install $* (no apt-get); install it and run again"
    if [ -z "$apt_updated" ]; then
        as_root apt-get update
        apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}

# --- tools -------------------------------------------------------------------
command -v cargo >/dev/null 2>&1 || die "cargo is not installed; install Rust (https://rustup.rs) and run again"
if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then
    say "installing a C compiler and make (AFL++ is built from C)"
    apt_install build-essential
fi
if ! command -v protoc >/dev/null 2>&1 || [ ! -f /usr/include/google/protobuf/any.proto ]; then
    say "installing protoc and the well-known protos (Tron's gRPC is generated at build time)"
    apt_install protobuf-compiler libprotobuf-dev
fi
if [ "$(cargo afl --version 2>/dev/null | awk '{print $2}')" != "$cargo_afl_version" ]; then
    say "installing cargo-afl $cargo_afl_version (it builds AFL++ as it installs)"
    cargo install cargo-afl --locked --version "$cargo_afl_version" --force \
        || die "cargo install cargo-afl failed (above)"
fi
# The runtime AFL links into the targets is per Rust version: a new rustc
# needs it built again.
afl_check="$(cargo afl fuzz -h 2>&1 || true)"
if [[ "$afl_check" == *"was not built"* ]]; then
    say "building AFL++ for this Rust version: cargo afl config --build"
    cargo afl config --build || die "cargo afl config --build failed (above)"
fi

# --- build -------------------------------------------------------------------
base_target="${CARGO_TARGET_DIR:-$repo/target}"
afl_target="$base_target/afl"
out_root="${PAYWATCH_FUZZ_OUT:-$base_target/fuzz-out}"
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
say "cargo afl build --release --locked -p paywatch-fuzz ${bins[*]} (in $afl_target)"
CARGO_TARGET_DIR="$afl_target" cargo afl build --release --locked -p paywatch-fuzz "${bins[@]}" \
    || die "the instrumented build failed (above)"

# --- fuzz --------------------------------------------------------------------
stat_of() { awk -F' *: *' -v k="$1" '$1 == k {print $2}' "$2"; }

found=0
for t in "${targets[@]}"; do
    out="$out_root/$t"
    rm -rf "$out"
    mkdir -p "$out"
    say "fuzzing $t for ${seconds}s (seeds: fuzz/seeds/$t, findings: $out)"
    # No CPU binding (the machine is shared), no core-dump check (a crash is
    # seen by its signal), no screen. -t: an input that runs over a second
    # is a hang; -m: one that needs 2 GB of address space is a crash, so an
    # allocation sized from a corrupt length cannot pass unseen.
    AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 \
        AFL_NO_AFFINITY=1 \
        cargo afl fuzz -V "$seconds" -t 1000 -m 2048 -i "fuzz/seeds/$t" -o "$out" \
        -- "$afl_target/release/$t" >"$out/afl-fuzz.log" 2>&1 \
        || { tail -n 40 "$out/afl-fuzz.log" >&2; die "afl-fuzz did not run $t (above; full log $out/afl-fuzz.log)"; }
    stats="$out/default/fuzzer_stats"
    [ -f "$stats" ] || die "afl-fuzz left no $stats"
    crashes="$(stat_of saved_crashes "$stats")"
    hangs="$(stat_of saved_hangs "$stats")"
    printf '%s: %s executions in %ss (%s/s), corpus %s, crashes %s, hangs %s\n' \
        "$t" "$(stat_of execs_done "$stats")" "$(stat_of run_time "$stats")" \
        "$(stat_of execs_per_sec "$stats")" "$(stat_of corpus_count "$stats")" "$crashes" "$hangs"
    if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
        found=1
        for f in "$out"/default/crashes/id:* "$out"/default/hangs/id:*; do
            [ -e "$f" ] && printf '  %s\n' "$f" >&2
        done
        say "replay one with: cargo run -p paywatch-fuzz --bin $t < FILE; keep it in fuzz/regressions/$t/"
    fi
done
[ "$found" = 0 ] || die "the fuzzer found crashes or hangs (above)"
