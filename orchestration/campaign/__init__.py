"""Campaigns: many runs of one experiment over a parameter grid, resumable, aggregated
(:mod:`.runner` runs them; :mod:`.spec` and :mod:`.load` read the campaign file)."""
