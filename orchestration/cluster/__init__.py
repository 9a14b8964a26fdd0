"""Labs over several machines (parts done so far): the ``cluster:`` section (:mod:`.spec`), the
placement of nodes on machines and the VXLAN tunnels that join cut links (:mod:`.tunnels`), the
SSH control channel and the clock offset over it (:mod:`.control`)."""
