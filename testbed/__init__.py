"""testbed layer of aitb (see ARCHITECTURE: layers): realises a LabPlan. Needs root.

Module map (runtime of issue 2, items 6-8):

- :mod:`testbed.lab` - ``Lab``: up/down/verify/set_shaping/popen/run, context manager
- :mod:`testbed.tc` - tc recipes as pure data (HTB + buffer at the sender, netem on an IFB)
- :mod:`testbed.layout` - namespaces, fixed ifindexes and recipes computed from the plan
- :mod:`testbed.netns` - namespaces created by a helper thread (unshare + bind mount)
- :mod:`testbed.nl` - batched rtnetlink over one socket per namespace (pyroute2 messages)
- :mod:`testbed.links`, :mod:`testbed.routes`, :mod:`testbed.tcmsgs` - request builders
- :mod:`testbed.realise` - bring-up steps; :mod:`testbed.verify` - readback
- :mod:`testbed.reshape` - live shaping changes, STP wait
- :mod:`testbed.sysctl` - per-namespace sysctls; :mod:`testbed.kernel` - feature probe
- :mod:`testbed.registry`, :mod:`testbed.clean` - ownership records, teardown, ``aitb clean``
- :mod:`testbed.procs` - processes in namespaces; :mod:`testbed.signals` - SIGINT/SIGTERM
- :mod:`testbed.inspect` - live description with qdisc counters
- :mod:`testbed.backends` - ``make_lab(plan, "native" | "mininet")``
- :mod:`testbed.mininet_backend`, :mod:`testbed.mininet_nodes` - the same plan on Mininet's
  nodes and links (issue 7 item 1)
- :mod:`testbed.ovs`, :mod:`testbed.ovs_lab`, :mod:`testbed.ovs_flows` - Open vSwitch
  switches (``datapath: ovs``): owned daemons, bridge, rules with select groups (item 2)
"""
