#!/bin/sh
# Installs the Debian packages named as arguments (the ones a caller found missing):
#   scripts/apt-install.sh PACKAGE...
# as root directly, through sudo otherwise, or asks the user to when neither can.
# Shared by scripts/install-deps.sh and scripts/install-peers-deps.sh, which decide
# what is missing.
set -eu

[ "$#" -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "fencelock: please install: $*" >&2
    exit 1
fi
echo "fencelock: installing $*" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
