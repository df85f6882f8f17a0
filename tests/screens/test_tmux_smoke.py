"""Smoke test of the real `bmoe-top` in a real terminal: tmux runs `bmoe-top launch` on the
real runtime (tiny model); keys are sent with send-keys and the screen read with
capture-pane. Checks: loading -> ready, a prompt streams tokens into the turns count, cancel,
quit / SIGTERM / SIGHUP restore the terminal (alternate screen and mouse modes off) and leave
no process behind. Skipped when tmux is missing."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers.tmux import Tmux

BMOE_TOP = Path(sys.executable).with_name("bmoe-top")
BMOE_RUN = Path(sys.executable).with_name("bmoe-run")

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
    pytest.mark.skipif(not (BMOE_TOP.exists() and BMOE_RUN.exists()), reason="bmoe-top/bmoe-run not installed"),
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return Path(make_model(tmp_path_factory.mktemp("tm") / "tiny-tmux.gguf", preset="tiny"))


@pytest.fixture
def tmux(tiny):
    t = Tmux("bmoe-l")
    t.start(f"exec {shlex.quote(str(BMOE_TOP))} launch -n 6 -- {shlex.quote(str(BMOE_RUN))} "
            f"-m {shlex.quote(str(tiny))} --session --route-telemetry -c 512")
    yield t
    t.close()


def runtime_pids(model: Path) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if str(model).encode() in cmd and stat.split(") ", 1)[1][0] != "Z":
            out.append(int(d.name))
    return out


def test_launch_prompt_stream_cancel_quit(tmux, tiny):
    tmux.wait_screen("· ready", 60)  # the title's state word
    assert tmux.fmt("#{alternate_on}") == "1"
    assert runtime_pids(tiny), "the runtime child is not running"
    tmux("send-keys", "-t", "main", "-l", "Hello there")
    tmux("send-keys", "-t", "main", "Enter")
    s = tmux.wait_screen("turns 1", 60)
    assert "qwen3moe" in s
    # a long turn, cancelled with escape
    # the prompt box was emptied by the first Enter; typing then waiting for the text on screen
    # (a C-u sent right before the text lost that text in about 1 run of 3: the keys after it never
    # reached the app; no C-u, no loss in 16 runs)
    tmux("send-keys", "-t", "main", "-l", "Once upon a time")
    tmux.wait_screen("Once upon a time", 60)
    tmux("send-keys", "-t", "main", "Enter")
    # cancel once the turn has begun: a cancel that reaches the runtime before its BMOE_BEGIN
    # drops the request without a turn (a loaded machine can take longer than any fixed sleep)
    end = time.monotonic() + 60
    while not any(w in tmux.screen() for w in ("· generating", "turns 2")) and time.monotonic() < end:
        time.sleep(0.05)
    tmux("send-keys", "-t", "main", "Escape")
    tmux.wait_screen("turns 2", 60)
    tmux("send-keys", "-t", "main", "C-q")
    assert tmux.wait_dead() == "0"
    assert tmux.fmt("#{alternate_on}") == "0"
    assert tmux.fmt("#{mouse_any_flag}") == "0" and tmux.fmt("#{mouse_sgr_flag}") == "0"
    end = time.monotonic() + 10
    while runtime_pids(tiny) and time.monotonic() < end:
        time.sleep(0.1)
    assert not runtime_pids(tiny), "runtime left behind after quit"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signal_restores_terminal_and_kills_child(tmux, tiny, sig):
    tmux.wait_screen("· ready", 60)  # the title's state word
    pid = int(tmux.fmt("#{pane_pid}"))
    assert tmux.fmt("#{alternate_on}") == "1"
    os.kill(pid, sig)
    assert tmux.wait_dead() == str(128 + sig)
    assert tmux.fmt("#{alternate_on}") == "0"
    assert tmux.fmt("#{mouse_any_flag}") == "0"
    end = time.monotonic() + 10
    while runtime_pids(tiny) and time.monotonic() < end:
        time.sleep(0.1)
    assert not runtime_pids(tiny), "runtime left behind after a signal"


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_no_color_replay_renders_and_quits_0(tmp_path, size):
    """NO_COLOR=1 bmoe-top replay FILE: every view draws in monochrome (no crash in Textual's
    monochrome filter), q quits with status 0 and the terminal is restored."""
    from helpers import synth

    csv = tmp_path / "run.csv"
    csv.write_bytes(synth.token_csv(120))
    route = tmp_path / "run.route.csv"
    route.write_bytes(synth.route_trace(120))
    t = Tmux("bmoe-nc")
    try:
        t.start(f"exec {shlex.quote(str(BMOE_TOP))} replay {shlex.quote(str(csv))} {shlex.quote(str(route))}",
                size, {"NO_COLOR": "1"})
        s = t.wait_screen("mgmt", 60)  # the breakdown's legend ("comp" when it counts clipped bars): the views drew
        assert "ended" in s and "whole run" in s and "token 120/120" in s and "Traceback" not in s
        # no colour at all (it sent greys as 256-colour codes); bold, dim and reverse stay
        raw = t("capture-pane", "-p", "-e", "-t", "main")
        sgr = {c for c in re.findall(r"\x1b\[([0-9;]*)m", raw)}
        colour = {c for c in sgr if re.search(r"(^|;)(3[0-7]|4[0-7]|9[0-7]|10[0-7]|38|48)(;|$)", c)}
        assert not colour, sorted(colour)[:10]
        t("send-keys", "-t", "main", "q")
        assert t.wait_dead() == "0"
        assert t.fmt("#{alternate_on}") == "0"
    finally:
        t.close()


def test_a_replay_in_a_terminal_of_no_run_quits_1_and_of_one_bad_file_quits_1_after_its_screen(tmp_path):
    """In a terminal, ``replay`` of files none of which is a recorded run opens no screen: the
    reasons and exit 1 (as ``--summary`` does); a good file with a bad one opens the good one's
    screen, its banner naming the bad one, and quits with 1."""
    from helpers import synth

    empty, binary, good = (tmp_path / n for n in ("empty.csv", "bin.dat", "good.csv"))
    empty.write_bytes(b"")
    binary.write_bytes(bytes(range(256)) * 8)
    good.write_bytes(synth.token_csv(20))
    t = Tmux("bmoe-rp")
    try:
        t.start(f"cd {shlex.quote(str(tmp_path))} && exec {shlex.quote(str(BMOE_TOP))} replay empty.csv bin.dat",
                size=(120, 40))
        assert t.wait_dead() == "1"
        screen = t("capture-pane", "-p", "-S", "-100", "-t", "main")  # with what scrolled off
        assert "empty.csv: the file is empty" in screen and "bin.dat: binary data" in screen
        t.close()
        t = Tmux("bmoe-rp")
        t.start(f"cd {shlex.quote(str(tmp_path))} && exec {shlex.quote(str(BMOE_TOP))} replay good.csv empty.csv",
                size=(120, 40))
        t.wait_screen("empty.csv")  # the banner names it over the good file's screen
        t("send-keys", "-t", "main", "q")
        assert t.wait_dead() == "1"
    finally:
        t.close()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGQUIT])
def test_a_killed_bmoe_top_takes_its_loading_child_with_it(sig):
    # the child is still loading (no READY; stdin unread, so EOF does not end it) when bmoe-top is
    # killed without a chance to close it: it was left running with PID 1 as its parent
    from helpers import EMITTER
    from helpers.waits import alive, until

    t = Tmux("bmoe-k")
    child = None
    t.start(f"exec {shlex.quote(str(BMOE_TOP))} launch -- {shlex.quote(sys.executable)} {shlex.quote(EMITTER)} "
            "--no-ready")
    try:
        t.wait_screen("loading")
        pid = int(t.fmt("#{pane_pid}"))
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        assert len(children) == 1
        child = int(children[0])
        os.kill(pid, sig)
        t.wait_dead()
        assert until(lambda: not alive(child)), f"the child outlived bmoe-top ({sig.name})"
    finally:
        t.close()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)


#: A session leader as `make run` is one: it catches the hangup's SIGHUP and waits for its child, so
#: the kernel's signal never ends the app for it; the app's terminal is simply gone.
_WAITING_PARENT = ("import signal, subprocess, sys; signal.signal(signal.SIGHUP, lambda *a: None); "
                   "sys.exit(subprocess.call(sys.argv[1:]))")


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "idle"])
def test_a_terminal_that_goes_away_ends_bmoe_top_and_its_runtime(tiny, streaming):
    # `make run` in tmux, a turn streaming, `tmux kill-session`: bmoe-top stayed with its stdin and
    # stdout on the deleted pty, its loop blocked on Textual's output queue (the output thread had
    # died on EIO), its runtime child alive, its CPU climbing, deaf to SIGTERM. Idle, nothing is
    # written: only the hangup seen on the input ends it.
    from helpers.waits import alive, until

    t = Tmux("bmoe-h")
    t.start(f"exec {shlex.quote(sys.executable)} -c {shlex.quote(_WAITING_PARENT)} {shlex.quote(str(BMOE_TOP))} "
            f"launch -n 2000 -- {shlex.quote(str(BMOE_RUN))} -m {shlex.quote(str(tiny))} --session "
            "--route-telemetry -c 4096")
    top = None
    try:
        t.wait_screen("· ready", 60)
        parent = int(t.fmt("#{pane_pid}"))
        top = int(Path(f"/proc/{parent}/task/{parent}/children").read_text().split()[0])
        runtime = runtime_pids(tiny)
        assert runtime, "the runtime child is not running"
        if streaming:
            t("send-keys", "-t", "main", "-l", "Once upon a time")
            t("send-keys", "-t", "main", "Enter")
            t.wait_screen("· generating", 60)
        t("kill-session", "-t", "main")
        assert until(lambda: not alive(top), 60), "bmoe-top outlived its terminal"
        assert until(lambda: not runtime_pids(tiny), 30), "the runtime outlived bmoe-top's terminal"
        assert not alive(parent) or until(lambda: not alive(parent), 30)
    finally:
        t.close()
        for pid in [top, *runtime_pids(tiny)]:
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.parametrize("command", ["replay", "compare", "whatif"])
def test_a_signal_ends_every_screen_with_the_terminal_restored(tmp_path, command, sig):
    # a screen without a runtime child (replay, compare, whatif) was ended by the signal's default
    # action: the alternate screen, mouse reporting and the hidden cursor stayed (status 143 still)
    from helpers import synth

    files = []
    for name in ("a", "b"):
        csv = tmp_path / f"{name}.csv"
        csv.write_bytes(synth.token_csv(60))
        files.append(csv)
    route = tmp_path / "a.route.csv"
    route.write_bytes(synth.route_trace(60))
    args = {"replay": [files[0], route], "compare": files, "whatif": [route]}[command]
    t = Tmux("bmoe-s")
    try:
        t.start(f"exec {shlex.quote(str(BMOE_TOP))} {command} {' '.join(shlex.quote(str(a)) for a in args)}")
        raw = tmp_path / "pane.raw"
        t("pipe-pane", "-t", "main", "-o", f"cat > {shlex.quote(str(raw))}")
        pid = int(t.fmt("#{pane_pid}"))
        end = time.monotonic() + 60
        while not (t.fmt("#{alternate_on}") == "1" and t.fmt("#{mouse_any_flag}") == "1") \
                and time.monotonic() < end:
            time.sleep(0.05)
        t.wait_screen("bmoe-top", 60)  # drawn: the title
        os.kill(pid, sig)
        assert t.wait_dead() == str(128 + sig)
        assert t.fmt("#{alternate_on}") == "0" and t.fmt("#{mouse_any_flag}") == "0"
        # the cursor shown again last (tmux's cursor_flag of a dead pane says nothing), once the
        # pipe has passed on the way out of the alternate screen
        from helpers.waits import until

        assert until(lambda: raw.exists() and b"\x1b[?1049l" in raw.read_bytes(), 30)
        out = raw.read_bytes()
        assert out.rfind(b"\x1b[?25h") > out.rfind(b"\x1b[?25l")
    finally:
        t.close()
