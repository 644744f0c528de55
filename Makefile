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

.PHONY: help venv collection test checks lab-binaries sanity lint changelog-lint unit unit-floor integration integration-kubevirt-other test-roles test-awx test-security bench-smoke test-faults reliability-report molecule demo lab-up lab-down lab-status bench clean

help:
	@echo "make demo      rolling maintenance of every lab worker, with VMs migrating; prints the report"
	@echo "make test      sanity, lint, unit tests, the lab tier (lab, simulator, modules, security, faults, roles), Molecule and the bench smoke - what CI runs"
	@echo "make unit-floor  unit tests on the oldest declared runtime (kubernetes 24.2.0, urllib3 1.26)"
	@echo "make test-faults     fault-injection tests on the lab (kills, API server restart, node failure)"
	@echo "make reliability-report  bad-input, least-privilege, secrets and fault tests; the table of figures"
	@echo "make lab-up    start the local lab cluster (.lab/kubeconfig); make lab-down stops it"
	@echo "make bench     benchmarks against kubectl drain and kubernetes.core.k8s_drain (bench/results/)"

venv: $(VENV)/.installed

$(VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $@

# The collection as Ansible finds it: ansible_collections/kubevirt_ops/maintenance -> this repository.
collection:
	@mkdir -p $(dir $(COLLECTION_LINK))
	@ln -sfn $(CURDIR) $(COLLECTION_LINK)

# The static checks run while the lab's binaries build (a cold cache takes minutes; a warm one
# returns at once), then every lab tier.
test: venv collection
	$(MAKE) -j2 checks lab-binaries
	$(MAKE) integration
	$(MAKE) integration-kubevirt-other
	$(MAKE) test-security
	$(MAKE) test-faults
	$(MAKE) test-roles
	$(MAKE) test-awx
	$(MAKE) molecule
	$(MAKE) bench-smoke

checks: venv collection
	$(MAKE) sanity
	$(MAKE) lint
	$(MAKE) unit
	$(MAKE) unit-floor

# Every binary the lab runs (Kubernetes, etcd, kwok, both KubeVirt releases, the operator),
# built once into ~/.cache/kubevirt-ops-lab/.
lab-binaries: venv
	$(LAB) build --kubevirt-version $(KUBEVIRT_DEFAULT_VERSION) --kubevirt-version $(KUBEVIRT_OTHER_VERSION)

# ansible-test needs a real ansible_collections/<ns>/<name> directory (it resolves symlinks),
# so sanity runs on a copy of exactly what the collection build ships plus its tests
# (docs/rbac holds multi-document Kubernetes manifests for kubectl, not Ansible content).
ANSIBLE_TEST_PIP := $(HOME)/.ansible/test/cache/get_pip_24_2.py

sanity: venv
	@mkdir -p $(dir $(ANSIBLE_TEST_PIP)) && [ -f $(ANSIBLE_TEST_PIP) ] || cp tools/ansible_test_pip_bootstrap.py $(ANSIBLE_TEST_PIP)
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	@git ls-files --cached --others --exclude-standard -z \
	  | grep -zvE '^(lab|bench|tools|docs/rbac|tests/integration|\.ci)/' \
	  | xargs -0 -I{} cp --parents {} $(SANITY_ROOT)/ 2>/dev/null || true
	@cd $(SANITY_ROOT) && git init -q . # its own repository, so ansible-test lists exactly these files
	cd $(SANITY_ROOT) && PATH=$(BIN):$$PATH $(BIN)/ansible-test sanity --python 3.11 --color no

lint: venv collection
	PATH=$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) $(BIN)/ansible-lint --profile production
	$(MAKE) changelog-lint

changelog-lint: venv
	$(BIN)/antsibull-changelog lint

unit: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q tests/unit

# The unit tests on the floor of requirements.txt (kubernetes 24.2.0 with urllib3 1.26),
# in a virtualenv of its own bootstrapped from requirements-floor.txt.
FLOOR_VENV := .venv-floor
FLOOR_BIN := $(CURDIR)/$(FLOOR_VENV)/bin

$(FLOOR_VENV)/.installed: requirements-floor.txt
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_BIN)/pip install --quiet --disable-pip-version-check -r requirements-floor.txt
	touch $@

unit-floor: $(FLOOR_VENV)/.installed collection
	PYTHONPATH=$(COLLECTIONS):$(CURDIR) ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) PATH=$(FLOOR_BIN):$$PATH \
	  $(FLOOR_BIN)/pytest -q -p no:cacheprovider tests/unit

# The lab tier that gates every change: the lab itself, the KubeVirt contract (the behaviour
# page against the real virt-controller and virt-api; that suite brings up a lab with the real
# KubeVirt unless KUBEVIRT_OPS_LAB_DIR names one), and the modules. The security, fault and role suites have targets of their own below
# (each brings up a lab of its own); `make test` runs them after this one.
INTEGRATION_SUITES := tests/integration/lab tests/integration/kubevirt_contract tests/integration/modules

integration: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider $(INTEGRATION_SUITES)

# The KubeVirt contract and the node_maintenance module tests once more, on the other KubeVirt
# release the lab builds (the default lab runs 1.7.0; 1.9.0 is not buildable from the module
# proxy: it refuses kubevirt.io/virt-template-api v0.2.0). The failed-node row, which waits
# out virt-controller's 5-minute heartbeat timeout, runs on the default release only.
KUBEVIRT_DEFAULT_VERSION ?= 1.7.0
KUBEVIRT_OTHER_VERSION ?= 1.8.0
integration-kubevirt-other: venv collection
	KUBEVIRT_OPS_LAB_KUBEVIRT_VERSION=$(KUBEVIRT_OTHER_VERSION) $(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider \
	  -k "not failed_node" tests/integration/kubevirt_contract tests/integration/modules/test_node_maintenance.py

test-roles: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider tests/integration/roles

# The rolling maintenance playbook run through ansible-runner as an AWX / AAP job template runs
# it (extra vars, a bearer-token credential's environment, no kubeconfig), asserting on the job
# events: drain progress at least every 15 s, the stats and report artifacts, no secret.
test-awx: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider tests/integration/awx

test-security: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider tests/integration/security

# The benchmark harness, one tiny scenario per peer, on a lab of its own (never .build/bench-lab,
# see tests/integration/bench/conftest.py); each test is cut off after 10 minutes, the whole at 30.
bench-smoke: venv collection
	$(PYTEST_ENV) timeout --kill-after=60 1800 $(BIN)/pytest -q -p no:cacheprovider tests/integration/bench

# Fault injection on the lab (tests/integration/faults): part of `make test`, or on its own.
test-faults: venv collection
	$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider tests/integration/faults

# The reliability figures (faults injected/survived, bad inputs/clean errors, PDB violations,
# VMs lost) from a fresh run of the tests that record them: tests/output/reliability.{json,md}.
reliability-report: venv collection
	rm -rf tests/output/reliability
	-$(PYTEST_ENV) $(BIN)/pytest -q tests/unit/plugins/test_bad_input_matrix.py
	-$(PYTEST_ENV) $(BIN)/pytest -q -p no:cacheprovider tests/integration/security tests/integration/faults
	$(PYTEST_ENV) $(BIN)/python tests/integration/reliability.py

# The Molecule scenario of the rolling_maintenance role, on the lab (reused when
# KUBEVIRT_OPS_LAB_DIR names a running lab, else brought up in .lab/molecule and taken down).
molecule: venv collection
	$(PYTEST_ENV) $(BIN)/molecule test -s rolling_maintenance

demo: venv collection
	$(PYTEST_ENV) $(BIN)/python -m lab.demo

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
