# One entry point for every gate. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
PYVER := $(shell $(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
# ansible-test needs the collection at ansible_collections/<namespace>/<name>, and sees
# only files git tracks: a copy of the tracked and new files is made there.
AT_ROOT ?= /tmp/sparkfleet-ansible-test/$(notdir $(CURDIR))
AT_DIR := $(AT_ROOT)/ansible_collections/sparkfleet/serving

.PHONY: test lint sanity units pytest molecule link collection demo demo-clean clean

test: lint pytest sanity units molecule

link:
	@mkdir -p .ansible/collections/ansible_collections/sparkfleet
	@ln -sfn ../../../.. .ansible/collections/ansible_collections/sparkfleet/serving

# ansible-lint puts $ANSIBLE_HOME/collections first; ~/.ansible/collections holds whichever
# checkout Molecule installed last, so it is pointed at this checkout's collection link.
lint: link
	yamllint .
	ruff check .
	ANSIBLE_HOME=$(CURDIR)/.ansible ansible-lint

pytest:
	$(PYTHON) -m pytest -q tests/testbed tests/pytest

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

molecule: link
	molecule test --all

collection:
	ansible-galaxy collection build --force

# The main job against a simulated Spark, for when there is no real one: builds the
# test-bed image, starts one simulated Spark and runs the site playbook on it. It stays
# up for you to look at (`molecule login -s default`) until `make demo-clean`.
demo: link
	molecule create -s default && molecule prepare -s default --force && molecule converge -s default

demo-clean:
	molecule destroy -s default

clean:
	rm -rf $(AT_ROOT) tests/output .ansible .pytest_cache
