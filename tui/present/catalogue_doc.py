"""The user guide's table of numbers, generated from the catalogue of quantities
(``bmoe_top.tui.model.quantities``): one table per group, each number's label, unit, scope, how it
is shown (its precision, with examples ``bmoe_top.tui.present.numbers.show`` makes), how it is
computed, what it is and what it is not. docs/user-guide.md "Numbers" holds the output between
two marker lines; ``python -m bmoe_top.tui.present.catalogue_doc docs/user-guide.md`` rewrites it
(``--check``: exit 1 when the page differs), and a test fails when the page and the catalogue
differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bmoe_top.tui.model.quantities import CATALOGUE, Quantity
from bmoe_top.tui.present.numbers import shown_as

__all__ = ["BEGIN", "END", "GROUPS", "numbers_section", "rewrite"]

BEGIN = "<!-- numbers: generated from bmoe_top/tui/model/quantities.py by bmoe_top.tui.present.catalogue_doc -->"
END = "<!-- /numbers -->"

#: The catalogue's groups (key prefix) and their headings, in the page's order.
GROUPS = (
    ("summary", "Run panel, `replay --summary`, the run block of every `--once --json`"),
    ("recent", "Title"),
    ("token", "One row: trends, the breakdown's readout"),
    ("tier", "Run panel, memory tiers, and the `tiers` block of every run document (`--once --json`, "
             "`replay --summary --json`): a bmoe-run run's expert cache, page cache and disk (docs/memory.md)"),
    ("map", "The layer × expert map's memory tiers (`v`): one cell, its misses by tier (docs/memory.md)"),
    ("turn", "The live screen's Turns table: one turn"),
    ("interval", "`attach --metrics`: the newest scrape interval"),
    ("since_start", "`attach --metrics`: since the server process started"),
    ("slots", "`attach --metrics --slots`"),
    ("request", "`attach --audit`: one request"),
    ("since_load", "`attach --audit`: one process run since its load"),
    ("fleet", "`fleet`: the table, the drill-down, `--once --json`, the Grafana board"),
    ("device", "The device sidecar"),
    ("predict", "`whatif` and `sweep`: the tok/s model at a cache budget"),
    ("sweep", "`sweep`: an arm's runs (the screen, `--once --json`)"),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _scope(x: Quantity) -> str:
    """The scope column: the words, and those of an ended run where they differ."""
    return f"{x.words()} (live); {x.words_at(ended=True)} (ended, at its last row)" if x.ended \
        else x.words()


def _row(x: Quantity) -> str:
    return "| " + " | ".join(_cell(c) for c in (
        f"`{x.label}`", x.unit, _scope(x), shown_as(x), f"`{x.field}`", x.formula, x.definition, x.not_)) + " |"


def numbers_section() -> str:
    """The generated part of the page, markers included (ends with a newline)."""
    lines = [BEGIN, ""]
    for prefix, heading in GROUPS:
        items = [x for x in CATALOGUE.values() if x.key.split(".", 1)[0] == prefix]
        lines += [f"**{heading}**", "",
                  "| label | unit | scope | shown as | field | computed | what it is | what it is not |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        lines += [_row(x) for x in items]
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def rewrite(path: str | Path, check: bool = False) -> bool:
    """Put :func:`numbers_section` between the markers of the page at ``path``; True when the
    page already held it. ``check``: change nothing. Raises ``ValueError`` when the page lacks
    the markers."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        a = text.index(BEGIN)
        b = text.index(END, a) + len(END) + 1
    except ValueError:
        raise ValueError(f"{p}: no {BEGIN!r} ... {END!r} markers") from None
    new = text[:a] + numbers_section() + text[b:]
    if new == text:
        return True
    if not check:
        p.write_text(new, encoding="utf-8")
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the table of numbers into a page (between its markers).")
    ap.add_argument("page", help="the page (docs/user-guide.md)")
    ap.add_argument("--check", action="store_true", help="change nothing: exit 1 when the page differs")
    args = ap.parse_args(argv)
    try:
        same = rewrite(args.page, check=args.check)
    except (OSError, ValueError) as exc:
        print(f"catalogue_doc: {exc}", file=sys.stderr)
        return 1
    if args.check and not same:
        print(f"{args.page}: the table of numbers differs from the catalogue (rewrite it without --check)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
