# kubevirt_ops.maintenance - developer entry points.
# Every target bootstraps what it needs (virtualenv, lab binaries) on a fresh machine.

PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
COLLECTIONS := $(CURDIR)/.build/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/kubevirt_ops/maintenance
SANITY_ROOT := $(CURDIR)/.build/sanity/ansible_collections/kubevirt_ops/maintenance
PYTEST_ENV := PYTHONPATH=$(COLLECTIONS):$(CURDIR) ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) PATH=$(BIN):$$PATH
LAB := $(BIN)/python -m lab
PYTEST_WORKERS ?= 1
# Every pytest tier writes its tests' outcomes and times to tests/output/junit/<tier>.xml.
PYTEST_REPORT = --junitxml=$(CURDIR)/tests/output/junit/$@.xml

.PHONY: help venv collection test checks lab-build-default lab-lane-checks lab-binaries lab-binaries-other lab-tiers lab-lane-modules lab-lane-cluster lab-lane-faults lane-checks-shared lane-modules-shared lane-cluster-shared lane-faults-shared sanity sanity-run lint docs-lint test-chaos-cases ee-context test-versions test-versions-edges integration-core-edges changelog-lint unit unit-floor integration integration-cluster integration-lab integration-contract integration-modules integration-kubevirt-other test-roles test-roles-batches test-roles-runs test-machines test-awx test-security bench-smoke test-faults test-chaos chaos chaos-regressions reliability-report molecule demo lab-up lab-down lab-status bench clean

help:
	@echo "make demo      rolling maintenance of every lab worker, with VMs migrating; prints the report"
	@echo "make test      sanity, lint, unit tests, the lab tier (lab, KubeVirt contract, modules, security, faults, roles), Molecule and the bench smoke - what CI runs"
	@echo "make unit-floor  unit tests on the oldest declared runtime (ansible-core 2.17, kubernetes 24.2.0, urllib3 1.26)"
	@echo "make test-versions  unit tests on every ansible-core from 2.17 to the newest, sanity on the oldest and newest"
	@echo "make unit-core-2.18  the unit tests on one ansible-core (sanity-core-2.21: its sanity)"
	@echo "make docs-lint  antsibull-docs lint of the plugin and role docs; make ee-context: the execution-environment build context"
	@echo "make test-faults     fault-injection tests on the lab (kills, API server restart, node failure)"
	@echo "make chaos     randomized, seeded fault runs of rolling maintenance (SEED=<n> replays one; tests/output/chaos/)"
	@echo "make chaos-regressions  replays every seed a chaos run has failed on"
	@echo "make reliability-report  bad-input, least-privilege, secrets and fault tests; the table of figures"
	@echo "make lab-up    start the local lab cluster (.lab/kubeconfig); make lab-down stops it"
	@echo "make bench     benchmarks against kubectl drain and kubernetes.core.k8s_drain (bench/results/)"

venv: $(VENV)/.installed

# Every virtualenv is built once per requirements file and interpreter into ~/.cache/kubevirt-ops-lab/venvs/
# and linked here (tools/cached_venv.py), so a fresh clone on a machine that built them starts at once.
CACHED_VENV := $(PYTHON) tools/cached_venv.py

$(VENV)/.installed: requirements-dev.txt
	$(CACHED_VENV) --python $(PYTHON) --requirements requirements-dev.txt $(VENV)
	touch $@

# The collection as Ansible finds it: ansible_collections/kubevirt_ops/maintenance -> this repository.
collection:
	@mkdir -p $(dir $(COLLECTION_LINK))
	@ln -sfn $(CURDIR) $(COLLECTION_LINK)

# The static checks run beside the lab tiers: the lab's binaries build first (a cold cache takes
# minutes; a warm one returns at once), then three lanes of lab tiers run side by side, each lane
# on a lab of its own (ports and a directory of its own) that its tiers share, and a fourth lab (the
# chaos session, then the failure-domain batches) follows the static checks in their lane. Four lanes keep the 2-core reference machine busy: more run slower, as every
# lab has a control plane to keep going and each lane's tiers take longer (measured). The lanes are
# balanced from the tests' measured times (tests/output/junit/<tier>.xml); the other KubeVirt release
# builds in its lane.
# Each tier of a lane says how long it took, and tests/output/tier-times.txt gathers them.
TIER_TIMES := $(CURDIR)/tests/output/tier-times.txt
timed = @s=$$(date +%s); $(MAKE) $(1); rc=$$?; mkdir -p $(dir $(TIER_TIMES)); \
  echo "$(1): $$(( $$(date +%s) - s )) s, exit $$rc, ended $$(date -u +%H:%M:%S)" | tee -a $(TIER_TIMES); exit $$rc

LAB_LANES := lab-lane-modules lab-lane-cluster lab-lane-faults

test: venv collection
	@rm -rf $(TIER_TIMES) tests/output/junit
	$(MAKE) -j2 lab-lane-checks lab-tiers

lab-build-default: venv collection
	$(LAB) build --kubevirt-version $(KUBEVIRT_DEFAULT_VERSION)

lab-tiers: lab-build-default
	$(MAKE) -j$(words $(LAB_LANES)) $(LAB_LANES)

# Once the static checks are done their lane has room for a lab of its own: the short chaos session and
# the chaos cases, then the rolling runs in failure-domain batches.
lab-lane-checks: checks lab-build-default
	$(LAB_LANE)/checks $(MAKE) lane-checks-shared

lane-checks-shared:
	$(call timed,test-chaos)
	$(call timed,test-chaos-cases)
	$(call timed,test-roles-batches)

# The tiers of a lane share one lab (lab/lane.py: up in .build/labs/<lane>, down at the end whatever
# happens): a tier's tests reuse the running lab $KUBEVIRT_OPS_LAB_DIR names, as they reuse it between their
# own files. The tiers on a lab of their own (another KubeVirt release, the bench smoke) run after it is down.
LAB_LANE := $(BIN)/python -m lab.lane $(CURDIR)/.build/labs

lab-lane-modules: venv collection
	$(LAB_LANE)/modules $(MAKE) lane-modules-shared
	$(call timed,bench-smoke)

lane-modules-shared:
	$(call timed,integration-lab)
	$(call timed,integration-modules)
	$(call timed,integration-core-edges)
	$(call timed,test-awx)
	$(call timed,molecule)
	$(call timed,test-machines)

lab-lane-cluster: venv collection
	$(LAB_LANE)/cluster $(MAKE) lane-cluster-shared
	$(call timed,lab-binaries-other)
	$(call timed,integration-kubevirt-other)

lane-cluster-shared:
	$(call timed,integration-contract)
	$(call timed,test-roles-runs)

lab-lane-faults: venv collection
	$(LAB_LANE)/faults $(MAKE) lane-faults-shared

lane-faults-shared:
	$(call timed,test-faults)
	$(call timed,test-security)

# ansible-test sanity runs on the oldest and the newest ansible-core, the unit tests on the newest and on
# the floor (the oldest ansible-core with the oldest libraries); make test-versions runs them on every one.
checks: venv collection
	$(call timed,lint)
	$(call timed,unit-floor)
	$(call timed,test-versions-edges)
	$(call timed,docs-lint)
	$(call timed,ee-context)

# Every binary the lab runs (Kubernetes, etcd, kwok, both KubeVirt releases, the operator),
# built once into ~/.cache/kubevirt-ops-lab/.
lab-binaries: venv
	$(LAB) build --kubevirt-version $(KUBEVIRT_DEFAULT_VERSION) --kubevirt-version $(KUBEVIRT_OTHER_VERSION)

lab-binaries-other: venv
	$(LAB) build --kubevirt-version $(KUBEVIRT_OTHER_VERSION)

# ansible-test needs a real ansible_collections/<ns>/<name> directory (it resolves symlinks),
# so sanity runs on a copy of exactly what the collection build ships plus its tests
# (docs/rbac holds multi-document Kubernetes manifests for kubectl, not Ansible content).
ANSIBLE_TEST_PIP := $(HOME)/.ansible/test/cache/get_pip_24_2.py
# the pip versions whose bootstrap script the tested ansible-test releases ask for
ANSIBLE_TEST_PIP_VERSIONS := 23_1_2 24_2 25_2

# SANITY_VENV names the virtualenv whose ansible-test runs (`make sanity`: .venv) and
# SANITY_ARGS what it runs. Without --python ansible-test runs the compile and import tests on
# every Python it supports for the modules (tests/config.yml: >= 3.9) that is on PATH
# (SANITY_PYTHONS from pyenv, see below) and the other tests on the virtualenv's own Python.
SANITY_VENV ?= $(VENV)
SANITY_ARGS ?= --python 3.11

sanity: venv
	$(MAKE) sanity-run SANITY_VENV=$(VENV)

sanity-run:
	@mkdir -p $(dir $(ANSIBLE_TEST_PIP)) && for v in $(ANSIBLE_TEST_PIP_VERSIONS); do \
	  f=$(dir $(ANSIBLE_TEST_PIP))get_pip_$$v.py; [ -f $$f ] || cp tools/ansible_test_pip_bootstrap.py $$f; done
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	@git ls-files --cached --others --exclude-standard -z \
	  | grep -zvE '^(lab|bench|tools|docs/rbac|tests/integration|\.ci)/' \
	  | xargs -0 -I{} cp --parents {} $(SANITY_ROOT)/ 2>/dev/null || true
	@cd $(SANITY_ROOT) && git init -q . # its own repository, so ansible-test lists exactly these files
	cd $(SANITY_ROOT) && PATH=$(CURDIR)/$(SANITY_VENV)/bin:$(SANITY_PATH)$$PATH \
	  $(CURDIR)/$(SANITY_VENV)/bin/ansible-test sanity $(SANITY_ARGS) --color no

lint: venv collection
	PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) $(BIN)/ansible-lint --profile production
	$(MAKE) changelog-lint

changelog-lint: venv
	$(BIN)/antsibull-changelog lint

unit: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q tests/unit

# The unit tests on the floor of what the collection declares (ansible-core 2.17, and of requirements.txt:
# kubernetes 24.2.0 with urllib3 1.26), in a virtualenv of its own bootstrapped from requirements-floor.txt.
FLOOR_VENV := .venv-floor
FLOOR_BIN := $(CURDIR)/$(FLOOR_VENV)/bin

$(FLOOR_VENV)/.installed: requirements-floor.txt
	$(CACHED_VENV) --python $(PYTHON) --requirements requirements-floor.txt $(FLOOR_VENV)
	touch $@

unit-floor: $(FLOOR_VENV)/.installed collection
	PYTHONPATH=$(COLLECTIONS):$(CURDIR) ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) PATH=$(FLOOR_BIN):$$PATH \
	  $(FLOOR_BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/unit

# Every ansible-core the collection claims (meta/runtime.yml: requires_ansible >= 2.17), up to
# the newest release: the unit tests on each, in a virtualenv of its own (.venv-core<X.Y>, from
# tests/requirements/core-<X.Y>.txt: ansible-core, pytest and what the unit tests import),
# and ansible-test sanity on the oldest and the newest. 2.20 and later need Python 3.12.
# Interpreters come from pyenv when it is there (PYTHON_3.12=... overrides), else from PATH.
CORE_VERSIONS := 2.17 2.18 2.19 2.20 2.21
# make test runs the unit tests on the newest here, and on the oldest in unit-floor (with the oldest
# libraries); the lab tiers run the modules on .venv's 2.19. The releases in between change nothing the
# modules use that the two ends do not (make test-versions runs them all).
TEST_CORE_VERSIONS := 2.21
CORE_SANITY_VERSIONS := 2.17 2.21
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null)
pyenv_python = $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/$(1).*/bin/python$(1)))),python$(1))
PYTHON_3.11 ?= $(call pyenv_python,3.11)
PYTHON_3.12 ?= $(call pyenv_python,3.12)
core_python = $(if $(filter 2.17 2.18 2.19,$(1)),$(PYTHON_3.11),$(PYTHON_3.12))
# The Pythons ansible-test sanity checks the modules on (compile, import): pyenv's 3.8 to 3.13.
SANITY_PYTHON_VERSIONS := 3.8 3.9 3.10 3.11 3.12 3.13
SANITY_PATH := $(subst $(eval) ,,$(foreach v,$(SANITY_PYTHON_VERSIONS),$(patsubst %/python$(v),%:,$(filter /%,$(call pyenv_python,$(v))))))

.PRECIOUS: .venv-core%/.installed
.venv-core%/.installed: tests/requirements/core-%.txt
	$(CACHED_VENV) --python $(call core_python,$*) --requirements $< .venv-core$*
	touch $@

unit-core-%: .venv-core%/.installed collection
	PYTHONPATH=$(COLLECTIONS):$(CURDIR) ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) PATH=$(CURDIR)/.venv-core$*/bin:$$PATH \
	  $(CURDIR)/.venv-core$*/bin/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/unit

# The full sanity set on the virtualenv's Python, compile and import on every Python of SANITY_PATH;
# on the oldest ansible-core the set on its own Python only and without pylint (the compile and import
# tests on the other Pythons, and pylint, are the newest's, where they are as strict or stricter).
SANITY_CORE_ARGS_2.17 := --python 3.11 --skip-test pylint
sanity-core-%: .venv-core%/.installed
	$(MAKE) sanity-run SANITY_VENV=.venv-core$* SANITY_ARGS="$(SANITY_CORE_ARGS_$*)"

# The unit suites wait on their fake API server's clocks, not on the CPU: they run side by side.
test-versions: collection
	$(MAKE) --output-sync=target -j$(words $(CORE_VERSIONS)) $(addprefix .venv-core,$(addsuffix /.installed,$(CORE_VERSIONS)))
	$(MAKE) --output-sync=target -j$(words $(CORE_VERSIONS)) $(addprefix unit-core-,$(CORE_VERSIONS))
	$(foreach v,$(CORE_SANITY_VERSIONS),$(MAKE) sanity-core-$(v) &&) true

test-versions-edges: collection
	$(MAKE) test-versions CORE_VERSIONS="$(TEST_CORE_VERSIONS)"

# Module integration tests once more on the oldest and the newest ansible-core: the tests run
# from .venv, the modules through that virtualenv's ansible and Python. `make test` runs the
# run-strategy tests there (about a minute each): what differs between ansible-core releases is how a
# module is packed, run and given its options, the same for every module.
# CORE_EDGE_TESTS=tests/integration/modules runs every module test (about 6 minutes each).
CORE_EDGE_VERSIONS := 2.17 2.21
CORE_EDGE_TESTS ?= tests/integration/modules/test_vm_run_strategy.py
integration-core-%: .venv-core%/.installed collection
	KUBEVIRT_OPS_ANSIBLE_BIN=$(CURDIR)/.venv-core$*/bin $(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) \
	  $(CORE_EDGE_TESTS)

integration-core-edges: $(addprefix integration-core-,$(CORE_EDGE_VERSIONS))

# antsibull-docs and ansible-builder in a virtualenv of their own (tests/requirements/docs.txt).
DOCS_VENV := .venv-docs
DOCS_BIN := $(CURDIR)/$(DOCS_VENV)/bin

$(DOCS_VENV)/.installed: tests/requirements/docs.txt
	$(CACHED_VENV) --python $(PYTHON_3.11) --requirements $< $(DOCS_VENV)
	touch $@

# The plugin docs and the roles' argument specs as the documentation site renders them.
docs-lint: $(DOCS_VENV)/.installed collection
	cd $(COLLECTION_LINK) && PATH=$(DOCS_BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) \
	  $(DOCS_BIN)/antsibull-docs lint-collection-docs --plugin-docs .

# The execution environment: meta/execution-environment.yml is what ansible-builder reads from
# the installed collection, with its paths relative to the collection's root. Check both uses
# (no image is built): the introspection an EE build runs must find the collection's Python
# requirements and bindep, and `ansible-builder create` on the file (schema version 3, laid
# out as in the collection) must write a build context that carries them.
EE_CONTEXT := $(CURDIR)/.build/ee
EE_DEF := $(CURDIR)/.build/ee-definition
ee-context: $(DOCS_VENV)/.installed collection
	$(DOCS_BIN)/ansible-builder introspect $(COLLECTIONS) > .build/ee-introspect.yml
	grep -q "kubernetes>=24.2.0  # from collection kubevirt_ops.maintenance" .build/ee-introspect.yml
	grep -q "python3 \[platform:rpm compile\]  # from collection kubevirt_ops.maintenance" .build/ee-introspect.yml
	rm -rf $(EE_CONTEXT) $(EE_DEF) && mkdir -p $(EE_DEF)
	cp meta/execution-environment.yml requirements.txt bindep.txt $(EE_DEF)/
	$(DOCS_BIN)/ansible-builder create --file $(EE_DEF)/execution-environment.yml --context $(EE_CONTEXT) --output-filename Containerfile -v 1
	cmp requirements.txt $(EE_CONTEXT)/_build/requirements.txt
	cmp bindep.txt $(EE_CONTEXT)/_build/bindep.txt
	grep -q "_build/requirements.txt" $(EE_CONTEXT)/Containerfile && grep -q "_build/bindep.txt" $(EE_CONTEXT)/Containerfile

# The lab tier that gates every change: the lab itself, the KubeVirt contract (the behaviour
# page against the real virt-controller and virt-api; that suite brings up a lab with the real
# KubeVirt unless KUBEVIRT_OPS_LAB_DIR names one), and the modules. The security, fault and role suites have targets of their own below
# (each brings up a lab of its own); `make test` runs them after this one.
INTEGRATION_SUITES := tests/integration/lab tests/integration/kubevirt_contract tests/integration/modules

integration: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) $(INTEGRATION_SUITES) $(addprefix --ignore=,$(MACHINE_TESTS))

# make test runs it in three tiers: the lab, the KubeVirt contract, and the modules
# (integration-cluster: the first two).
integration-cluster: integration-lab integration-contract

integration-lab: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/lab

integration-contract: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/kubevirt_contract

integration-modules: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/modules $(addprefix --ignore=,$(MACHINE_TESTS))

# The lab's machines through their BMCs: node_machine and the rolling role servicing them
# (rolling_maintenance_reboot=bmc, firmware, BIOS), node_fence powering a dead node's machine off;
# on a lab of their own, in the lane with the most room.
MACHINE_TESTS := tests/integration/modules/test_node_machine.py tests/integration/modules/test_node_fence.py \
  tests/integration/roles/test_rolling_machines.py

test-machines: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) $(MACHINE_TESTS)

# The KubeVirt contract and the node_maintenance module tests once more, on the other KubeVirt
# release the lab builds (the default lab runs 1.7.0; 1.9.0 is not buildable from the module
# proxy: it refuses kubevirt.io/virt-template-api v0.2.0). The failed-node row, which waits
# out virt-controller's 5-minute heartbeat timeout, runs on the default release only, as do the checks of
# the stand-ins that need no cluster (test_logic.py, test_handler_logic.py).
KUBEVIRT_DEFAULT_VERSION ?= 1.7.0
KUBEVIRT_OTHER_VERSION ?= 1.8.0
# make test runs the contract there and node_maintenance through every eviction strategy;
# KUBEVIRT_OTHER_TESTS=tests/integration/modules/test_node_maintenance.py runs all of that module's tests.
KUBEVIRT_OTHER_TESTS ?= tests/integration/modules/test_node_maintenance.py::test_eviction_table_through_node_maintenance
integration-kubevirt-other: venv collection
	KUBEVIRT_OPS_LAB_KUBEVIRT_VERSION=$(KUBEVIRT_OTHER_VERSION) $(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) \
	  -k "not failed_node" tests/integration/kubevirt_contract $(KUBEVIRT_OTHER_TESTS) \
	  --ignore=tests/integration/kubevirt_contract/test_logic.py --ignore=tests/integration/kubevirt_contract/test_handler_logic.py

test-roles: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/roles $(addprefix --ignore=,$(MACHINE_TESTS))

# make test runs the roles in two tiers, each on a lab of its own: the rolling runs' failure-domain
# batches and VM placement (ROLES_BATCHES), decommission and migration limits; and every other test.
ROLES_BATCHES := batch or zone or max_parallel or vms_leaving or without_the_preference or without_scoring
test-roles-batches: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/roles \
	  $(addprefix --ignore=,$(MACHINE_TESTS)) -k "$(ROLES_BATCHES) or decommission or limits"

test-roles-runs: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/roles \
	  $(addprefix --ignore=,$(MACHINE_TESTS)) -k "not ($(ROLES_BATCHES) or decommission or limits)"

# The rolling maintenance playbook run through ansible-runner as an AWX / AAP job template runs
# it (extra vars, a bearer-token credential's environment, no kubeconfig), asserting on the job
# events: drain progress at least every 15 s, the stats and report artifacts, no secret.
test-awx: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/awx

test-security: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/security

# The benchmark harness, one tiny scenario per peer, on a lab of its own (never .build/bench-lab,
# see tests/integration/bench/conftest.py); each test is cut off after 10 minutes, the whole at 30.
bench-smoke: venv collection
	$(PYTEST_ENV) timeout --kill-after=60 1800 $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/bench

# Fault injection on the lab (tests/integration/faults): part of `make test`, or on its own.
test-faults: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/faults

# Randomized chaos runs on a lab of their own: CHAOS_RUNS seeded rolling runs (default 5) from
# CHAOS_FIRST_SEED (default 1), each with faults its seed draws, resumed until it completes and checked
# by an observer of its own; SEED=<n> (or <n>,<m>,...) replays runs; CHAOS_LANES=<k> spreads the runs over k labs
# side by side (a long session in a fraction of the time; 3 on the 2-core reference machine). Results:
# tests/output/chaos/.
CHAOS_LANES ?= 1
chaos: venv collection
	$(LAB) build --kubevirt-version $(KUBEVIRT_DEFAULT_VERSION)
	CHAOS_SEED=$(SEED) CHAOS_LANES=$(CHAOS_LANES) $(PYTEST_ENV) $(BIN)/python tests/integration/chaos/lanes.py

# Every seed a chaos run has failed on, replayed on the fixed code (6: a cancel
# while the lock was taken; 12: a guest left running on a rebooted machine; 18: a RerunOnFailure VM left stopped
# after a failed drain; 19: a migrating VM restarted for an old failed pod of it). Before a release, beside the long
# session; results: tests/output/chaos-regressions/.
CHAOS_REGRESSION_SEEDS := 6,12,18,19
chaos-regressions:
	CHAOS_OUTPUT=tests/output/chaos-regressions $(MAKE) chaos SEED=$(CHAOS_REGRESSION_SEEDS)

# The short chaos session of make test, so the machinery cannot rot: a fixed seed whose schedule covers
# a kill, an AWX-style cancel, a failing migration, machines restarted through their BMCs and limits
# raised for the run, plus the observer's sabotage cases in a run in failure-domain batches (seed 12
# adds the power cut of a migration's target, seed 10 a BMC that stops answering, seed 444 a kill and a
# failing migration in batches: `make test-chaos CHAOS_TEST_SEEDS=6,10,12,444`).
# Results: tests/output/chaos-test/.
CHAOS_TEST_SEEDS ?= 6
test-chaos: venv collection
	CHAOS_SEED=$(CHAOS_TEST_SEEDS) CHAOS_OUTPUT=tests/output/chaos-test $(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/chaos/test_chaos.py

# What the chaos runs found, each replayed on purpose with its moment made certain (tests/integration/chaos/
# test_chaos_cases.py); in the checks lane of make test, after the short session.
test-chaos-cases: venv collection
	CHAOS_OUTPUT=tests/output/chaos-cases $(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/chaos/test_chaos_cases.py

# The reliability figures (faults injected/survived, bad inputs/clean errors, PDB violations,
# VMs lost) from a fresh run of the tests that record them: tests/output/reliability.{json,md}.
reliability-report: venv collection
	rm -rf tests/output/reliability
	-$(PYTEST_ENV) $(BIN)/pytest -q tests/unit/plugins/test_bad_input_matrix.py
	-$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(PYTEST_REPORT) tests/integration/security tests/integration/faults
	$(PYTEST_ENV) $(BIN)/python tests/integration/reliability.py

# The Molecule scenario of the rolling_maintenance role, on the lab (reused when
# KUBEVIRT_OPS_LAB_DIR names a running lab, else brought up in .lab/molecule and taken down).
molecule: venv collection
	$(PYTEST_ENV) $(BIN)/molecule test -s rolling_maintenance

demo: venv collection
	$(PYTEST_ENV) $(BIN)/python -m lab.demo $(if $(SCHEDULER_PROFILE),--scheduler-profile $(SCHEDULER_PROFILE))

lab-up: venv
	$(BIN)/python -m lab up

lab-down: venv
	$(BIN)/python -m lab down

lab-status: venv
	$(BIN)/python -m lab status

bench: venv collection
	$(PYTEST_ENV) $(BIN)/python -m bench

clean:
	-$(BIN)/python -m lab down
	rm -rf .build tests/output
