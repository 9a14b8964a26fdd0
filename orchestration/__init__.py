"""The roof of aitb: what runs experiments and campaigns and what a person types.

``orchestration.run`` turns an experiment file into a run directory (lab, agents, capture,
analysis), ``orchestration.campaign`` sweeps experiments over parameter grids, and
``orchestration.cli`` is the ``aitb`` command line. This layer may import every package below
it (testbed, topologies, workloads, traffic_gen, analysis, and the ground ``aitb``); nothing
below imports it (import-linter contract in pyproject.toml; see docs/ARCHITECTURE.md).
"""
