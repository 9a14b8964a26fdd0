"""Container hosts: a host node whose network namespace belongs to a docker container.

- :mod:`.hosts`: the containers of a lab; :mod:`.dockerd`: the engine (use one, else start and
  own it); :mod:`.images`: minimal local Python images (no registry is reachable)
"""
