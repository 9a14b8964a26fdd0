"""The lab and its lifecycle: a :class:`~models.plan.LabPlan` brought up as namespaces, links,
routes and tc, read back, and torn down by its owner mark (root, except the pure modules).

- :mod:`.lab`: ``Lab`` (up/down/verify/set_shaping/popen/run, a context manager);
  :mod:`.handle`: what its helpers use of it; :mod:`.backends`: ``make_lab(plan, "native" |
  "mininet")``
- :mod:`.layout` (pure): namespaces, fixed ifindexes and recipes, computed from the plan;
  :mod:`.realise`: the bring-up steps, one netlink batch per namespace
- :mod:`.verify`: readback against the plan; :mod:`.state`: a live description with counters
- :mod:`.registry`: ownership records of one run; :mod:`.clean`: teardown by registry
  (``aitb clean``); :mod:`.signals`: SIGINT/SIGTERM while a lab is built or held
"""
