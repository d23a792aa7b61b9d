# Maintainer entry points. PYTHON defaults to the repository's .venv (what .ci/run creates); override
# with `make test PYTHON=python3`. Every target runs from the repository root.
PYTHON ?= .venv/bin/python
RUFF ?= $(PYTHON) -m ruff

.PHONY: lint format test mutation gpu

# ruff (rules and formatting) and mypy (the modules listed in pyproject.toml's [tool.mypy]).
lint:
	$(RUFF) check .
	$(RUFF) format --check .
	$(PYTHON) -m mypy

# The one formatter and ruff's automatic fixes (bugbear, pyupgrade, import order), in place.
format:
	$(RUFF) check --fix .
	$(RUFF) format .

test:
	$(PYTHON) -m pytest

# Disables each fix in turn in a copy of the tree and runs the tests that claim it (tests/support/mutation_pass.py).
mutation:
	$(PYTHON) -m tests.support.mutation_pass

# The GPU tests (marked gpu), on a CUDA machine: tests/run_gpu_tests.sh.
gpu:
	bash tests/run_gpu_tests.sh
