#!/usr/bin/env bash
# Installs Schemathesis (PyPI), which tests/api_contract.rs runs against a
# live API from openapi/v1.json, in a Python venv of its own.
#
#   bash deploy/install-schemathesis.sh
#
# Idempotent: installs only if missing or another version. Fails (non-zero,
# with the reason) if the install fails.
#
# PAYWATCH_TOOLS          where it goes (default /var/cache/paywatch-tools);
#                         the venv is $PAYWATCH_TOOLS/schemathesis.
# PAYWATCH_SCHEMATHESIS   a schemathesis to use instead of the venv one
#                         (then nothing is installed, only checked).
# PAYWATCH_PYTHON         the Python (3.10 or newer) to build the venv with
#                         (default python3).
set -euo pipefail

# Pinned: a new release may generate other cases, or read the document
# differently, and the bounded run should change only when we change it.
version=4.32.5
tools="${PAYWATCH_TOOLS:-/var/cache/paywatch-tools}"
venv="$tools/schemathesis"
python="${PAYWATCH_PYTHON:-python3}"

say() { printf '==> %s\n' "$*" >&2; }
die() {
    printf '\ndeploy/install-schemathesis.sh: %s\n' "$*" >&2
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

apt_install() {
    command -v apt-get >/dev/null 2>&1 \
        || die "cannot install $* (no apt-get on this machine); install it by hand and run again"
    as_root timeout 600 apt-get update || die "apt-get update failed"
    as_root env DEBIAN_FRONTEND=noninteractive timeout 1200 \
        apt-get install -y --no-install-recommends "$@" \
        || die "apt-get install $* failed (see above)"
}

if [ -n "${PAYWATCH_SCHEMATHESIS:-}" ]; then
    [ -x "$PAYWATCH_SCHEMATHESIS" ] \
        || die "PAYWATCH_SCHEMATHESIS=$PAYWATCH_SCHEMATHESIS is not an executable file"
    say "schemathesis: $("$PAYWATCH_SCHEMATHESIS" --version 2>&1 | head -n 1)"
    exit 0
fi

installed() {
    [ -x "$venv/bin/schemathesis" ] \
        && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null)" = "$version" ]
}

if ! installed; then
    if ! command -v "$python" >/dev/null 2>&1; then
        [ "$python" = python3 ] || die "PAYWATCH_PYTHON=$python is not a command"
        apt_install python3 python3-venv
    fi
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$python is $("$python" --version 2>&1); Schemathesis needs Python 3.10 or newer (set PAYWATCH_PYTHON)"

    say "creating a Python venv for Schemathesis at $venv"
    as_tools_owner rm -rf "$venv"
    if ! as_tools_owner "$python" -m venv "$venv" 2>/dev/null; then
        # Debian's python3 has no ensurepip without python3-venv.
        apt_install python3-venv
        as_tools_owner rm -rf "$venv"
        as_tools_owner "$python" -m venv "$venv" || die "'$python -m venv $venv' failed (see above)"
    fi
    say "pip install schemathesis==$version"
    if ! as_tools_owner timeout 900 "$venv/bin/pip" install --disable-pip-version-check \
        --no-input --quiet "schemathesis==$version"; then
        as_tools_owner rm -rf "$venv" # a half-made venv would look installed next time
        die "pip install schemathesis==$version failed (see above)"
    fi
    installed || die "Schemathesis installed at $venv but is not version $version"
fi
say "schemathesis: $("$venv/bin/schemathesis" --version 2>&1 | head -n 1) at $venv/bin/schemathesis"
