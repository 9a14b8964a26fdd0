"""ALTO (RFC 7285) network and cost maps of a run: :mod:`.files` (the run directory's ``alto/``
documents), :mod:`.serve` (the lab's ALTO server around a run) and :mod:`.live` (cost maps
refreshed from the counters during a run).
"""
