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
	cargo test --release --tests

test: build
	cargo test --release --lib --tests

lint: deps
	cargo fmt --check
	cargo clippy --release --all-targets -- -D warnings

clean:
	cargo clean
