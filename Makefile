# aitb make targets. Most need root (namespaces, tc): run them with sudo or as root.
PY      := .venv/bin/python
AITB    := .venv/bin/aitb
PYTEST  := .venv/bin/pytest

.PHONY: setup run test test-unit test-netns test-vm lint bench clean vm campaign

setup:            ## Debian packages, .venv, and the stock-kernel VM if the host kernel lacks netem
	bash scripts/setup.sh

run:              ## run the built-in default experiment (aitb run) and print its run directory
	$(AITB) run

CAMPAIGN ?= examples/campaigns/incast_sweep.yaml
campaign:         ## run (or resume) a campaign: CAMPAIGN=file (default: the incast sweep, host kernel)
	$(AITB) campaign $(CAMPAIGN)

lint:             ## style, import contracts between layers
	.venv/bin/ruff check --no-cache aitb models orchestration testbed topologies workloads traffic_gen analysis tests bench scripts
	.venv/bin/lint-imports
	@dups=$$(find tests -name 'test_*.py' -printf '%f\n' | sort | uniq -d); \
	  test -z "$$dups" || { echo "lint: test modules share a basename (pytest cannot collect both): $$dups"; exit 1; }

# On (at most) 2 workers (pytest-xdist); a test marked `serial` waits until no other test runs
# (tests/serial_lock.py). The netns and vm tiers stay serial: real namespaces, fixed resources.
test-unit:        ## no root, no network
	@$(PY) -c "import xdist" 2>/dev/null || { echo "test-unit: pytest-xdist is missing from .venv: run 'sudo make setup' (it installs .[dev])"; exit 1; }
	bash scripts/timed.sh unit $(PYTEST) -n auto --maxprocesses 2 -m "not netns and not vm" tests

test-netns:       ## root: real namespaces on the host kernel
	bash scripts/timed.sh netns $(PYTEST) --durations=25 -m "netns and not vm" tests

test-vm:          ## netem and friends: on the host if it has netem, else in ONE stock-kernel VM boot
	bash scripts/timed.sh vm $(PY) scripts/run_vm_tier.py tests

test: lint test-unit test-netns test-vm   ## everything CI runs

bench:            ## benchmarks against their named peers (prints ratios)
	$(PY) bench/bringup.py
	$(PY) bench/pcap_analysis.py
	$(PY) bench/agent_goodput.py
	$(PY) bench/ring_cct.py
	$(PY) bench/load_balancing.py
	$(PY) bench/start_skew.py --agents 64 --bursts 10 --rt-priority 10 --spin-us 200
	$(PY) bench/fidelity_rate.py

clean:            ## remove the labs of aitb runs whose owner died (by registry); deployed labs stay
	$(AITB) clean

vm:               ## install the stock-kernel VM path (qemu, kernel, modules), even if the host has netem
	bash scripts/setup.sh --vm
