"""workloads, a middle package of aitb (layers: the import contracts in pyproject.toml):
parameters in, Schedule out (pure).

* ``workloads.aicb``: import AICB's CSV and SimAI text workload files.
* ``workloads.training``: a Megatron/DeepSpeed training iteration from model parameters.
* ``workloads.federated``: FedAvg rounds between an aggregator and clients (flat or
  hierarchical); ``workloads.gossip``: decentralised FL; ``workloads.fl_placement``: one
  cluster per site.
* ``workloads.inference``: inference serving (requests, token streams, bootstraps, policies).
* ``workloads.background``: data-centre background flows at a target load (data/flow_sizes.yaml).
* ``workloads.paths``: host-to-host paths (first ECMP path of models.paths) and delays.
* ``workloads.layout``: Megatron's rank layout (TP, DP, PP, EP groups).
* ``workloads.placement``: ranks onto the hosts of a (multi-site) lab.
* ``workloads.spec``: the YAML workload spec embedded by experiment files.
* ``workloads.summary``, ``workloads.transform``: per-collective summaries, scaled emulation.
"""
