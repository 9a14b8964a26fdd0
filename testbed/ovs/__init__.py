"""Open vSwitch switches (``datapath: ovs``), for either lab backend. Root, except :mod:`.flows`.

- :mod:`.switches`: daemons, bridge, ports; :mod:`.datapath`: kernel or user-space datapath
- :mod:`.flows` (pure): OpenFlow rules from the plan; :mod:`.lab`: bring-up and readback;
  :mod:`.settle`: keeps aitb's ingress delay lines on OVS ports
"""
