"""The diagnosis in words: the one line every run screen shows and the ``diagnosis`` list of the
``--once --json`` and ``replay --summary --json`` documents (docs/diagnosis.md). The rules and
their thresholds are ``bmoe_top.tui.model.diagnosis``'s; the numbers are formatted as the
catalogue says (``present/numbers.show``). No Textual."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from bmoe_top.tui.model.diagnosis import Facts, Finding
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.present.numbers import num, show

__all__ = ["NO_PROBLEM", "FindingDoc", "diagnosis_document", "diagnosis_line", "number_text"]

#: What the line says when no rule fired.
NO_PROBLEM = "no problem found"
#: The parts of the line apart.
SEP = " · "


class FindingDoc(TypedDict):
    """One finding of the ``diagnosis`` list: ``rule`` and ``severity`` (``warning`` |
    ``critical``), ``path`` and ``bottleneck`` (None = the run does not say), ``change`` (the first
    thing to change), ``quantity`` (the catalogue key of the number), ``value``, ``threshold`` and
    ``against`` (in the quantity's unit; ``against`` None when the threshold alone decides), and
    ``text`` (the number as the line shows it)."""

    rule: str
    severity: str
    path: str | None
    bottleneck: str | None
    change: str
    quantity: str
    value: float | None
    threshold: float | None
    against: float | None
    text: str


def number_text(x: Finding) -> str:
    """The number behind a finding as the line shows it: ``mgmt/wall 31.0 % > 20.0 %``, with the
    number it was compared with when there is one (``tok/s 3.10 < 6.00 (12.0 at the start)``)."""
    qty = q(x.quantity)
    op = "<" if x.value < x.threshold else ">"
    text = f"{qty.label} {show(qty, x.value)} {op} {show(qty, x.threshold)}"
    if x.against is not None:
        text += f" (of {show(qty, x.against)})" if x.rule == "flash_below_probe" else \
            f" ({show(qty, x.against)} at first)"
    return text


def diagnosis_document(findings: Sequence[Finding]) -> list[FindingDoc]:
    """The ``diagnosis`` list (empty when no rule fired)."""
    return [FindingDoc(rule=x.rule, severity=x.severity, path=x.path, bottleneck=x.bottleneck, change=x.change,
                       quantity=x.quantity, value=num(x.value), threshold=num(x.threshold),
                       against=num(x.against), text=number_text(x)) for x in findings]


def diagnosis_line(f: Facts, findings: Sequence[Finding], width: int = 200) -> str:
    """path · bottleneck · the first thing to change (its number), or ``no problem found``; fitted
    to ``width`` cells by leaving out, in turn, the comparison's reference, the path, the
    bottleneck and the change (the number stays), then cutting the end with an ellipsis. The
    other findings are counted at the end (``+2 more``)."""
    path = f.path or "path not stated"
    neck = f.bottleneck or "bottleneck not timed"
    if not findings:
        candidates = [SEP.join((path, neck, NO_PROBLEM)), SEP.join((neck, NO_PROBLEM)), NO_PROBLEM]
    else:
        top = findings[0]
        more = f"  +{len(findings) - 1} more" if len(findings) > 1 else ""
        full = number_text(top)
        short = full.split(" (", 1)[0]
        candidates = [SEP.join((path, neck, f"{top.change}: {full}")) + more,
                      SEP.join((path, neck, f"{top.change}: {short}")) + more,
                      SEP.join((neck, f"{top.change}: {short}")) + more,
                      f"{top.change}: {short}" + more,
                      short + more]
    for text in candidates:
        if len(text) <= width:
            return text
    last = candidates[-1]
    return last if width < 2 else last[:width - 1] + "…"
