#!/bin/sh
# Runs the whole integration suite (`cargo test --release --tests`), the Python client's
# tests (clients/python; with redis-py 8 from VENV, then with the oldest supported
# redis-py, 5, from $VENV_REDIS5, default target/venv-redis5: $PYTHON_TESTS_REDIS5,
# default all of them), the Python examples' tests and the Node package's and examples'
# tests (scripts/test-node.sh; `make node-deps` first) once per server of the
# compatibility matrix (scripts/compat-servers.sh), then prints one result line per
# server. Every test binary runs on every server even after a failure
# (--no-fail-fast), so one run shows all differences between servers.
# Exits non-zero if anything failed anywhere.
# COMPAT_COVERED names a server (e.g. redis-7.0) whose Rust and Node tests already ran
# in this build (`make test`, right before, in CI): there only the Python tests run.
# COMPAT_REDIS5_ON names the servers (space-separated; default: all) on which the
# Python client's tests run a second time with redis-py 5. The client library's version
# and the server's are independent axes: redis-py 8 meets every server, and redis-py 5
# meets the oldest one (CI: redis-7.0), which is where an old client most often runs.
# Usage: [VENV_REDIS5=…] [PYTHON_TESTS_REDIS5=…] [COMPAT_COVERED=name] [COMPAT_REDIS5_ON="name…"]
#        scripts/test-compat.sh VENV [extra cargo test args…]
set -u
venv=${1:?usage: test-compat.sh VENV [cargo test args]}
shift
cd "$(dirname "$0")/.."

servers=$(scripts/compat-servers.sh "$venv") || exit 1
# Absolute: the client's tests run from clients/python.
venv_python=$(cd "$venv" && pwd)/bin/python
venv_redis5=${VENV_REDIS5:-target/venv-redis5}
# A missing redis-py 5 virtualenv fails the run: it never silently tests less.
[ -x "$venv_redis5/bin/python" ] || { echo "compat: missing $venv_redis5 (make venv-redis5)" >&2; exit 1; }
redis5_python=$(cd "$venv_redis5" && pwd)/bin/python
redis5_tests=${PYTHON_TESTS_REDIS5:-tests}
# The 10,000-waiter test needs ~10,000 sockets on each side.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

summary=""
failed=0
while read -r name path; do
    version=$("$path" --version | sed -n 's/.* v=\([0-9.]*\).*/\1/p')
    echo "=== $name v$version ($path)"
    export FENCELOCK_REDIS_SERVER="$path"
    failures=""
    covered=no
    [ "$name" = "${COMPAT_COVERED:-}" ] && covered=yes
    # stdin is the list of servers: keep the tests off it.
    if [ $covered = no ]; then
        cargo test --release --tests --no-fail-fast "$@" </dev/null || failures="$failures FAILED (cargo tests)"
    else
        echo "compat: $name: the Rust and Node tests ran in make test"
    fi
    (cd clients/python && PYTHONDONTWRITEBYTECODE=1 "$venv_python" -m pytest -q \
        -p no:cacheprovider tests </dev/null) || failures="$failures FAILED (python client)"
    case " ${COMPAT_REDIS5_ON:-$name} " in
    *" $name "*)
        # shellcheck disable=SC2086 # a list of test paths
        (cd clients/python && PYTHONDONTWRITEBYTECODE=1 "$redis5_python" -m pytest -q \
            -p no:cacheprovider $redis5_tests </dev/null) || failures="$failures FAILED (python client, redis-py 5)"
        ;;
    *) echo "compat: $name: the Python client's tests with redis-py 5 run on ${COMPAT_REDIS5_ON} only" ;;
    esac
    PYTHONDONTWRITEBYTECODE=1 "$venv_python" -m pytest -q -p no:cacheprovider \
        examples/python </dev/null || failures="$failures FAILED (python examples)"
    if [ $covered = no ]; then
        scripts/test-node.sh </dev/null || failures="$failures FAILED (node package and examples)"
    fi
    result=${failures:-passed}
    [ -z "$failures" ] || failed=1
    summary="$summary
compat: $name v$version: $result"
done <<SERVERS
$servers
SERVERS

echo "$summary"
exit $failed
