"""The fidelity self-check of a run: did the emulation do what the plan says?

- :mod:`.run`: RTT probes before the workloads, the monitor during them, ``fidelity.json``
- :mod:`.cluster`: ``fidelity.json`` of a cluster run, each machine's part checked there
"""
