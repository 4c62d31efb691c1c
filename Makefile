# One command sets everything up: `make test` builds .venv, installs jobd with its dev
# dependencies, then runs lint, type checks and the whole suite.
PYTHON ?= python3
# pytest-xdist workers for `make test`. More than the cores: most end-to-end tests wait on
# the jobd they started, so a third worker runs while two wait.
TEST_WORKERS ?= 3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test suite check lint typecheck unit soak run bench clean torch

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The tests of the torch examples (train_torch.py, ddp_torch.py) need torch, which jobd
# never depends on: the CPU build of 2.13.0, which the CI host keeps as a wheel where pip's
# find-links look (any other version downloads gigabytes). .ci/run makes this; elsewhere
# those tests skip, saying so, and fail when CI=true (tests/conftest.py `require_torch`).
TORCH_STAMP := $(VENV)/.torch
torch: $(TORCH_STAMP)

$(TORCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet 'torch==2.13.0' 'numpy>=1.26'
	touch $(TORCH_STAMP)

# Lint and type checks run beside the suite (make -j): `make test` fails if any of the
# three does, after all three have run.
test: $(STAMP)
	@$(MAKE) --no-print-directory --keep-going -j 3 lint typecheck suite

# A module's tests run on one worker (`--dist loadscope`), so a module sharing one
# `jobd dev` starts it once. The slow directories come first (e2e, fuzz), so the small
# modules fill the workers' ends. (`loadgroup` would group finer, but pytest-xdist 3.8
# tags a group by rewriting Item._nodeid, which pytest 9 no longer reads.)
# Then the few tests held to a wall-clock bound run alone (`serial`, tests/conftest.py).
suite: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not soak and not serial" -n $(TEST_WORKERS) --dist loadscope
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "serial and not soak"

# Long fault-injection runs (minutes: kill -9 of the broker during submits, of the agent
# with jobs running), kept out of `make test`.
soak: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m soak

check: test

lint: $(STAMP)
	$(BIN)/ruff check jobd tests examples
	$(BIN)/ruff format --check jobd tests examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

# The venv's bin goes first on PATH so workloads' `python3` can import jobd.client.
run: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/jobd dev

bench: $(STAMP)
	$(BIN)/jobd bench

clean:
	rm -rf $(VENV) build *.egg-info
