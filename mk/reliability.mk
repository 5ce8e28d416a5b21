# Reliability suite (tests/faults/, and tests/spec/acl.rs), included by the Makefile.
#   make soak       every fault scenario at full length (~13 minutes); the measured
#                   figures are collected in target/reliability-report.md
#   make fuzz       property tests of the argument parser (core/tests/parser.rs) with
#                   many cases
#   make leakcheck  redis-server under valgrind through blocking and persistence paths
# The short versions of all of these run inside `make test`.

RELIABILITY_REPORT := target/reliability-report.md
FUZZ_CASES ?= 200000
VALGRIND_DIR := target/valgrind

.PHONY: soak fuzz leakcheck

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
