#!/usr/bin/env bash
# Installs the real chain nodes the integration tests start (through
# chains/testkit): Litecoin Core (regtest), ElectrumX over it, and anvil
# (Foundry's Ethereum dev node); and protoc with Google's well-known protos,
# which the Tron crates need to build (tron-grpc compiles Tron's protos).
#
#   bash deploy/install-nodes.sh
#
# Idempotent: installs only what is missing, and says where everything is.
# Fails (non-zero, with the reason) if an install fails.
#
# PAYWATCH_TOOLS      where tools not packaged by Debian go
#                     (default /var/cache/paywatch-tools); ElectrumX is a
#                     Python venv at $PAYWATCH_TOOLS/electrumx, anvil an npm
#                     prefix at $PAYWATCH_TOOLS/evm.
# PAYWATCH_LITECOIND  a litecoind binary to use instead of the Debian one
#                     (then nothing is installed for it, only checked).
# PAYWATCH_ELECTRUMX  an electrumx_server to use instead of the venv one
#                     (then nothing is installed for it, only checked).
# PAYWATCH_ANVIL      an anvil binary to use instead of the npm one
#                     (then nothing is installed for it, only checked).
# PAYWATCH_PYTHON     the Python (3.10 or newer) to build the venv with
#                     (default python3).
set -euo pipefail

tools="${PAYWATCH_TOOLS:-/var/cache/paywatch-tools}"
venv="$tools/electrumx"
evm="$tools/evm"
anvil_version=1.7.1
python="${PAYWATCH_PYTHON:-python3}"
debian_litecoind=/usr/lib/litecoin/litecoind

say() { printf '==> %s\n' "$*" >&2; }
die() {
    printf '\ndeploy/install-nodes.sh: %s\n' "$*" >&2
    exit 1
}

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $*"
    fi
}

# The tools dir may be the user's own (PAYWATCH_TOOLS=~/tools): root only if needed.
as_tools_owner() {
    if mkdir -p "$tools" 2>/dev/null && [ -w "$tools" ]; then
        "$@"
    else
        as_root "$@"
    fi
}

apt_updated=
apt_install() {
    command -v apt-get >/dev/null 2>&1 \
        || die "cannot install $* (no apt-get on this machine); install it by hand and run again"
    # Update the package lists only when one of the packages has no candidate.
    local pkg need_update=
    for pkg in "$@"; do
        if ! apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
            need_update=1
        fi
    done
    if [ -n "$need_update" ] && [ -z "$apt_updated" ]; then
        say "apt-get update"
        as_root timeout 600 apt-get update \
            || die "apt-get update failed (no network, or a broken apt source?)"
        apt_updated=1
    fi
    say "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive timeout 1200 \
        apt-get install -y --no-install-recommends "$@" \
        || die "apt-get install $* failed (see above)"
}

# --- protoc --------------------------------------------------------------------
# tron-grpc's build script runs protoc over Tron's protos, which import
# google/protobuf/any.proto: the compiler alone is not enough.
if ! command -v protoc >/dev/null 2>&1 || [ ! -f /usr/include/google/protobuf/any.proto ]; then
    say "installing protoc and the well-known protos (Tron's gRPC is generated at build time)"
    apt_install protobuf-compiler libprotobuf-dev
fi

# --- Litecoin Core -----------------------------------------------------------
if [ -n "${PAYWATCH_LITECOIND:-}" ]; then
    [ -x "$PAYWATCH_LITECOIND" ] \
        || die "PAYWATCH_LITECOIND=$PAYWATCH_LITECOIND is not an executable file"
    litecoind="$PAYWATCH_LITECOIND"
else
    if [ ! -x "$debian_litecoind" ]; then
        say "installing litecoind (Debian package)"
        apt_install litecoind
    fi
    [ -x "$debian_litecoind" ] \
        || die "the litecoind package is installed but $debian_litecoind is missing"
    litecoind="$debian_litecoind"
fi
ltc_version="$(timeout 30 "$litecoind" -version 2>/dev/null | head -n 1 || true)"
[ -n "$ltc_version" ] || die "$litecoind does not run ('$litecoind -version' printed nothing)"

# --- ElectrumX ---------------------------------------------------------------
electrumx_ok() {
    [ -x "$venv/bin/electrumx_server" ] \
        && "$venv/bin/python" -c 'import electrumx, plyvel' >/dev/null 2>&1
}

if [ -n "${PAYWATCH_ELECTRUMX:-}" ]; then
    [ -x "$PAYWATCH_ELECTRUMX" ] \
        || die "PAYWATCH_ELECTRUMX=$PAYWATCH_ELECTRUMX is not an executable file"
    electrumx="$PAYWATCH_ELECTRUMX"
else
    if ! electrumx_ok; then
        if ! command -v "$python" >/dev/null 2>&1; then
            [ "$python" = python3 ] || die "PAYWATCH_PYTHON=$python is not a command"
            apt_install python3 python3-venv
            command -v python3 >/dev/null 2>&1 || die "no python3 after installing it"
        fi
        "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
            || die "$python is $("$python" --version 2>&1); ElectrumX needs Python 3.10 or newer (set PAYWATCH_PYTHON)"

        say "creating a Python venv for ElectrumX at $venv"
        as_tools_owner mkdir -p "$tools"
        as_tools_owner rm -rf "$venv"
        if ! as_tools_owner "$python" -m venv "$venv" 2>/dev/null; then
            # Debian's python3 has no ensurepip without python3-venv.
            apt_install python3-venv
            as_tools_owner rm -rf "$venv"
            as_tools_owner "$python" -m venv "$venv" || die "'$python -m venv $venv' failed (see above)"
        fi

        say "pip install e-x plyvel"
        if ! as_tools_owner timeout 900 "$venv/bin/pip" install --disable-pip-version-check \
            --no-input --quiet e-x plyvel; then
            as_tools_owner rm -rf "$venv" # a half-made venv would look installed next time
            die "pip install e-x plyvel failed (see above); no ElectrumX installed"
        fi
        electrumx_ok || die "ElectrumX installed at $venv but does not import (electrumx, plyvel)"
    fi
    electrumx="$venv/bin/electrumx_server"
fi
if [ -z "${PAYWATCH_ELECTRUMX:-}" ]; then
    ex_version="e-x $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("e-x"))' 2>/dev/null || echo '?')"
else
    ex_version="(version not checked)"
fi

# --- anvil (Ethereum dev node) ------------------------------------------------
# Foundry publishes anvil as a prebuilt binary in a per-platform npm package.
anvil_ok() {
    [ -x "$evm/node_modules/.bin/anvil" ] || return 1
    local v
    v="$(timeout 30 "$evm/node_modules/.bin/anvil" --version 2>/dev/null || true)"
    case "$v" in
        *"Version: $anvil_version"*) return 0 ;;
        *) return 1 ;;
    esac
}

if [ -n "${PAYWATCH_ANVIL:-}" ]; then
    [ -x "$PAYWATCH_ANVIL" ] \
        || die "PAYWATCH_ANVIL=$PAYWATCH_ANVIL is not an executable file"
    anvil="$PAYWATCH_ANVIL"
else
    if ! anvil_ok; then
        case "$(uname -s)-$(uname -m)" in
            Linux-x86_64) anvil_pkg=@foundry-rs/anvil-linux-amd64 ;;
            Linux-aarch64 | Linux-arm64) anvil_pkg=@foundry-rs/anvil-linux-arm64 ;;
            *) die "no anvil package for $(uname -s) $(uname -m); install anvil by hand (https://getfoundry.sh) and set PAYWATCH_ANVIL" ;;
        esac
        if ! command -v npm >/dev/null 2>&1; then
            apt_install nodejs npm
            command -v npm >/dev/null 2>&1 || die "no npm after installing it"
        fi

        say "npm install $anvil_pkg@$anvil_version into $evm"
        as_tools_owner mkdir -p "$evm"
        if ! as_tools_owner timeout 900 npm install --prefix "$evm" --no-audit --no-fund \
            --loglevel=error "$anvil_pkg@$anvil_version"; then
            die "npm install $anvil_pkg@$anvil_version failed (see above); no anvil installed"
        fi
        anvil_ok || die "anvil installed at $evm/node_modules/.bin/anvil but '$evm/node_modules/.bin/anvil --version' is not $anvil_version"
    fi
    anvil="$evm/node_modules/.bin/anvil"
fi
eth_version="$(timeout 30 "$anvil" --version 2>/dev/null | head -n 1 || true)"
[ -n "$eth_version" ] || die "$anvil does not run ('$anvil --version' printed nothing)"

# --- summary -----------------------------------------------------------------
cat <<EOF

Chain nodes for the integration tests (chains/testkit):
  litecoind        $litecoind
                   $ltc_version
  electrumx_server $electrumx
                   $ex_version
  anvil            $anvil
                   $eth_version

The tests find them there by default; to use others, set
  PAYWATCH_LITECOIND=/path/to/litecoind
  PAYWATCH_ELECTRUMX=/path/to/electrumx_server
  PAYWATCH_ANVIL=/path/to/anvil                  (or PAYWATCH_TOOLS=dir)
EOF
