"""Packet capture during a run.

- :mod:`.points` (pure): which interfaces a run captures on
- :mod:`.tcpdump`: one tcpdump per chosen interface, inside its node's namespace
"""
