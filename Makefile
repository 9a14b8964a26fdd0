# aitb make targets. Most need root (namespaces, tc): run them with sudo or as root.
PY      := .venv/bin/python
AITB    := .venv/bin/aitb
PYTEST  := .venv/bin/pytest

.PHONY: setup run test test-unit test-netns test-vm lint bench clean vm

setup:            ## install Debian packages and the Python environment (.venv)
	bash scripts/setup.sh

run:              ## bring up the default example lab, measure it, tear it down
	$(AITB) topo demo

lint:             ## style, import contracts between layers
	.venv/bin/ruff check aitb testbed topologies workloads traffic_gen analysis tests bench
	.venv/bin/lint-imports

test-unit:        ## no root, no network
	$(PYTEST) -m "not netns and not vm" tests

test-netns:       ## root: real namespaces on the host kernel
	$(PYTEST) -m "netns" tests

test-vm:          ## netem and friends: inside the stock-kernel VM when the host lacks them
	$(PYTEST) -m "vm" tests

test: lint test-unit test-netns test-vm   ## everything CI runs

bench:            ## benchmarks against their named peers (prints ratios)
	$(PY) bench/bringup.py
	$(PY) bench/pcap_analysis.py

clean:            ## remove every lab aitb left behind (by owner mark)
	$(AITB) clean

vm:               ## fetch the stock kernel for the VM path
	bash scripts/setup.sh --vm
