# fencelock benchmark (bench/, the crate fencelock-bench): fencelock against the Lua-and-polling lock
# pattern, the ZSET semaphore recipe, where the server has them its native owner checks
# (DELIFEQ, SET IFEQ), and the floor module (bench/floor, the crate fencelock-floor: the
# same key work and nothing else, loaded beside fencelock; `build` builds it), in one
# run. Included by the Makefile (`include mk/*.mk`).
# The server launcher and the RESP codec come from the dev-only `testkit` crate.
#   make bench        full run (several minutes): table on stdout, target/bench/report.{json,md}
#                     and target/bench/{bench,curves}.svg; docs/ is left alone
#   make bench-docs   the same full run, then also writes docs/performance.md anew
#                     and docs/{bench,curves}.svg (`--docs`): for publishing figures, not for local runs;
#                     with the etcd side by side of make bench-peers (mk/peers.mk)
#   make bench-smoke  the same scenarios and rows (semaphores included), a few seconds
#                     each (CI); reports in target/bench/smoke
#   make bench-all    a full run on each server of BENCH_SERVERS (reports in
#                     target/bench/<server>/), then one combined table:
#                     target/bench/all-servers.md
#   make bench-python the Python client's uncontended acquire/release cycles and new
#                     connections against redis-py's own lock, sync and asyncio
#                     (clients/python/benchmarks/cycles.py, ~1.5 min): table on stdout,
#                     target/bench/python-cycles.{md,json}; PYTHON_BENCH_ARGS=--quick
#                     for a few seconds (reports in target/bench/smoke)
# SERVER picks the server of bench, bench-docs and bench-smoke: redis-7.0 (Debian's
# redis-server from PATH, the default), redis-8.2 or valkey-9.1 (from the virtualenv of
# mk/compat.mk, made on demand; scripts/compat-servers.sh lists the binaries).
# BENCH_ARGS adds options to any of them, e.g. `make bench BENCH_ARGS="--reps 5"` (see `--help`).

BENCH_ARGS ?=
PYTHON_BENCH_ARGS ?=
SERVER ?= redis-7.0
BENCH_SERVERS := redis-7.0 redis-8.2 valkey-9.1
BENCH_DIR := target/bench

# Debian's server needs no virtualenv (CI's smoke run has none); the others do.
bench_venv = $(if $(filter redis-7.0,$(SERVER)),,venv)

# Shell code: runs the benchmark on server $$server (a shell variable) with the rest of
# the line as its options. The binary is looked up by name; an unknown name fails.
define bench_on
case " $(BENCH_SERVERS) " in *" $$server "*) ;; \
  *) echo "SERVER=$$server: not one of $(BENCH_SERVERS)" >&2; exit 2 ;; esac; \
if [ "$$server" = redis-7.0 ]; then binary=$$(command -v redis-server); \
else binary=$$(scripts/compat-servers.sh $(VENV) | awk -v s="$$server" '$$1 == s { print $$2 }'); fi; \
[ -x "$$binary" ] || { echo "no binary for $$server" >&2; exit 1; }; \
FENCELOCK_REDIS_SERVER=$$binary cargo run --release -p fencelock-bench $(BENCH_FEATURES) -- --server $$server
endef

.PHONY: bench bench-docs bench-smoke bench-all bench-python

##@ Benchmark (SERVER=redis-7.0|redis-8.2|valkey-9.1, BENCH_ARGS)

bench: build $(bench_venv) ## full benchmark run (minutes): target/bench/report.{json,md}, bench.svg, curves.svg
	server=$(SERVER); $(bench_on) $(BENCH_ARGS)

bench-docs: build $(bench_venv) ## full run, then write docs/performance.md, docs/bench.svg and docs/curves.svg anew
	server=$(SERVER); $(bench_on) --docs $(BENCH_ARGS)

bench-smoke: build $(bench_venv) ## every scenario for a few seconds (CI): target/bench/smoke/
	server=$(SERVER); $(bench_on) --smoke $(BENCH_ARGS)

bench-all: build venv ## a full run on each server, then target/bench/all-servers.md
	for server in $(BENCH_SERVERS); do \
	  $(bench_on) --out $(BENCH_DIR)/$$server $(BENCH_ARGS) || exit 1; \
	done
	cargo run --release -p fencelock-bench -- combine $(BENCH_DIR)/all-servers.md \
	  $(addprefix $(BENCH_DIR)/,$(BENCH_SERVERS)) >/dev/null
	@echo "combined table: $(BENCH_DIR)/all-servers.md"

# The server as for the client's tests: FENCELOCK_REDIS_SERVER (default redis-server on
# PATH) and FENCELOCK_MODULE (default target/release/libfencelock.so).
bench-python: build venv ## the Python client's cycles against redis-py's lock (PYTHON_BENCH_ARGS)
	$(VENV)/bin/python clients/python/benchmarks/cycles.py $(PYTHON_BENCH_ARGS)
