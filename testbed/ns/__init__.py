"""Namespaces and netlink, the primitives every other part of testbed/ builds on. Root.

- :mod:`.netns`: network namespaces without forking (create, enter per thread, remove)
- :mod:`.nl`: batched rtnetlink over one raw socket per namespace (pyroute2 messages);
  :mod:`.links`: veths, bridges and IFBs as rtnetlink messages
- :mod:`.sysctl`: per-namespace sysctls; :mod:`.sysctl_probe`: those this kernel refuses
- :mod:`.procs`: processes inside a node's namespace, started and ended by pid
"""
