"""The Mininet backend: the same plan realised with Mininet's nodes and links.

- :mod:`.backend`: ``MininetLab``; :mod:`.nodes`: importing Mininet, its node classes
"""
