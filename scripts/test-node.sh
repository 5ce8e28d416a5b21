#!/bin/sh
# Runs the Node package's tests and its examples' tests (clients/node/test/, Node's own
# test runner, one file at a time), each test with its own servers from the harness:
# FENCELOCK_REDIS_SERVER (default /usr/bin/redis-server) with FENCELOCK_MODULE (default
# target/release/libfencelock.so). Arguments pick test files by a part of their path
# (`scripts/test-node.sh examples/` runs the examples' tests alone).
# Needs `make node-deps` (the package's and the examples' npm packages, the package
# built: the examples import it) and `make build` (the module).
# Usage: scripts/test-node.sh [PATH-PART...]
set -eu
cd "$(dirname "$0")/../clients/node"
# stdin may be a list the caller reads (scripts/test-compat.sh): keep the tests off it.
exec npm --no-audit --no-fund --loglevel=error test -- "$@" </dev/null
