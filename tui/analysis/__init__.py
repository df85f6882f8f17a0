"""The analysis core of bmoe-top: cache replay (what-if), run statistics and run comparison.

Pure computation on numpy arrays and parser records: no Textual, no Rich, no run model.
Modules: :mod:`.lookups` (a routing trace as the cache sees it), :mod:`.cachesim` (policies
at every budget), :mod:`.live` (the incremental LRU curve), :mod:`.layers` (per-layer table and
budget allocation), :mod:`.skew` (routing-skew statistics), :mod:`.stats` (warm-up split,
Mann-Whitney U, Hodges-Lehmann, within-run intervals), :mod:`.compare` (the comparison of
arms of runs). docs/analysis.md explains what each number means.
"""
