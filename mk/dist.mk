# fencelock release artifacts, included by the Makefile (`include mk/*.mk`).
#   make dist      everything a release publishes, into target/dist/ (emptied first):
#                  fencelock-<version>-<target>.tar.gz (the module with
#                  redis.conf.example, LICENSE, README.md, CHANGELOG.md and their
#                  SHA256SUMS; scripts/dist-tarball.sh), the Debian package, the Python
#                  sdist and wheel (make python), the npm tarball of the Node package
#                  (make node-pack), and SHA256SUMS over all of them
#   make deb       the Debian package alone, into target/dist/: cargo-deb with
#                  Cargo.toml's [package.metadata.deb], packing the module `make build`
#                  made (--no-build) and packaging/fencelock.conf
#   make test-deb  as root, for CI or a throwaway machine: installs the .deb with dpkg,
#                  runs it under Debian's redis-server, purges it and checks that
#                  nothing is left (scripts/test-deb.sh)
# Every timestamp inside the artifacts is SOURCE_DATE_EPOCH, by default the last
# commit's time, so one commit packs to the same bytes.

DIST_DIR := target/dist
# Shipped in the tarball and the .deb but not built: each must exist.
DIST_FILES := redis.conf.example LICENSE README.md CHANGELOG.md
# cargo-deb: `cargo deb` where it is installed, else this version, built once into the
# build's own cargo root rather than the user's ~/.cargo.
CARGO_DEB_VERSION := 3.8.0
CARGO_TOOLS := target/cargo-tools

# Shell code for the packing commands only: in cargo build's environment
# SOURCE_DATE_EPOCH would make cargo rebuild redis-module.
source_date_epoch = SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct)}

# The example config the package ships (Cargo.toml's assets) loads the module from
# the path the package installs it at.
DEB_CONF := target/package/redis.conf.example

# Recipe lines: write the package's example config, then the .deb into $(DIST_DIR),
# saying what they run. make runs the second without `set -e`, hence the explicit exits.
define cargo_deb
scripts/release-conf.sh /usr/lib/redis/modules/fencelock.so $(DEB_CONF)
@if cargo deb --version >/dev/null 2>&1; then cargo_deb="cargo deb"; \
else \
  cargo_deb=$(CARGO_TOOLS)/bin/cargo-deb; \
  [ "$$($$cargo_deb --version 2>/dev/null)" = "cargo-deb $(CARGO_DEB_VERSION)" ] || { \
    echo "cargo install cargo-deb --locked --version $(CARGO_DEB_VERSION) --root $(CARGO_TOOLS)"; \
    cargo install cargo-deb --locked --version $(CARGO_DEB_VERSION) --root $(CARGO_TOOLS) || exit 1; \
  }; \
fi; \
export $(source_date_epoch); \
case "$$SOURCE_DATE_EPOCH" in '' | *[!0-9]*) \
  echo "dist: SOURCE_DATE_EPOCH must be a Unix time (no git history here? set it)" >&2; \
  exit 1 ;; esac; \
echo "SOURCE_DATE_EPOCH=$$SOURCE_DATE_EPOCH $$cargo_deb --no-build --output $(DIST_DIR)/"; \
$$cargo_deb --no-build --output $(DIST_DIR)/
endef

.PHONY: dist deb test-deb

##@ Release artifacts (target/dist/)

dist: $(DIST_FILES) build python node-pack ## tarball of the module, .deb, Python sdist and wheel, npm tarball, SHA256SUMS
	rm -rf $(DIST_DIR)
	$(source_date_epoch) scripts/dist-tarball.sh $(MODULE) $(DIST_DIR)
	$(cargo_deb)
	cp $(PYTHON_DIST)/*.whl $(PYTHON_DIST)/*.tar.gz $(DIST_DIR)/
	cp $(NODE_PACK_DIR)/fencelock-*.tgz $(DIST_DIR)/
	cd $(DIST_DIR) && LC_ALL=C sha256sum fencelock[-_]* >SHA256SUMS
	@echo "dist: $(DIST_DIR)/" && cat $(DIST_DIR)/SHA256SUMS

deb: $(DIST_FILES) build ## the Debian package alone (cargo-deb) into target/dist/
	rm -f $(DIST_DIR)/fencelock_*.deb
	$(cargo_deb)

# dpkg -i and --purge on this machine: root only, and not on a machine you keep.
test-deb: deb ## root only, CI or a throwaway machine: install the .deb, run it, purge it
	scripts/test-deb.sh $(DIST_DIR)/fencelock_*.deb

# Listed first among the prerequisites, a missing one stops dist or deb before any build.
$(DIST_FILES):
	@echo "dist: $@ is missing: every release ships it" >&2; exit 1
