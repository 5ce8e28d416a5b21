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

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "fencelock: please install:$missing" >&2
    exit 1
fi
echo "fencelock: installing$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
