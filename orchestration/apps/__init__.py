"""``kind: app`` experiment entries, real applications on several nodes at once:
:mod:`.entries` (validated entries), :mod:`.argv` (per-node argv and environment, pure) and
:mod:`.run` (every node's process on a live lab).
"""
