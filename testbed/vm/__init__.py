"""The stock-kernel VM (virtme-ng), for what this host's kernel lacks (netem itself).

- :mod:`.run`: run a command inside a throwaway VM of this host's filesystem
- :mod:`.boot`: one boot (guest script, ``vng`` argv, process); :mod:`.image`: the read-only
  image of this Python installation; :mod:`.kernel`: where the kernel, modules and vng are
"""
