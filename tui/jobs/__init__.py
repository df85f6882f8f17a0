"""Use cases of bmoe-top: what a command or a screen asks for beyond showing a run. Each job reads
files (through :mod:`bmoe_top.tui.feed` and :mod:`bmoe_top.tui.sources`), runs the analysis core
(:mod:`bmoe_top.tui.analysis`) and writes what it is asked to write, and hands its result to a
view of :mod:`bmoe_top.tui.present`, which never calls back: ``whatif`` (cache sizing from a
routing trace, STRP profiles), ``live_whatif`` (the LRU curve of a streaming run), ``compare``
(arms of runs from files). No Textual or Rich.
"""
