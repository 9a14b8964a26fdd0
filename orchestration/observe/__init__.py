"""Capture and counter sampling around a run's workloads: :mod:`.local` for a lab on this
machine; :mod:`.cluster`, :mod:`.cluster_part` and :mod:`.cluster_collect` for a lab over a
cluster's machines (the driver's side, each machine's side, and bringing the files home).
"""
