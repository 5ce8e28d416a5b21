#!/bin/sh
# Installs the Debian packages fencelock needs to build and test, when missing:
# redis-server (and redis-tools for redis-cli / redis-benchmark), libclang-dev
# (redis-module generates its bindings with bindgen at build time), openssl (the
# Python client's TLS tests make their own test CA with it), and dpkg-dev (cargo-deb
# derives the .deb's library dependencies with its dpkg-shlibdeps, and strips with the
# binutils it brings).
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
dpkg -s libclang-dev >/dev/null 2>&1 || missing="$missing libclang-dev"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
command -v dpkg-shlibdeps >/dev/null 2>&1 || missing="$missing dpkg-dev"

# Word-split on purpose: one argument per package.
# shellcheck disable=SC2086
exec "$(dirname "$0")/apt-install.sh" $missing
