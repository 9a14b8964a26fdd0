"""Shaping of one link direction as tc objects.

- :mod:`.recipe` (pure): what one direction needs (``direction_recipe``);
  :mod:`.objects`: the recipe's data types; :mod:`.msgs`: tc objects as netlink messages
- :mod:`.qdiscs`: one module per discipline behind one registry. **To add a qdisc or AQM:
  one module in qdiscs/ and one line in its ``MODULES`` table.**
"""
