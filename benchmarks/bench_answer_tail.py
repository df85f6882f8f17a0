"""Answer tail: one build of the side panel's lines while an answer streams, wrapped per paragraph
and again only from a growing paragraph's last lines (``AnswerTail``: ``answer_tail`` with a
``TailWrap`` kept between builds), against the way it was built before (tests/helpers/answer_tail.py:
the text cut to what the panel holds plus two lines, wrapped whole by Rich at every build).

Workloads (a 60 x 27 panel, the side of a 200-column main screen): prose without line breaks (a
word per token, what the synthetic emitter sends), prose with a line break every ~12 words, and
code (indented lines). Each round grows a fresh answer by ``--tokens`` tokens and times a build
after every token, both ways interleaved token by token; the ratio is the median over rounds
(< 1 = cheaper than the baseline).

Run: .venv/bin/python benchmarks/bench_answer_tail.py [--rounds 5] [--tokens 600] [--size 60x27]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from bmoe_top.tui.model import RunModel
from bmoe_top.tui.widgets.panels import TailWrap, answer_tail

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from helpers.answer_tail import reference_tail  # noqa: E402

WORDS = "the router scores every expert and the top k of them run on this token while the cache keeps".split()


def _prose(i: int, rnd: random.Random) -> str:
    return rnd.choice(WORDS) + " "


def _paragraphs(i: int, rnd: random.Random) -> str:
    return rnd.choice(WORDS) + ("\n" if rnd.random() < 1 / 12 else " ")


def _code(i: int, rnd: random.Random) -> str:
    return rnd.choice(["    ", "x = ", "f(", "y", ") ", "\n", "\n        ", "return "])


def _round(token: Callable[[int, random.Random], str], tokens: int, width: int, height: int,
           console: Console) -> tuple[float, float]:
    """(seconds of the new builds, seconds of the baseline builds) over one growing answer."""
    rnd = random.Random(7)
    run = RunModel()
    run.begin_turn(prompt="Explain expert caching.")
    wrap = TailWrap()
    new = old = 0.0
    for i in range(tokens):
        run.append_answer(token(i, rnd))
        turn = run.current_turn()
        assert turn is not None
        run.add_token_row({"text_end": turn.text_len})
        cursor = run.tokens.n
        t0 = time.perf_counter()
        answer_tail(run, cursor, wrap, console, width, height)
        t1 = time.perf_counter()
        reference_tail(run, cursor, console, width, height, cut=True)
        t2 = time.perf_counter()
        new += t1 - t0
        old += t2 - t1
    return new, old


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=600)
    ap.add_argument("--size", default="60x27", help="panel width x height in cells")
    a = ap.parse_args(argv)
    width, height = (int(v) for v in a.size.lower().split("x"))
    console = Console(width=200, force_terminal=True, color_system="truecolor")
    print(f"answer tail {width}x{height}, {a.tokens} tokens per round, {a.rounds} rounds: "
          "ms per build, per paragraph vs cut and wrapped whole (interleaved)")
    for name, token in (("prose, no line breaks", _prose), ("prose, paragraphs", _paragraphs), ("code", _code)):
        ratios, news, olds = [], [], []
        for _ in range(a.rounds):
            new, old = _round(token, a.tokens, width, height, console)
            news.append(new / a.tokens * 1e3)
            olds.append(old / a.tokens * 1e3)
            ratios.append(new / old)
        print(f"  {name:22s} new {min(news):6.3f} ms  before {min(olds):6.3f} ms  "
              f"RATIO {statistics.median(ratios):.2f}x (range {min(ratios):.2f}..{max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
