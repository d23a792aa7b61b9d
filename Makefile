# Maintainer entry points. PYTHON defaults to the repository's .venv (what .ci/run creates); override
# with `make test PYTHON=python3`. Every target runs from the repository root.
PYTHON ?= .venv/bin/python
RUFF ?= $(PYTHON) -m ruff

.PHONY: lint format test test-fast mutation mutmut gpu

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

# The unit tests of both wings without those marked slow (Triton-interpreter sweeps, the AOT compile, fresh
# interpreters, downloads), in FAST_WORKERS pytest-xdist workers: about a minute on two cores.
FAST_WORKERS ?= 2
test-fast:
	$(PYTHON) -m pytest -q tests/unit -m "not slow" -n $(FAST_WORKERS)

# Disables each fix in turn in a copy of the tree and runs the tests that claim it (tests/support/mutation_pass.py).
mutation:
	$(PYTHON) -m tests.support.mutation_pass

# The GPU tests (marked gpu), on a CUDA machine: tests/run_gpu_tests.sh.
gpu:
	bash tests/run_gpu_tests.sh

# Machine mutation testing with mutmut (docs/mutation-testing.md); not in CI (minutes per module).
# `make mutmut SET=evidence`, or `make mutmut MODULES="sglang_dsv4_ext/config.py" TESTS="tests/unit/cli"`.
# One worker at the lowest priority; build/mutmut/SET/ keeps the mutants, the results and the log (run.log).
SET ?=
MODULES ?=
TESTS ?=
MUTMUT_WORKERS ?= 1
MUTMUT_DIR = build/mutmut/$(or $(SET),custom)
mutmut:
	mkdir -p $(MUTMUT_DIR)
	nice -n 19 $(PYTHON) -m tests.support.mutmut_run $(if $(SET),--set $(SET)) $(if $(MODULES),--modules $(MODULES)) \
		$(if $(TESTS),--tests $(TESTS)) --workers $(MUTMUT_WORKERS) > $(MUTMUT_DIR)/run.log 2>&1 \
		|| (tail -30 $(MUTMUT_DIR)/run.log; exit 1)
	$(PYTHON) -m tests.support.mutmut_run --summary $(if $(SET),--set $(SET)) $(if $(MODULES),--modules $(MODULES))
