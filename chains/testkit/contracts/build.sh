#!/usr/bin/env bash
# Compiles the test contracts with solcjs 0.8.37 and writes their creation
# bytecode (hex) next to the sources: Token.bin, Forwarder.bin. The .bin
# files are committed; the anvil harness (src/anvil.rs) embeds them with
# include_str!, so tests need no compiler. Run this only after changing a
# .sol file, and commit the new .bin.
#
#   bash chains/testkit/contracts/build.sh
#
# SOLCJS         a solcjs to use (must be 0.8.37); else solc@0.8.37 is
#                installed with npm into $PAYWATCH_TOOLS/solc-0.8.37
#                (PAYWATCH_TOOLS defaults to /var/cache/paywatch-tools).
set -euo pipefail

solc_version=0.8.37
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="${PAYWATCH_TOOLS:-/var/cache/paywatch-tools}"

die() {
    printf '\ncontracts/build.sh: %s\n' "$*" >&2
    exit 1
}

if [ -n "${SOLCJS:-}" ]; then
    solcjs="$SOLCJS"
else
    prefix="$tools/solc-$solc_version"
    solcjs="$prefix/node_modules/.bin/solcjs"
    if [ ! -x "$solcjs" ]; then
        command -v npm >/dev/null 2>&1 || die "npm is missing (apt-get install nodejs npm, or set SOLCJS)"
        printf '==> npm install solc@%s into %s\n' "$solc_version" "$prefix" >&2
        mkdir -p "$prefix"
        timeout 900 npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
            "solc@$solc_version" || die "npm install solc@$solc_version failed (see above)"
    fi
fi
version="$("$solcjs" --version 2>/dev/null || true)"
case "$version" in
    "$solc_version"+*) ;;
    *) die "$solcjs is '$version', not solc $solc_version" ;;
esac

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cd "$here"
for name in Token Forwarder; do
    "$solcjs" --bin --abi --optimize --base-path . -o "$out" "$name.sol" \
        || die "solcjs failed on $name.sol"
    # solcjs names outputs <file>_<contract>.bin, with the path mangled.
    bin="$(find "$out" -name "*${name}_sol_${name}.bin" | head -n 1)"
    [ -s "$bin" ] || die "no bytecode for $name in $out"
    tr -d '\n' <"$bin" >"$name.bin"
    abi="$(find "$out" -name "*${name}_sol_${name}.abi" | head -n 1)"
    [ -s "$abi" ] && cp "$abi" "$name.abi"
    printf '==> %s.bin: %s bytes of bytecode\n' "$name" "$(($(wc -c <"$name.bin") / 2))" >&2
done
