#!/bin/sh
# Writes the redis.conf.example a release ships, loading the module from where that
# release puts it:
#   scripts/release-conf.sh MODULE_PATH OUT
# The repository's copy loads a source checkout's build (./target/release/…) and is
# started from the checkout's root; a release's copy must load its own module: the
# tarball's ./fencelock.so (started from the unpacked directory), the Debian package's
# /usr/lib/redis/modules/fencelock.so.
set -eu

module=$1
out=$2

fail() {
    echo "release-conf: $*" >&2
    exit 1
}

[ -f redis.conf.example ] || fail "redis.conf.example is missing: run from the repository root"
case "$module" in
./*) start="# Start it from this directory: \`redis-server redis.conf.example\`." ;;
/*) start="# Copy the settings you need into /etc/redis/redis.conf; \`redis-server <this file>\` runs it as it is." ;;
*) fail "MODULE_PATH must start with ./ or /: $module" ;;
esac
mkdir -p "$(dirname "$out")"
sed -e "s|^loadmodule \\./target/release/libfencelock\\.so\$|loadmodule $module|" \
    -e "s|^# Start it from the repository root: .*|$start|" \
    -e "s|/path/libfencelock\\.so|$module|" \
    redis.conf.example >"$out"
# A changed example that no longer has the line to rewrite must fail here, not ship a
# config that loads a build path.
grep -qx "loadmodule $module" "$out" || fail "redis.conf.example: no loadmodule line to point at $module"
if grep -q 'target/release\|repository root' "$out"; then
    fail "redis.conf.example: a source-checkout path is left in $out"
fi
