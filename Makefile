# One entry point for every gate. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
PYVER := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
# ansible-test needs the collection at ansible_collections/<namespace>/<name>, and sees
# only files git tracks: a copy of the tracked and new files is made there.
AT_ROOT ?= /tmp/sparkfleet-ansible-test/$(notdir $(CURDIR))
AT_DIR := $(AT_ROOT)/ansible_collections/sparkfleet/serving

# ~/.ansible is shared by every checkout on a machine, and Molecule installs the collection
# into $ANSIBLE_HOME/collections, which ansible-lint and Molecule search first: keep it in
# this checkout, where `make link` points sparkfleet.serving at the working tree (Molecule
# then skips its install). The remote temporary directory stays the usual one.
export ANSIBLE_HOME := $(CURDIR)/.ansible
export ANSIBLE_REMOTE_TMP := ~/.ansible/tmp
# Some machines set PYTHONDONTWRITEBYTECODE: then every Python process compiles each module of the
# collection, the tests and Molecule it imports from source again, and so does each of
# ansible-playbook's worker processes for the plugins it loads. Python's default (compiled once,
# kept in __pycache__, which git, the tarball and ansible-test leave out) for every gate.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: importer test gates quick setup docs lint sanity units pytest molecule link collection demo demo-clean clean images

# The fast gates with the test-bed images and the tarball's checks beside them (gates), then
# Molecule in two lanes.
test: gates molecule

# quick's gates, the images Molecule needs and the tarball's checks: on a fresh machine building
# the images is mostly downloads (debootstrap, apt, pip wheels), and the tests (pytest) mostly
# wait on the servers they start, so the others' CPU work fills the gaps; on a machine that has
# the images, `images` only compares hashes. Longest first: sanity and pytest.
gates: link
	$(MAKE) --no-print-directory -j3 --output-sync=target sanity pytest images lint units importer

# The inner loop: every gate but the tarball and Molecule, no containers. Two at a time
# (sanity, the longest, first): on two cores that is about half the sequential time.
quick: link
	$(MAKE) --no-print-directory -j2 --output-sync=target sanity lint pytest units

# Fresh machine: apt packages, pinned Python toolchain, a running Docker engine.
setup:
	bash .ci/setup

# Role README variable tables, generated from each role's meta/argument_specs.yml between
# the <!-- BEGIN_ANSIBLE_DOCS --> markers (tests/pytest/test_role_conventions.py checks them).
ROLE_DIRS := $(patsubst %/meta/argument_specs.yml,%,$(wildcard roles/*/meta/argument_specs.yml))
docs:
	@for role in $(ROLE_DIRS); do \
	    aar-doc --output-file README.md --output-template .config/aar-doc/variables.md.j2 $$role markdown || exit 1; \
	done

# Only when missing: Molecule's dependency step runs this in both lanes at once, and
# `ln -sfn` replacing the same link twice at once can fail with "File exists".
LINK := .ansible/collections/ansible_collections/sparkfleet/serving
link:
	@[ "$$(readlink $(LINK))" = ../../../.. ] || { mkdir -p $(dir $(LINK)) && ln -sfn ../../../.. $(LINK); }

lint: link
	yamllint .
	ruff check .
	ansible-lint

# Some tests run roles through ansible-playbook: they need sparkfleet.serving resolvable (link).
# Most of their time is spent waiting on the stand-in servers they start, so three processes
# (pytest-xdist) take half the time of one, on two cores beside the other gates.
pytest: link
	$(PYTHON) -m pytest -q -n 3 tests/testbed tests/pytest

$(AT_DIR): FORCE
	rm -rf $(AT_ROOT) && mkdir -p $(AT_DIR)
	git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents -P {} $(AT_DIR)/ 2>/dev/null || true
	cd $(AT_DIR) && git init -q && git add -A
	# ansible-test downloads a pip bootstrap script; the interpreter's bundled pip does the same offline.
	mkdir -p ~/.ansible/test/cache
	printf 'import ensurepip, sys\nsys.exit(ensurepip._main(["--upgrade", "--default-pip"]))\n' \
	    > ~/.ansible/test/cache/get_pip_24_2.py
FORCE:

sanity: $(AT_DIR)
	cd $(AT_DIR) && ansible-test sanity --python $(PYVER) --local --color no

units: $(AT_DIR)
	cd $(AT_DIR) && ansible-test units --python $(PYVER) --local --color no --requirements

# The test-bed images (simulated Spark, stand-in vLLM, stand-in hub), each cached by a hash
# of its inputs: built once here, before the lanes, so that two lanes never build one at once.
images:
	tests/testbed/build-image.sh >/dev/null
	tests/testbed/vllm-standin/build.sh >/dev/null
	tests/testbed/hub-standin/build.sh >/dev/null

# Every scenario, in two lanes that run side by side. A scenario spends much of its time
# waiting (systemd and the inner Docker engines starting, health gates, downloads), so two
# lanes fit on two cores; each scenario's boxes, networks and hub have names of their own.
# The lanes are balanced by the scenarios' times in CI (each lane line of its log has the time):
# longest first, each to the lane that would end sooner, then the small ones swapped for the closest sums.
# A clean clone with the test-bed images removed, both lanes running (benchmarks/README.md): fleet 2160 s
# (several deployments across the boxes, the rolling maintenance), cluster 1668 (three boxes, their
# maintenance), vllm 785 (every one-box recipe, two deployments on the box), model 225, docker_runtime 148,
# firewall 147, watchdog 133 (two deployments), preflight 95: lanes of 2680 and 2681 s.
# A scenario in neither lane stops the run: none may be left out by accident.
MOLECULE_LANE_1 ?= fleet model docker_runtime firewall
MOLECULE_LANE_2 ?= cluster vllm watchdog preflight
MOLECULE_SCENARIOS := $(sort $(notdir $(patsubst %/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
MOLECULE_UNLANED := $(filter-out $(MOLECULE_LANE_1) $(MOLECULE_LANE_2),$(MOLECULE_SCENARIOS))
molecule: link images
	@[ -z "$(MOLECULE_UNLANED)" ] || { echo "molecule: scenario(s) in no lane: $(MOLECULE_UNLANED) (add them to MOLECULE_LANE_1 or _2)"; exit 2; }
	$(MAKE) --no-print-directory -j2 -k molecule-lane-1 molecule-lane-2

# There is no scenario named default: each `molecule test -s X` logs "CRITICAL
# 'molecule/default/molecule.yml' glob failed.  Exiting." and "default scenario not found,
# disabling shared state", then goes on (molecule 26.10, molecule/command/base.py): no failure.
# One lane: its scenarios one after the other, each line prefixed with the scenario's name and
# the time (what CI's log then says of where a lane's time goes); the lane stops at its first
# failing scenario (the other lane runs to its end). A CI log may keep only its end: a failing
# scenario's failed tests and tasks are repeated after its last line, from its log in
# MOLECULE_LOG_DIR.
MOLECULE_LOG_DIR ?= /tmp/sparkfleet-molecule-logs/$(notdir $(CURDIR))
MOLECULE_FAILURES := (FAILED|ERROR) tests/|fatal: \[|failed: \[|^E {2}
molecule-lane-%:
	@mkdir -p $(MOLECULE_LOG_DIR); \
	for scenario in $(MOLECULE_LANE_$*); do \
	    started=$$(date +%s); log=$(MOLECULE_LOG_DIR)/$$scenario.log; \
	    molecule test -s $$scenario 2>&1 | tee $$log \
	        | while IFS= read -r line || [ -n "$$line" ]; do printf '[%s %(%T)T] %s\n' "$$scenario" -1 "$$line"; done \
	        || { sed 's/\x1b\[[0-9;]*m//g; s/^ *│ *//' $$log | grep -a -E -A 4 --no-group-separator '$(MOLECULE_FAILURES)' | tail -n 80 \
	                 | sed "s/^/[$$scenario] what failed: /" || true; \
	             echo "[$$scenario] FAILED after $$(( $$(date +%s) - started )) s (whole log: $$log)"; exit 1; }; \
	    echo "[$$scenario] passed in $$(( $$(date +%s) - started )) s"; \
	done

# Build the tarball, install it where nothing else is, and load the installed copy's
# site playbook: what a user gets from `ansible-galaxy collection install`.
INSTALL_DIR ?= /tmp/sparkfleet-install/$(notdir $(CURDIR))
collection:
	ansible-galaxy collection build --force --output-path $(INSTALL_DIR)/dist
	rm -rf $(INSTALL_DIR)/collections
	ansible-galaxy collection install --no-deps --force -p $(INSTALL_DIR)/collections \
	    $(INSTALL_DIR)/dist/sparkfleet-serving-$$(sed -n 's/^version: //p' galaxy.yml).tar.gz
	cd $(INSTALL_DIR) && ANSIBLE_COLLECTIONS_PATH=$(INSTALL_DIR)/collections \
	    ansible-playbook -i localhost, sparkfleet.serving.site --syntax-check

# What Galaxy runs on every upload, in a venv of its own (it pins its own tools). It writes
# importer_result.json into the directory it runs in: beside the tarball, not into the tree.
# Galaxy imports a collection whatever its ansible-lint finds, and shows each finding on the
# collection's page: a finding fails this gate. The importer lints every file of the tarball,
# changelog fragments too (which `make lint` leaves out), with its own ansible-lint.
IMPORTER_VENV ?= /tmp/sparkfleet-importer-venv
importer: collection
	test -x $(IMPORTER_VENV)/bin/python || $(PYTHON) -m venv $(IMPORTER_VENV)
	$(IMPORTER_VENV)/bin/pip install -q --disable-pip-version-check galaxy-importer==0.4.44
	cd $(INSTALL_DIR)/dist && GALAXY_IMPORTER_CONFIG=$(CURDIR)/tests/galaxy/importer.cfg \
	    $(IMPORTER_VENV)/bin/python -m galaxy_importer.main \
	    $(INSTALL_DIR)/dist/sparkfleet-serving-$$(sed -n 's/^version: //p' $(CURDIR)/galaxy.yml).tar.gz \
	    2>&1 | tee $(INSTALL_DIR)/importer.log
	@! sed -n '/^Linting collection via ansible-lint/,/ansible-lint run complete$$/p' $(INSTALL_DIR)/importer.log \
	    | grep -E '^(WARNING|ERROR)' | sed 's/^/importer: Galaxy would show: /' | grep .

# The main job against simulated Sparks, for when there is no real one: builds the test-bed
# image, starts the fleet scenario's simulated Sparks, runs the site playbook on them, prints
# the fleet's status table and one request answered by each box and by the gateway
# (tests/testbed/demo.sh). They stay up for you to look at until `make demo-clean`.
demo: setup link
	tests/testbed/demo.sh

demo-clean: link
	tests/testbed/demo.sh clean

clean:
	rm -rf $(AT_ROOT) tests/output .ansible .pytest_cache .demo
