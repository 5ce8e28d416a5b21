# fencelock — build, run and test the Redis lock module.
#   make run    build the module and start redis-server with redis.conf.example
#   make test   unit tests (core and module) and integration tests against a real
#               redis-server
#   make lint   rustfmt check and clippy with warnings as errors

MODULE := target/release/libfencelock.so
# A build with forced panics at the boundary (test only; tests/faults/panics.rs).
PANIC_MODULE_DIR := target/panic-injection

.PHONY: all deps build build-panic-injection run test unit integration lint clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cargo build --release

# Built in the same target directory (only the module itself recompiles), copied
# aside, then the normal module is linked back in place.
build-panic-injection: deps
	cargo build --release --features panic-injection
	mkdir -p $(PANIC_MODULE_DIR)
	cp $(MODULE) $(PANIC_MODULE_DIR)/libfencelock.so
	cargo build --release

run: build
	redis-server redis.conf.example

unit: deps
	cargo test --release --workspace --lib
	cargo test --release -p fencelock-core --tests

integration: build build-panic-injection
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; cargo test --release --tests

# The 10,000-waiter test needs ~10,000 sockets on each side.
test: build build-panic-injection
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; cargo test --release --workspace --lib --tests

lint: deps
	cargo fmt --check
	cargo clippy --release --all-targets -- -D warnings

clean:
	cargo clean

# Benchmark, compatibility and reliability targets live in their own fragments.
-include mk/*.mk
