"""testbed: the middle package that realises a :class:`~aitb.plan.LabPlan` as Linux network
namespaces, links, routes and tc (imports only the ground ``aitb``; the import contracts are in
pyproject.toml). Needs root, except the pure modules marked (pure).

Module map:

- lab: :mod:`testbed.lab` (``Lab``: up/down/verify/set_shaping/popen/run, context manager),
  :mod:`testbed.lab_handle` (what its helpers use of it), :mod:`testbed.backends`
  (``make_lab(plan, "native" | "mininet")``), :mod:`testbed.mininet_backend` and
  :mod:`testbed.mininet_nodes` (the same plan on Mininet's nodes and links)
- plan to layout (pure): :mod:`testbed.layout` (namespaces, fixed ifindexes, recipes),
  :mod:`testbed.capture_select` (which interfaces a run captures on)
- shaping: :mod:`testbed.tc` (recipes as pure data), :mod:`testbed.tcobjects` (their types),
  :mod:`testbed.qdiscs` (one module per discipline, registry: to add a qdisc, one module
  there and one line in its registry), :mod:`testbed.delay_backends` (delay-line backends:
  netem on an IFB, the native NFQUEUE line of :mod:`testbed.delayline`),
  :mod:`testbed.tcmsgs` (tc objects as netlink messages)
- netlink and namespaces: :mod:`testbed.netns` (namespaces by a helper thread),
  :mod:`testbed.nl` (batched rtnetlink), :mod:`testbed.links`, :mod:`testbed.routes`
  (request builders), :mod:`testbed.sysctl` (per-namespace sysctls)
- bring-up, change, readback: :mod:`testbed.realise`, :mod:`testbed.reshape` (live shaping
  changes, STP wait), :mod:`testbed.verify` (readback against the plan),
  :mod:`testbed.lab_state` (live description with qdisc counters)
- what the host can do: :mod:`testbed.kernel` (qdisc/IFB probe guarding bring-up),
  :mod:`testbed.capabilities` (everything ``aitb doctor`` reports; one probe's result is a
  :class:`testbed.probe_result.Capability`)
- ownership and teardown: :mod:`testbed.registry` (records of what exists),
  :mod:`testbed.clean` (teardown by registry, ``aitb clean``), :mod:`testbed.signals`
  (SIGINT/SIGTERM during bring-up), :mod:`testbed.procs` (processes by pid),
  :mod:`testbed.apps` (application processes in a node)
- Open vSwitch: :mod:`testbed.ovs` (daemons, bridge, ports), :mod:`testbed.ovs_datapath`
  (kernel or user-space datapath), :mod:`testbed.ovs_flows` (rules, pure),
  :mod:`testbed.ovs_lab` (bring-up and readback), :mod:`testbed.ovs_settle` (keeps the
  ingress delay lines on OVS ports)
- containers: :mod:`testbed.containers` (docker-namespace hosts), :mod:`testbed.dockerd`
  (the engine), :mod:`testbed.images` (minimal local images)
- measurement: :mod:`testbed.capture` (tcpdump per interface), :mod:`testbed.counters`
  (the counter sampler), :mod:`testbed.countersnap` (before/after counter snapshot),
  :mod:`testbed.rttprobe` (ICMP RTT of links), :mod:`testbed.cpuload` (host CPU load)
- the stock-kernel VM: :mod:`testbed.vm` (run a command in it), :mod:`testbed.vm_boot`,
  :mod:`testbed.vm_image`, :mod:`testbed.vm_kernel`
"""
