"""testbed: the middle package that realises a :class:`~models.plan.LabPlan` as Linux network
namespaces, links, routes and tc (imports only the ground package ``models``; the import
contracts are in pyproject.toml). Needs root, except the pure modules their packages mark.

One sub-package per concept, each ``__init__`` saying what it owns:

- :mod:`testbed.lab`: ``Lab`` and its lifecycle (layout, bring-up, readback, registry, clean-up)
- :mod:`testbed.live`: changes to a live lab (reshaping, link faults, link traces)
- :mod:`testbed.ns`: namespaces, batched netlink, links, sysctls, processes by pid
- :mod:`testbed.tc`: tc recipes and the qdisc/AQM registry (:mod:`testbed.tc.qdiscs`)
- :mod:`testbed.delay`: delay-line backends behind one registry: netem on an IFB
  (:mod:`testbed.delay.netem`) and aitb's native NFQUEUE line (:mod:`testbed.delay.native`,
  its helper and CPU in :mod:`testbed.delay.nfqueue`)
- :mod:`testbed.routing`: static and ECMP routes, load balancing, source routing, FRRouting
- :mod:`testbed.ovs`: Open vSwitch switches
- :mod:`testbed.mininet`: the Mininet backend
- :mod:`testbed.containers`: container hosts, the docker engine, local images
- :mod:`testbed.apps`: application processes in nodes (and the ALTO server)
- :mod:`testbed.capture`: packet capture; :mod:`testbed.counters`: counter sampling and the
  other measurements of a run
- :mod:`testbed.host`: what this host can emulate (``aitb doctor``)
- :mod:`testbed.vm`: the stock-kernel VM
"""
