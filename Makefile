# fencelock — build, run and test the Redis lock module.
#   make run    build the module and start redis-server with redis.conf.example
#   make test   unit tests (core and module) and integration tests against a real
#               redis-server, and the Node package's tests (clients/node)
#   make lint   rustfmt check and clippy with warnings as errors
#   make help   every target, one line each (from the `## ` text on its rule)

MODULE := target/release/libfencelock.so
# What `build` builds: the module, and the benchmark's floor module (bench/floor, a
# test-only cdylib: target/release/libfencelock_floor.so), which the benchmark loads
# beside it and whose own tests (part of `make test`) load the built .so.
BUILD_PACKAGES := -p fencelock -p fencelock-floor
# A build with forced panics at the boundary (test only; tests/faults/panics.rs).
PANIC_MODULE_DIR := target/panic-injection

.PHONY: all deps build build-panic-injection run test unit integration lint clean help

##@ Build and test

all: build ## the default goal: build

deps: ## install the Debian packages the build and tests need, when missing (root or sudo)
	@scripts/install-deps.sh

build: deps ## release build of the module (target/release/libfencelock.so) and the floor module
	cargo build --release $(BUILD_PACKAGES)

# Built in the same target directory (only the module itself recompiles), copied
# aside, then the normal module is linked back in place.
build-panic-injection: deps ## the module with forced panics (tests only) in target/panic-injection/
	cargo build --release --features panic-injection
	mkdir -p $(PANIC_MODULE_DIR)
	cp $(MODULE) $(PANIC_MODULE_DIR)/libfencelock.so
	cargo build --release $(BUILD_PACKAGES)

run: build ## start redis-server with redis.conf.example
	redis-server redis.conf.example

unit: deps ## unit tests of the core and the module
	cargo test --release --workspace --lib
	cargo test --release -p fencelock-core --tests

integration: build build-panic-injection ## integration tests against a real redis-server
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; cargo test --release --tests --no-fail-fast

# The 10,000-waiter test needs ~10,000 sockets on each side. --no-fail-fast: every test
# binary runs even after one fails, so one run shows every failure (and still fails);
# the Node package's and examples' tests (mk/node.mk) run after them either way.
test: build build-panic-injection node-deps ## unit and integration tests, the Node package's and its examples' tests
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; \
	cargo test --release --workspace --lib --tests --no-fail-fast; rust=$$?; \
	scripts/test-node.sh; node=$$?; [ $$rust -eq 0 ] && [ $$node -eq 0 ]

lint: deps ## cargo fmt --check and clippy with warnings as errors
	cargo fmt --check
	cargo clippy --release --all-targets --workspace -- -D warnings

clean: ## remove target/: builds, virtualenvs, reports, release artifacts
	cargo clean

# Groups start at `##@ ` lines; a .PHONY target without `## ` text fails the list.
help: ## this list
	@awk -f scripts/make-help.awk $(MAKEFILE_LIST)

# Benchmark, compatibility, release and reliability targets live in their own fragments.
include mk/*.mk
