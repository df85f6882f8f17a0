"""The diagnosis line: one line under the title on every run screen (and the memory screen of
``attach --pid``) that names the path that runs, the bottleneck of the newest window and the first
thing to change with its number, or "no problem found" (docs/diagnosis.md). It never takes the
focus; the rules run at most once per repaint of the panels, and only when the model changed
(its ``version``) or the line's width did."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.widgets import Static

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.diagnosis import Facts, Finding, diagnose, diagnose_memory
from bmoe_top.tui.model.memory import MemoryModel
from bmoe_top.tui.present.diagnosis import NO_PROBLEM, diagnosis_line

__all__ = ["DiagnosisLine"]


class DiagnosisLine(Static, can_focus=False):
    """The line over a model: ``version`` says when it changed, ``evaluate`` runs the rules. Build
    it with :meth:`for_run` or :meth:`for_memory`; call :meth:`update_from_run` from the screen's
    repaint."""

    DEFAULT_CSS = """
    DiagnosisLine { height: 1; padding: 0 1; color: $text-muted; }
    DiagnosisLine.-finding { color: $warning; text-style: bold; }
    """

    def __init__(self, version: Callable[[], int], evaluate: Callable[[], tuple[Facts, list[Finding]]],
                 on_change: Callable[[str, str, str], None] | None = None, **kw: Any) -> None:
        super().__init__("", **kw)
        self._version = version
        self._evaluate = evaluate
        #: called with (rules before, rules now, the line) when the rules that fire change
        self._on_change = on_change
        self._rules: str | None = None
        self._key: tuple[int, int] | None = None
        self.text = ""
        self.evaluations = 0  # rule evaluations (tests count them)

    @classmethod
    def for_run(cls, run: RunModel, probe_mb_s: float | None = None, **kw: Any) -> DiagnosisLine:
        """The line of a run (``probe_mb_s``: the probed bandwidth the settings hold, MB/s). A live
        run's event log (docs/events.md) records each change of the rules that fire (kind
        ``diagnosis``); a file's replay records none."""

        def record(old: str, new: str, line: str) -> None:
            if run.retention.bounded:
                run.events.record("diagnosis", "diagnosis", old, new, line)

        return cls(lambda: run.version, lambda: diagnose(run, probe_mb_s), record, **kw)

    @classmethod
    def for_memory(cls, m: MemoryModel, **kw: Any) -> DiagnosisLine:
        """The line of a process attached by ``--pid`` (plain mmap)."""
        return cls(lambda: m.version, lambda: diagnose_memory(m), **kw)

    def update_from_run(self, force: bool = False) -> None:
        """Run the rules when the model or the width changed (always when ``force``); show the line."""
        width = max(1, (self.size.width or self.app.size.width) - 2)
        key = (self._version(), width)
        if key == self._key and not force:
            return
        self._key = key
        facts, findings = self._evaluate()
        self.evaluations += 1
        line = diagnosis_line(facts, findings, width)
        rules = ", ".join(f.rule for f in findings) or NO_PROBLEM
        if rules != self._rules:
            if self._on_change is not None and (self._rules is not None or findings):
                self._on_change(self._rules or NO_PROBLEM, rules, line)
            self._rules = rules
        if bool(findings) != self.has_class("-finding"):
            self.set_class(bool(findings), "-finding")  # a class change restyles: only on a change
        if line != self.text:
            self.text = line
            self.update(Text(line, no_wrap=True, overflow="ellipsis"))
