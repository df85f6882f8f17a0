"""The fleet: many runtimes read through a Prometheus server (docs/fleet.md).

``queries`` holds the PromQL behind every column and the rules that pick a step and a rate
window; ``table`` turns range-query answers into the instances table (typed cells with ages,
sparkline arrays, the worst-instance ranking); ``drill`` turns them into one instance's time
panels and per-layer hit heatmap; ``session`` asks Prometheus (through
:class:`bmoe_top.tui.sources.prometheus.PrometheusClient`) and builds both. The
``bmoe-top fleet --once --json`` document is :mod:`bmoe_top.tui.present.fleet`, its headless
entry :func:`bmoe_top.tui.headless.fleet_once`. No Textual, no Rich.
"""
