"""Application processes inside a lab's nodes.

- :mod:`.launch`: ``Lab.exec_app`` (an application in a node); :mod:`.alto_server`: an ALTO
  server (RFC 7285 over HTTP) serving a run's maps from a node
"""
