"""Routing of a lab: addresses and static routes, ECMP and per-router load balancing,
per-source policy routing of multi-NIC hosts, and FRRouting daemons (``routing: frr``).

- :mod:`.routes`: addresses and routes as rtnetlink messages
- :mod:`.load_balance`: how a router spreads packets over a multipath route's next hops
- :mod:`.source_routing`: per-source tables of multi-NIC hosts
- :mod:`.frr`: FRRouting configs (templates in ``frr_templates/``) and daemons per router
"""
