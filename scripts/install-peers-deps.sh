#!/bin/sh
# Installs the Debian packages `make bench-peers` (and `make bench-docs`) need on top of
# scripts/install-deps.sh's, when missing: etcd-server (the etcd the benchmark starts
# and stops itself; the package starts no service without systemd), protobuf-compiler
# and libprotobuf-dev (the etcd-client crate generates its gRPC code with protoc at
# build time; its .proto files import the well-known types, google/protobuf/*.proto,
# which libprotobuf-dev ships).
set -eu

missing=""
command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
command -v protoc >/dev/null 2>&1 || missing="$missing protobuf-compiler"
[ -f /usr/include/google/protobuf/descriptor.proto ] || missing="$missing libprotobuf-dev"

# Word-split on purpose: one argument per package.
# shellcheck disable=SC2086
exec "$(dirname "$0")/apt-install.sh" $missing
