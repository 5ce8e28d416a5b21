#!/bin/sh
# Packs a built module with the files a user needs beside it:
#   scripts/dist-tarball.sh MODULE OUTDIR
# writes OUTDIR/fencelock-<version>-<target>.tar.gz: one directory of that name with
# fencelock.so, redis.conf.example, LICENSE, README.md, CHANGELOG.md and SHA256SUMS
# (check with `sha256sum -c SHA256SUMS` inside it). <version> is the fencelock crate's,
# <target> the host triple the module was built for.
# The same inputs give the same bytes: names sorted, owner root, fixed modes, every
# timestamp SOURCE_DATE_EPOCH (mk/dist.mk sets it), gzip without name or time.
set -eu

module=$1
out=$2
# The files beside the module, as the positional parameters from here on.
set -- redis.conf.example LICENSE README.md CHANGELOG.md

fail() {
    echo "dist: $*" >&2
    exit 1
}

case "${SOURCE_DATE_EPOCH:-}" in
'' | *[!0-9]*) fail "SOURCE_DATE_EPOCH must be a Unix time (got '${SOURCE_DATE_EPOCH:-}')" ;;
esac
[ -f "$module" ] || fail "$module is missing: run make build"
for doc in "$@"; do
    [ -f "$doc" ] || fail "$doc is missing: every release ships it"
done

version=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "fencelock"))')
target=$(rustc -vV | sed -n 's/^host: //p')
if [ -z "$version" ] || [ -z "$target" ]; then
    fail "could not read the version or the host triple"
fi
name=fencelock-$version-$target

# Staged outside OUTDIR, which holds only finished artifacts.
stage=target/dist-stage
rm -rf "$stage"
mkdir -p "$stage/$name" "$out"
# Executable: Redis 7 refuses to load a module without an execute bit.
install -m 755 "$module" "$stage/$name/fencelock.so"
install -m 644 "$@" "$stage/$name/"
# The example as a release ships it: loading ./fencelock.so beside it.
scripts/release-conf.sh ./fencelock.so "$stage/$name/redis.conf.example"
(cd "$stage/$name" && LC_ALL=C sha256sum fencelock.so "$@" | LC_ALL=C sort -k 2 >SHA256SUMS)
chmod 644 "$stage/$name/SHA256SUMS"
chmod 755 "$stage/$name"

# Through a file, not a pipe: sh has no pipefail, and a failing tar must fail here.
LC_ALL=C tar --format=gnu --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@$SOURCE_DATE_EPOCH" -C "$stage" -cf "$stage/$name.tar" "$name"
gzip -9n <"$stage/$name.tar" >"$out/$name.tar.gz"
rm -rf "$stage"
echo "dist: $out/$name.tar.gz"
