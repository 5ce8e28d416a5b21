#!/bin/sh
# Installs the fencelock .deb on this machine and checks it the way a user would meet it:
#   scripts/test-deb.sh target/dist/fencelock_<version>_<arch>.deb    (make test-deb)
# 1. dpkg -i; the package lists its module and its conffile, and both exist;
# 2. the README transcript replays against Debian's redis-server with the installed
#    module; that server, started by hand with --loadmodule, lists the module (ver
#    <major*10000+minor*100+patch>) and answers LOCK.ACQUIRE; a config that includes a
#    copy of /etc/redis/fencelock.conf, its lines uncommented, loads it with those
#    settings;
# 3. dpkg --purge; nothing of it is left under /usr/lib/redis, /etc/redis or
#    /usr/share/doc/fencelock (paths, modes and owners as before the install).
# Root only, and it really installs and removes the package: for CI and throwaway
# machines. A fencelock package already installed (a run that died) is purged first; a
# failing run purges it too. TEST_DEB_TRANSCRIPT names another test to replay.
set -eu
cd "$(dirname "$0")/.."

transcript=${TEST_DEB_TRANSCRIPT:-docs_transcripts::the_readme_transcript_replays_as_written}
module=/usr/lib/redis/modules/fencelock.so
conffile=/etc/redis/fencelock.conf
watched="/usr/lib/redis /etc/redis /usr/share/doc/fencelock"

say() { echo "test-deb: $*"; }
fail() {
    echo "test-deb: FAILED: $*" >&2
    exit 1
}

[ "$#" -eq 1 ] || fail "usage: $0 PACKAGE.deb (one file; got $# arguments)"
deb=$1
[ -f "$deb" ] || fail "$deb: no such file (make deb builds it)"
[ "$(id -u)" -eq 0 ] || fail "must run as root: it installs and purges $deb"
server=/usr/bin/redis-server
[ -x "$server" ] || fail "$server is missing: Debian's redis-server (make deps installs it)"
command -v redis-cli >/dev/null || fail "redis-cli is missing (make deps installs redis-tools)"

version=$(dpkg-deb -f "$deb" Version)
upstream=${version%-*}
# MODULE LIST's ver: 0.4.0 -> 400.
ver=$(echo "$upstream" | awk -F. '{ print $1 * 10000 + $2 * 100 + $3 }')

work=$(mktemp -d)
pid=""
stop_server() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        pid=""
    fi
}
installed() { dpkg-query -W -f='${Status}' fencelock 2>/dev/null | grep -q 'ok installed'; }
present() { dpkg-query -W -f='${Status}' fencelock 2>/dev/null | grep -qv 'not-installed'; }
cleanup() {
    status=$?
    stop_server
    if [ "$status" -ne 0 ] && present; then
        say "purging fencelock after the failure"
        dpkg --purge fencelock >/dev/null || true
    fi
    rm -rf "$work"
    if [ "$status" -eq 0 ]; then say "all checks passed"; else echo "test-deb: failed (exit $status)" >&2; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# What exists there, each entry with its mode, owner and type; not sizes or times,
# which dpkg and redis-server may touch without leaving anything behind.
listing() {
    for dir in $watched; do
        [ -e "$dir" ] && find "$dir" -exec stat -c '%n %a %U:%G %F' {} +
    done | LC_ALL=C sort
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts $server with the given arguments in the background and waits for PING.
start_server() {
    port=$1
    shift
    "$server" "$@" --daemonize no --logfile "$work/redis.log" &
    pid=$!
    tries=0
    until redis-cli -p "$port" PING 2>/dev/null | grep -q PONG; do
        tries=$((tries + 1))
        if [ "$tries" -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
            cat "$work/redis.log" >&2 || true
            fail "redis-server on port $port did not start"
        fi
        sleep 0.1
    done
}

shutdown_server() {
    redis-cli -p "$1" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

# MODULE LIST as one line: "name fencelock ver 200 path … args".
check_module_listed() {
    modules=$(redis-cli -p "$1" MODULE LIST | tr '\n' ' ')
    echo "$modules" | grep -q "name fencelock ver $ver path $module " ||
        fail "MODULE LIST shows '$modules', not fencelock ver $ver from $module"
}

if present; then
    say "fencelock is already installed (an earlier run?): purging it first"
    dpkg --purge fencelock >/dev/null
fi
listing >"$work/before"

say "dpkg -i $deb"
dpkg -i "$deb"
installed || fail "dpkg -i did not leave fencelock installed"
dpkg -L fencelock >"$work/files"
for file in "$module" "$conffile"; do
    grep -qx "$file" "$work/files" || fail "dpkg -L fencelock does not list $file"
    [ -f "$file" ] || fail "$file is listed but not installed"
done
# Redis 7 refuses a module without an execute bit.
[ "$(stat -c %a "$module")" = 755 ] || fail "$module has mode $(stat -c %a "$module"), not 755"
dpkg-query -W -f='${Conffiles}\n' fencelock | grep -q " $conffile " ||
    fail "$conffile is not a conffile"
say "installed: $module, $conffile (conffile)"

say "README transcript against $server with $module"
FENCELOCK_REDIS_SERVER=$server FENCELOCK_MODULE=$module \
    cargo test --release --test spec "$transcript" -- --exact >"$work/transcript.log" 2>&1 || {
    cat "$work/transcript.log" >&2
    fail "the README transcript failed"
}
# A name that matches no test passes with 0 tests run: it must be exactly one.
grep -q "^test result: ok\. 1 passed" "$work/transcript.log" || {
    cat "$work/transcript.log" >&2
    fail "no test named $transcript ran"
}
say "the README transcript replays ($transcript)"

port=$(free_port)
start_server "$port" --port "$port" --bind 127.0.0.1 --loadmodule "$module" \
    --save '' --appendonly no --dir "$work"
check_module_listed "$port"
reply=$(redis-cli -p "$port" LOCK.ACQUIRE k 1000 | tr '\n' ' ')
echo "$reply" | grep -Eq '^[0-9a-f]{32} [0-9]{16,} $' ||
    fail "LOCK.ACQUIRE k 1000 answered '$reply', not a token and a fence"
shutdown_server "$port"
say "redis-server --loadmodule $module: MODULE LIST has fencelock ver $ver, LOCK.ACQUIRE answers"

# The snippet as a user enables it: loadmodule and every setting uncommented, so a
# misspelt name or a value out of range fails the start.
sed -e 's/^# \(loadmodule \)/\1/' -e 's/^# \(fencelock\.[a-z-]* [0-9][0-9]*\)$/\1/' \
    "$conffile" >"$work/fencelock.conf"
grep -q "^loadmodule $module\$" "$work/fencelock.conf" ||
    fail "$conffile has no '# loadmodule $module' line"
settings=$(grep -c '^fencelock\.' "$work/fencelock.conf" || true)
port=$(free_port)
cat >"$work/redis.conf" <<EOF
port $port
bind 127.0.0.1
save ""
appendonly no
dir $work
include $work/fencelock.conf
EOF
start_server "$port" "$work/redis.conf"
check_module_listed "$port"
grep '^fencelock\.' "$work/fencelock.conf" | while read -r name value; do
    actual=$(redis-cli -p "$port" CONFIG GET "$name" | sed -n 2p)
    [ "$actual" = "$value" ] || fail "CONFIG GET $name is '$actual', the snippet says $value"
done
shutdown_server "$port"
say "include of $conffile (loadmodule and $settings settings uncommented) loads the module"

# The example config the package ships must load the installed module as it stands
# (only where it listens and writes is changed, by arguments after the file).
example=/usr/share/doc/fencelock/examples/redis.conf.example
port=$(free_port)
start_server "$port" "$example" --port "$port" --bind 127.0.0.1 --dir "$work" \
    --appendonly no --save ''
check_module_listed "$port"
shutdown_server "$port"
say "$example loads the installed module"

say "dpkg --purge fencelock"
dpkg --purge fencelock
if dpkg -s fencelock >/dev/null 2>&1; then
    fail "dpkg -s fencelock still succeeds after the purge"
fi
for left in "$conffile"* /usr/share/doc/fencelock; do
    [ ! -e "$left" ] || fail "$left is left after the purge"
done
listing >"$work/after"
diff -u "$work/before" "$work/after" >&2 || fail "$watched differ from before the install"
say "purged: nothing left under $watched"
