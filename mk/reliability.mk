# Reliability suite (tests/reliability_*.rs, tests/acl.rs), included by the Makefile.
#   make soak       every fault scenario at full length (~10 minutes); the measured
#                   figures are collected in target/reliability-report.md
#   make fuzz       property tests of the argument parser with many cases
#   make leakcheck  redis-server under valgrind through blocking and persistence paths
# The short versions of all of these run inside `make test`.

RELIABILITY_TESTS := reliability_checker reliability_crash reliability_pause reliability_disrupt \
	reliability_failover reliability_input reliability_memory reliability_parser acl
RELIABILITY_REPORT := target/reliability-report.md
FUZZ_CASES ?= 200000
VALGRIND_DIR := target/valgrind

.PHONY: soak fuzz leakcheck

# One scenario at a time: they measure timing, and the machine may have two cores.
soak: build
	@rm -f $(RELIABILITY_REPORT)
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; \
	for test in $(RELIABILITY_TESTS); do \
		FENCELOCK_SOAK=1 FENCELOCK_REPORT=$(CURDIR)/$(RELIABILITY_REPORT) \
			cargo test --release --test $$test -- --test-threads=1 || exit 1; \
	done
	@cat $(RELIABILITY_REPORT)

fuzz: deps
	PROPTEST_CASES=$(FUZZ_CASES) cargo test --release --test reliability_parser

# valgrind must see a clean exit to report leaks: the test shuts its server down.
leakcheck: build
	@command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
	mkdir -p $(VALGRIND_DIR) && rm -f $(VALGRIND_DIR)/*.log
	printf '#!/bin/sh\nexec valgrind --leak-check=full --log-file=$(CURDIR)/$(VALGRIND_DIR)/valgrind-%%p.log redis-server "$$@"\n' \
		> $(VALGRIND_DIR)/redis-server
	chmod +x $(VALGRIND_DIR)/redis-server
	FENCELOCK_REDIS_SERVER=$(CURDIR)/$(VALGRIND_DIR)/redis-server \
	FENCELOCK_VALGRIND_LOGS=$(CURDIR)/$(VALGRIND_DIR) \
		cargo test --release --test reliability_memory valgrind -- --ignored --nocapture
