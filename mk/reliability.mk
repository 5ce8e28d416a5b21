# Reliability suite (tests/faults/, and tests/spec/acl.rs), included by the Makefile.
#   make soak       every fault scenario at full length (~13 minutes); the measured
#                   figures are collected in target/reliability-report.md
#   make fuzz       property tests of the argument parser (core/tests/parser.rs) with
#                   many cases
#   make leakcheck  redis-server under valgrind through blocking and persistence paths
# The short versions of all of these run inside `make test`.
#   make partition  network partitions under Sentinel failover (tests/faults/partition.rs):
#                   PARTITION_RUNS runs (20) of each replication setting and the
#                   fence-check-disabled self-test, on Redis 7.0, or on each server of
#                   the compatibility matrix with PARTITION_SERVERS=all; the table in
#                   target/partition-report.md (docs/reliability.md quotes it). Not in
#                   `make test` (minutes); CI runs PARTITION_RUNS=3 on all three servers.

RELIABILITY_REPORT := target/reliability-report.md
FUZZ_CASES ?= 200000
VALGRIND_DIR := target/valgrind

PARTITION_REPORT := target/partition-report.md
PARTITION_RUNS ?= 20
PARTITION_SERVERS ?= redis-7.0

.PHONY: soak fuzz leakcheck partition

##@ Reliability

# One scenario at a time: they measure timing, and the machine may have two cores.
soak: build build-panic-injection ## every fault scenario at full length (~10 min): target/reliability-report.md
	@rm -f $(RELIABILITY_REPORT)
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; \
	FENCELOCK_SOAK=1 FENCELOCK_REPORT=$(CURDIR)/$(RELIABILITY_REPORT) \
		cargo test --release --test faults -- --test-threads=1 && \
	FENCELOCK_SOAK=1 cargo test --release --test spec acl:: -- --test-threads=1
	@cat $(RELIABILITY_REPORT)

fuzz: deps ## the argument parser's property tests with FUZZ_CASES cases
	PROPTEST_CASES=$(FUZZ_CASES) cargo test --release -p fencelock-core --test parser

# valgrind must see a clean exit to report leaks: the test shuts its server down.
leakcheck: build ## redis-server under valgrind through blocking and persistence paths
	@command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
	mkdir -p $(VALGRIND_DIR) && rm -f $(VALGRIND_DIR)/*.log
	printf '#!/bin/sh\nexec valgrind --leak-check=full --log-file=$(CURDIR)/$(VALGRIND_DIR)/valgrind-%%p.log redis-server "$$@"\n' \
		> $(VALGRIND_DIR)/redis-server
	chmod +x $(VALGRIND_DIR)/redis-server
	FENCELOCK_REDIS_SERVER=$(CURDIR)/$(VALGRIND_DIR)/redis-server \
	FENCELOCK_VALGRIND_LOGS=$(CURDIR)/$(VALGRIND_DIR) \
		cargo test --release --test faults valgrind -- --ignored --nocapture

# One server after another, one test at a time: the runs measure failovers in seconds.
partition: build $(if $(filter all,$(PARTITION_SERVERS)),venv) ## partitions under Sentinel failover, PARTITION_RUNS runs each: target/partition-report.md
	@rm -f $(PARTITION_REPORT)
	@if [ "$(PARTITION_SERVERS)" = all ]; then scripts/compat-servers.sh $(VENV); \
	 else echo "redis-7.0 $$(command -v redis-server)"; fi | while read -r name path; do \
	  printf '\n## %s, %s runs of each setting\n' "$$name" "$(PARTITION_RUNS)" >> $(PARTITION_REPORT); \
	  FENCELOCK_REDIS_SERVER=$$path FENCELOCK_PARTITION_RUNS=$(PARTITION_RUNS) \
	  FENCELOCK_PARTITION_REPORT=$(CURDIR)/$(PARTITION_REPORT) \
	    cargo test --release --test faults partition:: -- --ignored --test-threads=1 || exit 1; \
	done
	@cat $(PARTITION_REPORT)
