"""``kind: inference`` and ``kind: background`` experiment entries.

- :mod:`.entries`: the entries, validated; :mod:`.build`: entries into schedules and placements
"""
