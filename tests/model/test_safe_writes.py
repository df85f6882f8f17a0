"""Outside text enters the run model through its write API only, and is made safe to draw there:
no escape sequence, C1 control or bidi override reaches a view from the run header, the status
reason, source names, problems, log lines, summary extras, the sidecar, READY fields, turn errors
or alerts. Answer text is kept as sent (the answer view sanitizes it as multi-line text). Plus the
model's alerts, absent keys, summary notes and epochs (a restarted source)."""

from __future__ import annotations

import numpy as np

from bmoe_top.tui.model import RunModel

HOSTILE = ("\x1b]52;c;cHduZWQ=\x07"  # OSC 52: write the clipboard
           "\x1b]0;pwned title\x07"  # set the window title
           "\x1b[2J\x1b[31mred"  # CSI: clear the screen, colour
           "\u009b31m\u009d0;c1 title\u009c"  # 8-bit CSI / OSC / ST
           "\u202eevil\u202c\u2066iso\u2069"  # bidi override and isolates
           "\r\nsecond line\x00\x7f")
BAD = {"\x1b", "\x07", "\x00", "\x7f", "\r", "\n", *map(chr, range(0x80, 0xA0)), "\u202e", "\u202c", "\u2066", "\u2069"}


def clean(s: str) -> bool:
    return not (set(s) & BAD)


def test_every_text_write_is_safe():
    run = RunModel()
    run.update_meta({"model": HOSTILE, HOSTILE: "x", "arch": HOSTILE})
    run.set_status("ok", HOSTILE)
    run.add_source(HOSTILE)
    run.add_problem(HOSTILE, 3, HOSTILE, HOSTILE)
    run.add_log(HOSTILE)
    run.add_log_lines([HOSTILE, "plain"])
    run.update_summary_extra({HOSTILE: HOSTILE})
    run.update_sidecar({"k": HOSTILE})
    run.set_ready({"arch": HOSTILE, "load_s": 1.0})
    run.begin_turn(id=7)
    run.set_turn_error(7, HOSTILE)
    run.finish_turn({"msg": HOSTILE, "tokens": 3})
    run.begin_turn(id=8)
    run.reject_request(8, HOSTILE)
    run.add_alert(HOSTILE)
    run.set_absent({"tok_s": HOSTILE})
    run.set_summary_notes({"tok_s": HOSTILE})
    texts = [*run.meta.keys(), *run.meta.values(), run.status_detail, *run.sources, *run.log,
             *run.summary_extra.keys(), *run.summary_extra.values(), *run.sidecar.values(), str(run.ready["arch"]),
             str(run.turns[-1].error), str(run.turns[-1].done["msg"]), *run.alerts, *run.absent.values(),
             *run.summary_notes.values(), run.turnless[-1].reason]
    p = run.problems[0]
    texts += [p.source, p.text, p.reason]
    assert all(clean(t) for t in texts), [t for t in texts if not clean(t)]
    assert "␛]0;pwned title␇" in run.meta["model"] and "<U+202E>evil" in run.meta["model"]  # shown, not lost
    assert run.turns[-1].done["tokens"] == 3 and run.ready["load_s"] == 1.0  # numbers stay numbers
    assert "plain" in run.log  # clean text is kept as it is


def test_answer_text_is_kept_as_sent():
    run = RunModel()
    run.begin_turn(id=1, prompt="p\x1b[1m")
    run.append_answer("a\x1b[31mb\nc")
    assert run.turns[-1].text == "a\x1b[31mb\nc" and run.turns[-1].prompt == "p\x1b[1m"


def test_alerts_are_kept_once_and_counted():
    run = RunModel()
    v = run.version
    run.add_alert("x.bin is not a recorded run: binary data")
    run.add_alert("x.bin is not a recorded run: binary data")
    run.add_alert("recording stopped")
    assert run.alerts == ("x.bin is not a recorded run: binary data", "recording stopped")
    assert run.alert_count == 2 and run.version > v


def test_new_epoch_marks_the_rows_of_the_new_process():
    run = RunModel()
    for w in (10.0, 20.0):
        run.add_token_row({"wall_ms": w})
    assert run.epoch_start == 0 and run.epochs == 1
    run.new_epoch()
    run.add_token_row({"wall_ms": 40.0})
    assert run.epoch_start == 2 and run.epochs == 2
    assert run.column_stats("wall_ms", run.epoch_start).mean == 40.0


def test_absent_and_notes_replace_and_bump_only_on_change():
    run = RunModel()
    run.set_absent({"tok_s": "not exported"})
    v = run.version
    run.set_absent({"tok_s": "not exported"})
    assert run.version == v
    run.set_absent({})
    assert dict(run.absent) == {} and run.version > v
    run.set_summary_notes({"tok_s": "per stream"})
    assert run.summary_notes["tok_s"] == "per stream"


def test_a_source_without_per_token_times_has_no_mode():
    run = RunModel()
    run.add_token_row({"tok_s": 5.0, "cache_hit_pct": 50.0})
    assert run.mode() == ("none", "no per-token times in this source")
    run.add_token_row({"wall_ms": 3.0, "io_ms": 1.0})
    assert run.mode()[0] == "serial"
    run2 = RunModel()
    run2.add_token_rows({"wall_ms": np.array([1.0]), "stall_ms": np.array([0.5])}, 1)
    assert run2.mode()[0] == "overlap"
