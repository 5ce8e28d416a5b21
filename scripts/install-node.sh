#!/bin/sh
# Installs Node.js (>= 18) and npm when missing, for the Node package (clients/node) and
# its examples: `make node-deps`, `make node-test`, `make node-pack` call it first.
# Debian's own packages only (bookworm has nodejs 18.20 and npm 9.2); a Node.js that is
# already there (distribution, NodeSource, nvm) is used as it is when it is new enough.
set -eu

# The oldest Node.js the package supports (its package.json's engines); `node --test`
# and the global fetch the examples' tests use are there from 18 on.
min_major=18

node_major() {
    node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0
}

missing=""
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
# Word-split on purpose: one argument per package.
# shellcheck disable=SC2086
"$(dirname "$0")/apt-install.sh" $missing

major=$(node_major)
if [ "$major" -lt "$min_major" ]; then
    echo "fencelock: Node.js >= $min_major needed, found $(node --version 2>/dev/null || echo none)" >&2
    exit 1
fi
