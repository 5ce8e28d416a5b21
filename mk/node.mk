# The Node.js package (clients/node, TypeScript) and its examples (clients/node/examples),
# included by the Makefile (`include mk/*.mk`). Node.js >= 18 and npm are installed
# from Debian when missing (scripts/install-node.sh); the npm packages come from the
# lockfiles (`npm ci`), into clients/node/node_modules and clients/node/examples/node_modules.
#   make node-deps   Node.js and npm when missing, the package's and the examples'
#                    dependencies (npm ci, again only when a lockfile changed), and the
#                    package built (clients/node/dist/, which the examples import)
#   make node-lint   the package's type check (tsc --noEmit, strict) and the examples'
#                    (their JSDoc types checked against the package's declarations)
#   make node-test   the package's tests and the examples' tests (clients/node/test/,
#                    Node's own runner), against FENCELOCK_REDIS_SERVER (default
#                    Debian's redis-server) with the module `make build` made;
#                    NODE_TESTS picks test files by a part of their path
#   make node-pack   the npm tarball (npm pack) into target/node/; `make dist` ships it

NODE_DIR := clients/node
NODE_EXAMPLES := $(NODE_DIR)/examples
NODE_PACK_DIR := target/node
# Part of a test file's path (several, space-separated): only those files run.
NODE_TESTS ?=

# npm ci writes node_modules/.package-lock.json: newer than the lockfile and the
# manifest, the install is up to date.
NODE_INSTALLED := $(NODE_DIR)/node_modules/.package-lock.json
NODE_EXAMPLES_INSTALLED := $(NODE_EXAMPLES)/node_modules/.package-lock.json
# The package's build (what `import 'fencelock'` loads), remade when a source changes.
NODE_BUILT := $(NODE_DIR)/dist/esm/index.js
NODE_SOURCES = $(shell find $(NODE_DIR)/src -name '*.ts' 2>/dev/null) $(wildcard $(NODE_DIR)/tsconfig*.json)
NPM := npm --no-audit --no-fund --loglevel=error

.PHONY: node-deps node-lint node-test node-pack

##@ The Node.js package (clients/node)

node-deps: $(NODE_BUILT) $(NODE_EXAMPLES_INSTALLED) ## Node.js >= 18 when missing, npm ci of the package and the examples, the package built

node-lint: node-deps ## tsc --noEmit of the package (strict) and of the examples (JSDoc types)
	cd $(NODE_DIR) && $(NPM) run lint
	cd $(NODE_EXAMPLES) && ../node_modules/.bin/tsc -p tsconfig.json

# The examples' tests start the examples with `node`, which imports the built package.
node-test: build node-deps ## the package's and the examples' tests (node --test) on FENCELOCK_REDIS_SERVER
	scripts/test-node.sh $(NODE_TESTS)

# prepack builds the package (dist/) again from its sources before packing. The
# tarball is then installed on its own into a throwaway folder, what `npm install`
# gives a user without this repository, and loaded both ways (import and require).
node-pack: node-deps ## the npm tarball (npm pack) into target/node/, checked to install and load on its own
	rm -rf $(NODE_PACK_DIR) && mkdir -p $(NODE_PACK_DIR)/check
	cd $(NODE_DIR) && $(NPM) pack --pack-destination $(abspath $(NODE_PACK_DIR))
	cd $(NODE_PACK_DIR)/check && echo '{"private": true}' >package.json && \
	  $(NPM) install ../fencelock-*.tgz && \
	  node --input-type=module -e "import { Locks } from 'fencelock'; if (typeof Locks !== 'function') process.exit(1)" && \
	  node -e "const { Locks } = require('fencelock'); if (typeof Locks !== 'function') process.exit(1)" && \
	  node -p "'fencelock ' + require('fencelock/package.json').version + ' installs, imports and requires'"
	rm -rf $(NODE_PACK_DIR)/check

$(NODE_INSTALLED): $(NODE_DIR)/package-lock.json $(NODE_DIR)/package.json
	@scripts/install-node.sh
	cd $(NODE_DIR) && $(NPM) ci
	touch $@

$(NODE_BUILT): $(NODE_INSTALLED) $(NODE_SOURCES)
	cd $(NODE_DIR) && $(NPM) run build

# The examples depend on the package through `file:..` (a link to clients/node).
$(NODE_EXAMPLES_INSTALLED): $(NODE_EXAMPLES)/package-lock.json $(NODE_EXAMPLES)/package.json $(NODE_INSTALLED)
	cd $(NODE_EXAMPLES) && $(NPM) ci
	touch $@
