#!/usr/bin/env bash
# Builds the previous release's `paywatch` (the commit in
# deploy/previous-release) from this clone's history, and prints the
# binary's path, kept under the target directory by commit: built once per
# previous release. It builds in a target directory of its own: cargo names
# a workspace crate's artifacts by its path inside the workspace, so in the
# shared one the older sources' artifacts would take the place of this
# release's, and look fresh to its next build.
#
#   bin="$(bash deploy/build-previous-release.sh)"
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
commit="$(grep -v '^#' "$repo/deploy/previous-release" | tr -d '[:space:]')"
target="${CARGO_TARGET_DIR:-$repo/target}"
out="$target/previous-release/paywatch-$commit"

die() {
    printf 'deploy/build-previous-release.sh: %s\n' "$*" >&2
    exit 1
}

if [ -x "$out" ]; then
    echo "$out"
    exit 0
fi
git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null \
    || die "the previous release $commit is not in this clone's history (a shallow clone? run: git fetch --unshallow)"

src="$target/previous-release/src-$commit"
rm -rf "$src"
mkdir -p "$src"
git -C "$repo" archive "$commit" | tar -x -C "$src"
own="$target/previous-release/target"
(cd "$src" && CARGO_TARGET_DIR="$own" cargo build --locked --bin paywatch >&2) \
    || die "the previous release $commit did not build"
cp "$own/debug/paywatch" "$out.tmp"
mv "$out.tmp" "$out"
rm -rf "$src" "$own"
echo "$out"
