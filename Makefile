# fencelock — build, run and test the Redis lock module.
#   make run    build the module and start redis-server with redis.conf.example
#   make test   unit tests and integration tests against a real redis-server
#   make lint   rustfmt check and clippy with warnings as errors

MODULE := target/release/libfencelock.so

.PHONY: all deps build run test unit integration lint clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cargo build --release

run: build
	redis-server redis.conf.example

unit: deps
	cargo test --release --lib

integration: build
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; cargo test --release --tests

# The 10,000-waiter test needs ~10,000 sockets on each side.
test: build
	ulimit -n 65536 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; cargo test --release --lib --tests

lint: deps
	cargo fmt --check
	cargo clippy --release --all-targets -- -D warnings

clean:
	cargo clean

# Benchmark, compatibility and reliability targets live in their own fragments.
-include mk/*.mk
