# make install  - set up .venv (Python deps), the Pub/Sub + Firestore emulators and Chromium (dashboard test)
# make demo     - install, start the local stack, run the fleet demo, stop the stack (KEEP=1 leaves it up)
# make test     - install, run every test tier (unit, functional, e2e on the emulators, deploy checks)
# make check    - the edit loop: lint (when terraform/ changed), unit and functional tests, side by side (126-139 s of
#                 CPU on 2 cores: under 90 s idle expected; README)
# make bench    - install, run the benchmarks (prints figures)
# make reliability - install, run every reliability scenario on the emulators (10,000 events), write docs/reliability.md
# make lint     - terraform fmt -check and checkov on terraform/ (checkov in its own virtualenv)
# make down     - stop a local stack left running

# Bytecode is written (.pyc, in __pycache__ beside each module, ignored by git) even where the environment
# says not to: without it every process compiles what it imports from source again. A fresh clone's
# `dcm-status get` then took 3.4 s of CPU instead of 1.3, and a test run starts hundreds of such processes
# (the CLI, the functions, the test workers).
unexport PYTHONDONTWRITEBYTECODE

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CLI    := $(VENV)/bin/dcm-status
STAMP  := $(VENV)/.installed
UV     := $(VENV)/bin/uv

.PHONY: install emulators demo test test-fast test-e2e test-reliability check unit bench reliability lint package down clean

install: $(STAMP) emulators
	@bash infra/install-browser.sh

# uv (from PyPI, into the venv) installs what pip would, from the same index, in a fifth of the time (about
# 16 s instead of 90 on 2 cores): the install is on the critical path of every fresh-clone `make test`.
$(STAMP): pyproject.toml shared/contracts/pyproject.toml sdk/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q 'uv>=0.9,<1'
	$(UV) pip install -q --python $(PY) -e ./shared/contracts -e ./sdk -e '.[test,aws,local]'  # the wire contracts first: the kit and the platform depend on them
	$(UV) pip install -q --python $(PY) -e '.[schema]'  # the Google provider's schema (docs/deploy.md): 176 MB of Python never imported (uv byte-compiles nothing)
	touch $(STAMP)

emulators:
	@bash infra/install-emulators.sh

demo: install
	$(CLI) up
	$(CLI) demo || { [ -n "$(KEEP)" ] || $(CLI) down; exit 1; }
	@if [ -n "$(KEEP)" ]; then echo "stack left running: $(CLI) --help, then 'make down'"; else $(CLI) down; fi

# The tiers side by side (each waits on emulators far more than it computes): unit, functional and deploy on
# two workers; e2e on two local stacks at once (pytest-xdist, one stack per worker, whole files per worker);
# the quick reliability run on a stack of its own.
# CPU_ACCOUNT=1: the tiers run under tests/cpu_account.py, which prints their CPU seconds by process class and tier
# at the end (CPU_JSON=PATH: also as JSON).
test: install
	@$(if $(CPU_ACCOUNT),$(PY) -m tests.cpu_account $(if $(CPU_JSON),--json $(CPU_JSON)) --) $(MAKE) --no-print-directory -j3 --output-sync=target test-fast test-e2e test-reliability

# Each pytest run ends with the ten slowest tests and files of each of its tiers, wall and CPU seconds
# (tests/durations.py). The fast tier on two workers (each its own Firestore emulator; whole files per worker,
# so a module's one-off load, the provider schema or a clean virtualenv, is paid once). Both ways side by side
# on a busy 2-core machine, twice: 217 s instead of 325 (load ~17) and 28 min instead of 43 (load 15-50), for
# 17-18% more CPU (198 s against 169; 244 against 207: a second interpreter collecting, a second emulator). Serial, a fast tier that finishes last in `make test`
# (the CI runs: ~500 s of 474-582) leaves one core idle; on two workers it ends sooner (issue 41).
test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --tier-durations=10 tests/unit tests/functional tests/deploy

test-e2e: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --tier-durations=10 tests/e2e

# The quick reliability run of every `make test`: the scenarios the e2e tier has no twin of. The kill and
# outage rows (all in `make reliability`) have theirs there, run by every `make test`: function killed ->
# tests/e2e/test_reliability.py::test_each_function_server_killed_mid_burst_comes_back_and_nothing_is_lost,
# server/worker killed under load -> tests/e2e/test_kill_under_load.py, outage 10 s ->
# tests/e2e/test_pipeline.py::test_firestore_outage_during_processing_applies_every_event_once, outage >
# retries -> tests/e2e/test_reliability.py::test_an_outage_longer_than_the_retry_schedule_strands_nothing_and_the_cli_says_so,
# nats ingress killed -> tests/e2e/test_nats.py::test_the_ingress_killed_mid_burst_loses_nothing_and_applies_nothing_twice.
# poisoned NATS provider (80 s with its stack) -> tests/functional/test_nats_isolation.py (a real nats-server).
# The fuzz row is tests/functional/test_fuzz.py with --events inputs per test: the quick run's 300 are the fast
# tier's own (DCM_FUZZ_EXAMPLES, derandomized: the same inputs), so `make test` runs it there once.
QUICK_ROWS = --only burst --only 'hot resource' --only flooding --only spoofed --only cross-provider

test-reliability: $(STAMP)
	$(PY) -m infra.reliability --quick $(QUICK_ROWS)

# The edit loop's profile (tests/profile.py): each property-based test on a fifth of its generated inputs, at
# least ten (the same properties; `make test` and CI try them all). PROFILE=full: all of them here too. Two
# workers (the tier waits on its emulator as much as it computes), whole files per worker: a module's fixtures
# are paid once, and test_fuzz's tally runs beside its tests.
PROFILE ?= check

unit: $(STAMP)
	DCM_TEST_PROFILE=$(PROFILE) $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --tier-durations=10 $(if $(DURATIONS_JSON),--tier-durations-json=$(DURATIONS_JSON)) tests/unit tests/functional

check: $(STAMP)
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint unit

reliability: install
	$(PY) -m infra.reliability --events $(or $(EVENTS),10000) --write docs/reliability.md

bench: install
	$(PY) benchmarks/validation.py
	$(PY) benchmarks/pipeline.py
	$(PY) benchmarks/cost.py
	$(PY) benchmarks/capacity.py
	$(PY) benchmarks/api.py
	$(PY) benchmarks/search_counts.py
	$(PY) benchmarks/callbacks.py
	$(PY) benchmarks/provider_kit.py
	$(PY) benchmarks/fairness.py
	$(PY) benchmarks/nats_ingress.py

# Linted again only when what it reads has changed since it last passed (the edit loop: checkov takes about
# 26 s of CPU); a fresh clone always lints.
LINTED := .venv-checkov/.linted

lint: $(LINTED)

$(LINTED): $(shell find terraform -type f) infra/topology.yaml
	terraform fmt -check -recursive terraform
	@[ -x .venv-checkov/bin/checkov ] || { $(PYTHON) -m venv .venv-checkov && .venv-checkov/bin/pip install -q 'uv>=0.9,<1' && .venv-checkov/bin/uv pip install -q --python .venv-checkov/bin/python checkov; }
	.venv-checkov/bin/checkov -d terraform --framework terraform --skip-download --quiet --compact
	touch $@

package: $(STAMP)
	$(PY) -m infra.package --out build/

down:
	@[ ! -x $(CLI) ] || $(CLI) down

clean: down
	rm -rf $(VENV) .venv-checkov .dcm build
