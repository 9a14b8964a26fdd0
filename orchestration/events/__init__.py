"""``events:`` of an experiment: faults and dynamics on a timeline (links down and up, degraded
links, stopped agents), checked before the lab exists and played during the run.

- :mod:`.spec`: the ``events:`` section, validated and expanded to timed actions
- :mod:`.traces`: the trace player and the ``events:`` around a run's workloads
- :mod:`.hits`: what the events did to the transfers that failed
- :mod:`.cluster`, :mod:`.cluster_part`: the same over a cluster's machines (the driver's side
  and each machine's side)
"""
