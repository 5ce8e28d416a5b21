# fencelock benchmark (benches/fencelock): fencelock against the Lua-and-polling lock
# pattern, in one run. Included by the Makefile (`-include mk/*.mk`). The server
# launcher and the RESP codec come from the dev-only `testkit` crate.
#   make bench        full run (several minutes): table on stdout, target/bench/report.{json,md}
#                     and target/bench/bench.svg; README.md and docs/ are left alone
#   make bench-docs   the same full run, then also rewrites the figures block of README.md
#                     and docs/bench.svg (`--docs`): for publishing figures, not for local runs
#   make bench-smoke  the same scenarios, a few seconds each (CI); reports in target/bench/smoke
# BENCH_ARGS adds options to any of them, e.g. `make bench BENCH_ARGS="--reps 5"` (see `--help`).

BENCH_ARGS ?=

.PHONY: bench bench-docs bench-smoke

bench: build
	cargo bench --bench fencelock -- $(BENCH_ARGS)

bench-docs: build
	cargo bench --bench fencelock -- --docs $(BENCH_ARGS)

bench-smoke: build
	cargo bench --bench fencelock -- --smoke $(BENCH_ARGS)
