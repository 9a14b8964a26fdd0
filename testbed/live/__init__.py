"""Changes to a live lab: new shaping for one link direction (:mod:`.reshape`), links that fail
and come back (:mod:`.faults`), link traces played step by step (:mod:`.trace_player`, and
:mod:`.trace_process` for a deployed lab). Root.
"""
