# The two entry points of the README: `make lab` (the main job on the lab) and `make test` (everything CI runs).
SHELL := /bin/bash
VENV := .venv/bin
export CONTAINERS_CONF := $(CURDIR)/containers/containers.conf
LAB_NODES ?= 2
# One node per OS instead, e.g. `make lab LAB_OS=debian12,debian13,rocky9,ubuntu24.04` (docs/getting-started.md).
LAB_OS ?=

.PHONY: setup lab lab-down lint docs test test-full unit molecule bench mutation

setup:
	@bash tools/setup.sh

# The vendors' repositories are out of reach here: the lab's nodes get signed stand-ins in their layouts.
LAB_MIRROR := build/lab-mirror

lab: setup
	$(VENV)/python tools/lab_mirror.py $(LAB_MIRROR)
	$(VENV)/nodeforge lab up $(if $(LAB_OS),--os $(LAB_OS),--nodes $(LAB_NODES)) --mirror $(LAB_MIRROR) --provision

lab-down:
	$(VENV)/nodeforge lab down

lint:
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/yamllint -s .
	$(VENV)/python tools/gen_docs.py --check
	for p in playbooks/*.yml; do ANSIBLE_COLLECTIONS_PATH=collections $(VENV)/ansible-playbook --syntax-check -i localhost, nodeforge.gpu.$$(basename $$p .yml) >/dev/null || exit 1; done
	PATH=$(CURDIR)/.venv/bin:$$PATH ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/collections $(VENV)/ansible-lint --profile production --offline

docs:
	$(VENV)/python tools/gen_docs.py

unit:
	$(VENV)/pytest -q -m "not slow and not molecule"

molecule:
	$(VENV)/pytest -q -m molecule

# Two workers: the molecule scenarios and the lab wait on apt, podman and systemd as much as on the CPU, so two at a
# time finish sooner on a 2-core machine. Tests go out one at a time, longest first (tests/conftest.py). lint runs
# beside the session's first minute (the package cache's start, the workers' collection, the first image builds:
# waits on the network and podman, mostly); its output follows the tests', and its failure fails the target too.
# The matrix (tools/matrix.sh): after the main session on the README's path, the legs on the newest (2.21) and the
# oldest (2.16) ansible-core; their virtualenvs build beside lint. Each leg prints its versions and its verdict; any
# failure fails the target.
# `make test` leaves out the runs marked `full` (the VM tier, the 4-node lab's rolling upgrade, Debian's DKMS build of
# the real driver, GPUDirect's DKMS builds, the CUDA repository's driver and preflight on Debian 12, the scenarios
# repeated on Debian 13 and Rocky 8, three legacy or brownfield variants of roles):
# with them the suite takes about an hour on a quiet 2-core machine and twice that in the machine's slow phases, past
# CI's 90 minutes. `make test-full` is the same target with them in (docs/testing.md, "What make test runs").
TEST_MARKERS ?= not matrix and not full

test-full:
	@$(MAKE) --no-print-directory test TEST_MARKERS="not matrix"

test: setup
	@mkdir -p build; ( $(MAKE) --no-print-directory lint; ) >build/lint.log 2>&1 & lint=$$!; \
	bash tools/matrix.sh setup >build/matrix-setup.log 2>&1 & legs=$$!; \
	echo "matrix: leg main: $$($(VENV)/python -c 'import importlib.metadata as m, platform; print("ansible-core", m.version("ansible-core"), "on Python", platform.python_version())')"; \
	$(VENV)/pytest -q -ra --durations=15 -n 2 --dist load --maxschedchunk 1 -m "$(TEST_MARKERS)"; tests=$$?; \
	echo "matrix: leg main: $$([ $$tests -eq 0 ] && echo passed || echo "FAILED (exit $$tests)")"; \
	wait $$lint; linted=$$?; cat build/lint.log; \
	if [ $$linted -ne 0 ]; then echo "make test: lint failed (exit $$linted, output above)"; fi; \
	wait $$legs; built=$$?; cat build/matrix-setup.log; newest=$$built; floor=$$built; \
	if [ $$built -eq 0 ]; then bash tools/matrix.sh newest; newest=$$?; bash tools/matrix.sh floor; floor=$$?; \
	else echo "matrix: the legs' virtualenvs could not be built (exit $$built, output above): legs newest and floor FAILED"; fi; \
	echo "matrix: main $$tests, newest $$newest, floor $$floor, lint $$linted (exit codes)"; \
	for s in $$tests $$newest $$floor $$linted; do [ $$s -eq 0 ] || exit $$s; done

bench: setup
	$(VENV)/python bench/run.py

# Mutation testing (tools/mutation.py, mutmut): every mutant of the decision code against the fast suite, the score
# per module and the survivors. About an hour on 2 cores: not part of `make test`.
mutation: setup
	$(VENV)/python tools/mutation.py
