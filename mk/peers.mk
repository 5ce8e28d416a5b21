# The etcd side by side (mk/bench.mk's benchmark, scenario 6): fencelock against etcd's
# lock API, Debian's etcd-server as a single member on loopback that the benchmark
# starts and stops itself, in the same run and pinning. It needs the bench binary built
# with its `peers` feature (the etcd-client crate: tonic/gRPC, whose build runs protoc)
# and etcd itself: scripts/install-peers-deps.sh installs etcd-server, protoc and the
# protobuf includes when missing, for these targets only — the other bench targets
# (CI's bench-smoke) build without the feature and need none of it.
#   make bench-peers   the comparison alone (about 4 minutes): table on stdout,
#                      target/bench/peers/report.{json,md}; BENCH_ARGS=--smoke runs each
#                      row for a few seconds (reports in target/bench/peers/smoke)
#   make bench-docs    (mk/bench.mk) builds the feature in too, so that the page it
#                      writes has the etcd section
# SERVER and BENCH_ARGS as for make bench.

.PHONY: bench-peers peers-deps

##@ Benchmark: fencelock and etcd side by side

peers-deps: ## install etcd-server, protoc and the protobuf includes when missing (root or sudo)
	@scripts/install-peers-deps.sh

bench-peers: build peers-deps $(bench_venv) ## fencelock against etcd's lock API (BENCH_ARGS=--smoke: seconds): target/bench/peers/
	server=$(SERVER); $(bench_on) --only peers \
	  --out $(BENCH_DIR)/peers$(if $(filter --smoke,$(BENCH_ARGS)),/smoke) $(BENCH_ARGS)

# The cargo options of bench_on (mk/bench.mk): the etcd client is built in only here.
bench-peers bench-docs: BENCH_FEATURES := --features peers
bench-docs: peers-deps
