"""The alert rules as a Prometheus rules file (``bmoe-top fleet --rules``, docs/fleet.md "Alerts").

Every rule with a fleet twin (:attr:`bmoe_top.tui.model.alerts.Rule.fleet`: a ``fleet.*``
quantity of the catalogue, whose PromQL is defined there once) becomes one ``alert:`` with its
``expr:`` (the quantity's PromQL, grouped ``by (job, instance)``, compared with the threshold),
``for:``, ``labels: {severity}`` and ``annotations`` (summary, description). Rules that read only
what a local run sends (MemAvailable, the device sidecar's temperature) have no Prometheus series
and are named in a comment at the top. No Prometheus is needed to write it; ``promtool check
rules`` accepts it (a test checks). No Textual.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from bmoe_top.tui.fleet.grafana import stall_share_text
from bmoe_top.tui.fleet.queries import BY, by_text, matchers
from bmoe_top.tui.model.alerts import Rule
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.sources.prometheus import format_duration

__all__ = ["GROUP", "RATE_RANGE", "fleet_expr", "rules_file"]

#: The rule group's name.
GROUP = "bmoe-top"
#: The rate() range of the rules: four scrape intervals of Prometheus's default 15 s.
RATE_RANGE = "1m"


def fleet_expr(rule: Rule, selector: str = "", range_text: str = RATE_RANGE) -> str:
    """The PromQL condition of ``rule`` (its fleet twin's expression ``op`` its threshold) for
    ``selector``'s instances, rates over ``range_text``. Raises ``ValueError`` for a rule without a
    fleet twin."""
    if not rule.fleet:
        raise ValueError(f"{rule.name}: {rule.key} has no Prometheus series")
    sel = matchers(selector)
    x = q(rule.fleet)
    if x.key == "fleet.stall_share":
        body = stall_share_text(sel, range_text)
    else:
        body = x.promql.replace("$by", by_text(BY)).replace("$sel", sel).replace("$r", range_text)
    return f"({body}) {rule.op} {rule.threshold:g}"


def _s(text: str) -> str:
    """A YAML scalar: a JSON string is a YAML double-quoted scalar."""
    return json.dumps(text, ensure_ascii=False)


def rules_file(rules: Iterable[Rule], selector: str = "", range_text: str = RATE_RANGE) -> str:
    """The rules file (YAML, Prometheus's ``groups:`` format) of every rule with a fleet twin."""
    rules = list(rules)
    fleet = [r for r in rules if r.fleet]
    local = [r.name for r in rules if not r.fleet]
    out = ["# bmoe-top's alert rules for Prometheus (bmoe-top fleet --rules; docs/alerts.md, docs/fleet.md)."]
    if local:
        out.append("# Local runs only (no Prometheus series): " + ", ".join(local) + ".")
    out += ["groups:", f"  - name: {_s(GROUP)}", "    rules:"]
    for r in fleet:
        x = q(r.fleet)
        described = ("{{ $labels.instance }}: " + f"{x.label} ({x.unit}) is " + "{{ $value | humanize }}"
                     + f" ({r.op} {r.threshold:g})")
        out += [f"      - alert: {_s(r.name)}",
                f"        expr: {_s(fleet_expr(r, selector, range_text))}"]
        if r.for_s > 0:
            out.append(f"        for: {format_duration(r.for_s)}")
        out += ["        labels:", f"          severity: {_s(str(r.severity))}",
                "        annotations:", f"          summary: {_s(r.summary or r.expr)}",
                f"          description: {_s(described)}"]
    if not fleet:
        out[-1] = "    rules: []"
    return "\n".join(out) + "\n"
