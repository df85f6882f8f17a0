"""Live screen CPU benchmark: what bmoe-top costs while a run streams at 30 tokens/s with routing
for 48 layers, against the same app idle, in one run.

The real ``bmoe-top launch`` runs in a pseudo-terminal (200 x 60 by default, its output read and
thrown away as a terminal would draw it) over the synthetic emitter (tests/helpers/emitter.py:
a ``BMOE_ROUTE`` line of 48 layers x top-8 of 128 experts and a ``BMOE_PROGRESS`` line per token,
``BMOE_RESIDENT`` every 8 tokens). Rounds alternate: idle (the session is ready, nothing
generates) and streaming (a prompt typed into the box, 30 tokens/s); in each, the CPU time of
the bmoe-top process (all its threads, from /proc/PID/stat; the emitter is another process and
not counted) over a fixed wall-clock span, in % of one core, and the bytes it wrote to the
terminal per second. Goal: under 5 % of a core while streaming.

    .venv/bin/python benchmarks/bench_live_cpu.py [--rounds 3] [--span 8] [--rate 30] [--size 200x60]
        [--refresh S] [--fps N] [--tiers]

``--refresh`` and ``--fps`` are handed to ``bmoe-top launch`` (default: its own defaults, printed).
``--tiers``: the routing lines name each expert's memory tier (as bmoe-run's do) and the layer x
expert map shows them (``[view] expert_map = "tiers"`` in the run's settings file).

The app runs on a settings file of the run's own (``--config``, empty but for ``--tiers``) and its
own config, state and data folders (``XDG_*_HOME`` in a temporary folder): the user's settings
(a refresh period, a layout, a hidden view) never change what is measured, and the session's event
log does not go into the user's.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import re
import select
import signal
import statistics
import struct
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EMITTER = str(ROOT / "tests" / "helpers" / "emitter.py")
BMOE_TOP = str(Path(sys.executable).with_name("bmoe-top"))
TICK = os.sysconf("SC_CLK_TCK")
TOKENS = re.compile(rb"tokens ([0-9,]+) \(turn")  # the title while a turn runs (not an axis label)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Terminal:
    """A child in a pseudo-terminal whose output is drained (and counted) continuously."""

    def __init__(self, argv: list[str], cols: int, rows: int, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor", **(env or {}))
        env.pop("NO_COLOR", None)
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child
            os.execvpe(argv[0], argv, env)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.bytes = 0
        self.tail = b""

    def drain(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            r, _, _ = select.select([self.fd], [], [], min(left, 0.05))
            if r:
                try:
                    d = os.read(self.fd, 1 << 16)
                except OSError:
                    return
                self.bytes += len(d)
                self.tail = (self.tail + d)[-(1 << 18):]  # over a second of repaints: the title is in it

    def wait_for(self, needle: bytes, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while needle not in self.tail:
            if time.monotonic() > end:
                raise SystemExit(f"{needle!r} not seen on the screen after {timeout} s")
            self.drain(0.1)

    def type(self, data: bytes) -> None:
        os.write(self.fd, data)

    def tokens_shown(self) -> int | None:
        """The newest token count the title drew ("tokens 1,234"), None before any."""
        got = TOKENS.findall(self.tail)
        return int(got[-1].replace(b",", b"")) if got else None

    def close(self) -> None:
        try:
            self.type(b"\x11")  # ctrl+q
            self.drain(3.0)
        finally:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)


def measure(term: Terminal, span: float) -> tuple[float, float, float]:
    """(% of one core, terminal bytes/s, tokens/s the title showed) of bmoe-top over ``span``
    seconds (a loaded machine can slow the emitter below its rate: the achieved rate is printed)."""
    b0, c0, t0, n0 = term.bytes, cpu_s(term.pid), time.monotonic(), term.tokens_shown()
    term.drain(span)
    dt = time.monotonic() - t0
    n1 = term.tokens_shown()
    rate = (n1 - n0) / dt if n0 is not None and n1 is not None else 0.0
    return 100.0 * (cpu_s(term.pid) - c0) / dt, (term.bytes - b0) / dt, rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--span", type=float, default=8.0, help="seconds measured per phase")
    ap.add_argument("--rate", type=float, default=30.0, help="tokens per second while streaming")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--size", default="200x60")
    ap.add_argument("--refresh", type=float, default=None, help="bmoe-top --refresh S (default: its default)")
    ap.add_argument("--fps", type=float, default=None, help="bmoe-top --fps N (default: its default)")
    ap.add_argument("--tiers", action="store_true", help="routing with memory tiers, the expert map showing them")
    a = ap.parse_args()
    cols, rows = (int(x) for x in a.size.split("x"))
    n_predict = int(a.rate * (a.span + 4)) + 10
    opts = [*(["--refresh", str(a.refresh)] if a.refresh is not None else []),
            *(["--fps", str(a.fps)] if a.fps is not None else [])]
    conf_dir = tempfile.TemporaryDirectory(prefix="bench-live-cpu-")
    home = Path(conf_dir.name)
    conf = home / "settings.toml"
    conf.write_text('[view]\nexpert_map = "tiers"\n' if a.tiers else "")
    env: dict[str, str] = {}
    for kind in ("config", "state", "data"):
        (home / kind).mkdir()
        env[f"XDG_{kind.upper()}_HOME"] = str(home / kind)
    argv = [BMOE_TOP, "launch", "-n", str(n_predict), *opts, "--config", str(conf),
            "--", sys.executable, EMITTER, "--rate", str(a.rate),
            "--route-layers", str(a.layers), "--route-experts", "128", "--route-k", "8",
            *(["--route-tiers"] if a.tiers else [])]
    term = Terminal(argv, cols, rows, env)
    idle: list[float] = []
    busy: list[float] = []
    idle_b: list[float] = []
    busy_b: list[float] = []
    rates: list[float] = []
    try:
        term.wait_for("· ready".encode())  # the title's state word (the status line says "ready" before)
        term.drain(2.0)
        for r in range(a.rounds):
            cpu, bps, _ = measure(term, a.span)
            idle.append(cpu)
            idle_b.append(bps)
            term.type(b"benchmark prompt")
            term.drain(0.5)
            term.type(b"\r")  # on its own: typed in one burst with the text, Enter can stay in the box
            term.drain(2.0)  # the turn is streaming
            cpu, bps, rate = measure(term, a.span)
            busy.append(cpu)
            busy_b.append(bps)
            rates.append(rate)
            term.type(b"\x1b")  # escape: cancel the turn
            term.drain(2.0)
            print(f"round {r + 1}: idle {idle[-1]:5.1f} %  streaming {busy[-1]:5.1f} % of a core "
                  f"({busy_b[-1] / 1024:.0f} KiB/s to the terminal, {rate:.1f} tokens/s shown)", flush=True)
    finally:
        term.close()
        conf_dir.cleanup()
    mi, mb = statistics.median(idle), statistics.median(busy)
    print(f"bmoe-top launch {' '.join(opts) or '(default --refresh and --fps)'} at {cols}x{rows}, "
          f"{a.rate:g} tokens/s with routing for {a.layers} layers, on settings of its own"
          f"{' (the tiers map)' if a.tiers else ' (none set)'}:")
    print(f"  idle (same app, same run):  median {mi:5.1f} % of a core, {statistics.median(idle_b) / 1024:.1f} KiB/s")
    print(f"  streaming:                  median {mb:5.1f} % of a core, {statistics.median(busy_b) / 1024:.1f} KiB/s")
    mr = statistics.median(rates)
    print(f"  tokens/s the title showed:  median {mr:5.1f} (asked for {a.rate:g})"
          + ("   SLOW: the emitter did not keep its rate (a loaded machine); CPU is for fewer lines"
             if mr < 0.9 * a.rate else ""))
    print(f"  streaming - idle: {mb - mi:.1f} points; ratio {mb / max(mi, 0.1):.1f}x   "
          f"goal: streaming < 5 % -> {'OK' if mb < 5 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
