"""In a real terminal (tmux): hostile strings from a /metrics server's error body, a CSV header and
a file name, printed by ``attach --metrics --once``, ``replay --summary`` and drawn by the attach
and replay screens, neither change the window title nor write the clipboard (OSC 0/2, OSC 52, and
their 8-bit forms), nor leave the screen. Skipped when tmux is missing."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import pytest
from helpers import synth
from helpers.hostile import HOSTILE
from helpers.scripted_http import Scripted
from helpers.tmux import Tmux

BMOE_TOP = Path(sys.executable).with_name("bmoe-top")

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed"),
    pytest.mark.skipif(not BMOE_TOP.exists(), reason="bmoe-top not installed"),
]


class HostileTmux(Tmux):
    """A pane that would let an escape rename the window or fill a paste buffer (OSC 52)."""

    def start(self, cmd: str, size: tuple[int, int] = (160, 45), env: dict[str, str] | None = None) -> None:
        super().start(cmd, size, {"LANG": "C.UTF-8", **(env or {})})
        self("set-option", "-g", "set-clipboard", "on")  # OSC 52 would fill a paste buffer
        self("set-option", "-g", "allow-rename", "on")  # an escape could rename the window
        self("set-option", "-g", "allow-passthrough", "off", check=False)

    def untouched(self) -> None:
        assert "PWNED" not in self.fmt("#{pane_title}")
        assert "PWNED" not in self.fmt("#{window_name}")
        assert self("list-buffers", check=False).strip() == ""  # OSC 52 did not reach the clipboard


@pytest.fixture
def hostile_server():
    s = Scripted()
    s.default = (500, HOSTILE.encode(), 0.0)
    yield s
    s.close()


def test_once_text_output_does_not_set_the_title(hostile_server, tmp_path):
    csv = tmp_path / "run.csv"
    csv.write_bytes(synth.token_csv(20).replace(b"model=synthetic-moe.gguf", b"model=" + HOSTILE.encode()))
    top = shlex.quote(str(BMOE_TOP))
    t = HostileTmux("bmoe-h")
    try:
        t.start(f"{top} attach --metrics {hostile_server.url} --once; {top} replay --summary {shlex.quote(str(csv))}; "
                "echo DONE-MARK; sleep 600")
        s = t.wait_screen("DONE-MARK")
        assert s.count("H0ST␛]52") >= 2  # the error body and the model name, printed inert
        t.untouched()
        assert t.fmt("#{alternate_on}") == "0"
    finally:
        t.close()


def test_attach_and_replay_screens_do_not_set_the_title(hostile_server, tmp_path):
    name = "run" + HOSTILE.replace("/", "_").replace("\x00", "") + ".csv"
    csv = tmp_path / name
    csv.write_bytes(synth.token_csv(20).replace(b"arch=qwen3moe", b"arch=" + HOSTILE.encode()))
    top = shlex.quote(str(BMOE_TOP))
    for cmd, needle in ((f"{top} attach --metrics {hostile_server.url} --interval 0.2", "server error"),
                        (f"{top} replay {shlex.quote(str(csv))}", "H0ST")):
        t = HostileTmux("bmoe-h")
        try:
            t.start(cmd)
            t.wait_screen(needle)
            t.wait_screen("H0ST␛]52")
            t.untouched()
            assert t.fmt("#{alternate_on}") == "1"  # still the app's full screen
        finally:
            t.close()
