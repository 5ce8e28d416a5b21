# fencelock benchmark (benches/fencelock): fencelock against the Lua-and-polling lock
# pattern, in one run. Included by the Makefile (`-include mk/*.mk`).
#   make bench        full run (several minutes): table on stdout, target/bench/report.{json,md},
#                     target/bench/bench.svg, and the figures in README.md + docs/bench.svg
#   make bench-smoke  the same scenarios, a few seconds each (CI); reports in target/bench/smoke
# BENCH_ARGS adds options, e.g. `make bench BENCH_ARGS="--reps 5"` (see `--help`);
# `make bench BENCH_DOCS=` leaves docs/ untouched.

BENCH_ARGS ?=
BENCH_DOCS ?= --docs

.PHONY: bench bench-smoke

bench: build
	cargo bench --bench fencelock -- $(BENCH_DOCS) $(BENCH_ARGS)

bench-smoke: build
	cargo bench --bench fencelock -- --smoke $(BENCH_ARGS)
