"""Labs over several machines: the ``cluster:`` section (:mod:`.spec`), the placement of nodes
on machines and the VXLAN tunnels that join cut links (:mod:`.tunnels`, :mod:`.partition`),
the underlay's delay measured and accounted (:mod:`.underlay`), the parts deployed at once
(:mod:`.deploy`), the SSH control channel and the clock offset over it (:mod:`.control`), the
lab the runner drives and its remote agents (:mod:`.lab`), each machine observed and its
captures, counters and fidelity data merged on the driver's clock (:mod:`.observe_part`,
:mod:`.observing`, :mod:`.collect`, :mod:`.fidelity`), the ``events:`` split by machine,
played by each on its part and merged into one events.jsonl (:mod:`.events_part`,
:mod:`.eventing`)."""
