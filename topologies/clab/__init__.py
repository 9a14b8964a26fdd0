"""containerlab interop (pure: no root, no network).

* :func:`import_clab` -- a containerlab topology file (``*.clab.yml``) -> aitb topology
* :mod:`topologies.clab.export` -- an aitb plan -> containerlab topology + shaping script
"""

from topologies.clab.importer import ImportResult, import_clab, import_clab_doc

__all__ = ["ImportResult", "import_clab", "import_clab_doc"]
