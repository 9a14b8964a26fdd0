"""aitb from Python: the AI traffic testbed's public API.

    import aitb

    plan = aitb.topology({"generator": "single_switch", "params": {"hosts": 4}})
    run = aitb.run({"name": "demo", "topology": {"generator": "single_switch"},
                    "workloads": [{"kind": "incast", "receiver": "h1", "size": "1MiB"}]})
    run.table("flows")[["src_node", "fct_s"]]      # a DataFrame
    run.summary["fct_s_p99"]                        # seconds
    again = aitb.load_run(run.run_dir)              # a finished run directory

:func:`run` needs root (network namespaces, tc) and writes a run directory, as ``aitb run``
does; everything else is pure. Details and errors: :mod:`aitb.api`. This package is the top of
the house (pyproject.toml's import contracts): nothing in aitb imports it.
"""

from aitb.api import Run, load_run, prepare, run, topology, with_value
from models import __version__

__all__ = ["Run", "load_run", "prepare", "run", "topology", "with_value", "__version__"]
