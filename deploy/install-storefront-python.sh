#!/usr/bin/env bash
# Installs what examples/storefront-python needs (psycopg, from PyPI) in a
# Python venv of its own, which tests/storefront_python.rs runs the example
# with.
#
#   bash deploy/install-storefront-python.sh
#
# Idempotent: installs only if missing or another version. Fails (non-zero,
# with the reason) if the install fails.
#
# PAYWATCH_TOOLS             where it goes (default /var/cache/paywatch-tools);
#                            the venv is $PAYWATCH_TOOLS/storefront-python.
# PAYWATCH_STOREFRONT_PYTHON a Python that already has psycopg 3 to use
#                            instead of the venv's (then nothing is
#                            installed, only checked).
# PAYWATCH_PYTHON            the Python (3.10 or newer) to build the venv
#                            with (default python3).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$repo/examples/storefront-python/requirements.txt"
# Pinned in requirements.txt; read back so the two never disagree.
version="$(sed -n 's/^psycopg\[binary\]==\([0-9.]*\)$/\1/p' "$requirements")"
tools="${PAYWATCH_TOOLS:-/var/cache/paywatch-tools}"
venv="$tools/storefront-python"
python="${PAYWATCH_PYTHON:-python3}"

say() { printf '==> %s\n' "$*" >&2; }
die() {
    printf '\ndeploy/install-storefront-python.sh: %s\n' "$*" >&2
    exit 1
}
[ -n "$version" ] || die "no 'psycopg[binary]==X.Y.Z' line in $requirements"

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

has_psycopg() {
    "$1" -c 'import psycopg, sys; sys.exit(not psycopg.__version__.startswith("3."))' 2>/dev/null
}

if [ -n "${PAYWATCH_STOREFRONT_PYTHON:-}" ]; then
    has_psycopg "$PAYWATCH_STOREFRONT_PYTHON" \
        || die "PAYWATCH_STOREFRONT_PYTHON=$PAYWATCH_STOREFRONT_PYTHON cannot import psycopg 3"
    say "storefront example's Python: $PAYWATCH_STOREFRONT_PYTHON"
    exit 0
fi

installed() {
    [ -x "$venv/bin/python" ] \
        && [ "$("$venv/bin/python" -c 'import psycopg; print(psycopg.__version__)' 2>/dev/null)" = "$version" ]
}

if ! installed; then
    if ! command -v "$python" >/dev/null 2>&1; then
        [ "$python" = python3 ] || die "PAYWATCH_PYTHON=$python is not a command"
        apt_install python3 python3-venv
    fi
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$python is $("$python" --version 2>&1); the example needs Python 3.10 or newer (set PAYWATCH_PYTHON)"

    say "creating a Python venv for the storefront example at $venv"
    as_tools_owner rm -rf "$venv"
    if ! as_tools_owner "$python" -m venv "$venv" 2>/dev/null; then
        # Debian's python3 has no ensurepip without python3-venv.
        apt_install python3-venv
        as_tools_owner rm -rf "$venv"
        as_tools_owner "$python" -m venv "$venv" || die "'$python -m venv $venv' failed (see above)"
    fi
    say "pip install -r examples/storefront-python/requirements.txt"
    if ! as_tools_owner timeout 900 "$venv/bin/pip" install --disable-pip-version-check \
        --no-input --quiet -r "$requirements"; then
        as_tools_owner rm -rf "$venv" # a half-made venv would look installed next time
        die "pip install psycopg[binary]==$version failed (see above)"
    fi
    installed || die "psycopg installed at $venv but is not version $version"
fi
say "storefront example's Python: $venv/bin/python (psycopg $version)"
