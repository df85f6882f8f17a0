"""The audit attach screen (tui/screens/attach_audit.py: the shared views over the run model the
followed audit file feeds) in a Textual pilot over a real file that is appended to, with a corrupt line and
two pids, and over a real bmoe-run serve audit log."""

from __future__ import annotations

import orjson
from helpers.waits import pilot_until
from rich.console import Console
from textual.widgets import DataTable

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.screens.attach_audit import AuditAttachScreen
from bmoe_top.tui.sources.tail import FileTail
from bmoe_top.tui.widgets.tables import SortTable


def audit_app(tail, **kw) -> BmoeTopApp:
    return BmoeTopApp(AuditAttachScreen(tail, **kw))

BASE = {"hybrid": False, "hits_profile": 0, "bytes_cpu": 0, "copies": 0, "bytes_copy": 0, "swaps": 0}


def plain(renderable, width=100) -> str:
    c = Console(width=width, record=True, color_system=None)
    c.print(renderable)
    return c.export_text()


def strips_text(lines) -> str:
    return "\n".join("".join(seg.text for seg in s) for s in lines)


def rec(event, pid, hits, misses, up, n=0, **extra) -> bytes:
    r = dict(BASE, event=event, pid=pid, time=f"2026-11-29T12:00:{n:02d}.000Z", hits=hits, misses=misses,
             bytes_upload=up)
    r.update(extra)
    return orjson.dumps(r) + b"\n"


def layers(res0, res1, h=(4, 2), m=(1, 3)):
    return [{"il": 0, "slots": len(res0), "hits": h[0], "hits_profile": 0, "misses": m[0], "resident": res0},
            {"il": 1, "slots": len(res1), "hits": h[1], "hits_profile": 0, "misses": m[1], "resident": res1}]


def req(pid, hits, misses, up, rh, rm, rup, task, n):
    return rec("request", pid, hits, misses, up, n, slot=0, task=task, n_prompt=4, n_gen=10, t_prompt_ms=2.0,
               t_gen_ms=50.0, req_hits=rh, req_hits_profile=0, req_misses=rm, req_bytes_upload=rup, req_bytes_cpu=0)


async def test_audit_screen_follows_the_file(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(rec("load", 7, 0, 0, 0, 1, model={"name": "tiny", "n_layer": 2}, cache={"slots": 4, "prefilled": 0,
                                                                                       "bytes": 1 << 20},
                      layers=layers([], [])) + rec("ready", 7, 0, 0, 0, 2))
    tail = FileTail(p, poll_s=0.02)
    app = audit_app(tail, fps=30)

    def panel_with(word: str) -> str:
        text = plain(app.query_one("#attach-panel").content)
        return text if word in text else ""

    async with app.run_test(size=(130, 36)) as pilot:
        await pilot_until(pilot, lambda: panel_with("tiny"), "the load of pid 7 in the panel")
        table = app.query_one("#requests DataTable", DataTable)
        assert table.row_count == 0
        with open(p, "ab") as f:
            f.write(req(7, 6, 4, 4 << 20, 6, 4, 4 << 20, 1, 3))
        with open(p, "ab") as f:
            f.write(b'{"event": "request", "pid": 7, NaN}\n')
        with open(p, "ab") as f:
            f.write(rec("load", 9, 0, 0, 0, 4, model={"name": "other", "n_layer": 2}, layers=layers([1], [2])))
        with open(p, "ab") as f:
            f.write(req(7, 9, 6, 5 << 20, 3, 2, 1 << 20, 2, 5))
            f.write(rec("exit", 7, 9, 6, 5 << 20, 6, layers=layers([0, 3], [5], h=(8, 2), m=(1, 7)),
                        perf={"n_gen": 20, "gen_tps": 200.0}))
        # newest run selected by default = pid 9 (opened by its load); go back to pid 7
        panel = await pilot_until(pilot, lambda: panel_with("other"), "pid 9's run in the panel")
        assert "9" in panel
        await pilot.press("comma")
        panel = await pilot_until(pilot, lambda: panel_with("tiny"), "pid 7's run in the panel")
        assert "exited" in panel and "exact sum" in panel and "holds" in panel
        assert "60.0 %" in panel  # 9 hits / 15 lookups
        assert table.row_count == 2
        row = [str(c) for c in table.get_row_at(0)]
        assert row[0] == "7" and row[5] == "200" and row[8] == "60.0"  # 10 tokens in 50 ms, 6/(6+4)
        # the table sorts: s by the next column, S reverses, a header click by that column
        table.focus()
        sort = app.query_one("#requests", SortTable)
        await pilot.press(*"s" * 10)  # the tenth column: the request's hits, most first
        assert sort.sort_col == 9 and sort.descending
        assert [str(table.get_row_at(r)[9]) for r in range(2)] == ["6", "3"]
        await pilot.press("S")
        assert [str(table.get_row_at(r)[9]) for r in range(2)] == ["3", "6"]
        await pilot.click("#requests DataTable", offset=(2, 0))  # the first column's header: pid
        await pilot.pause()
        assert sort.sort_col == 0
        # the '/' filter keeps the rows any cell of which holds the query, and gives them all back
        await pilot.press("slash", *"no such request")
        await pilot.pause()
        assert table.row_count == 0
        assert "no match" in str(app.query_one(".search-status").render())
        await pilot.press("escape")
        await pilot.pause()
        assert table.row_count == 2
        status = app.query_one("#attach-status").content.plain
        assert "1 corrupt line skipped" in status and "line 4" in status and "pids 7, 9" in status
        # the run model: two request rows, the corrupt line a problem, the newest resident map
        run = app.main.model
        assert run.tokens.n == 2 and run.row_unit == "request" and run.problem_count == 1
        assert run.problems[0].lineno == 4
        assert [t.done["pid"] for t in run.turns] == [7, 7]
        assert run.tokens.view("wall_ms").tolist() == [5.0, 5.0]  # 50 ms / 10 tokens
        # the replay screen's expert map draws the resident experts of the newest (exit) record
        rm = strips_text(app.query_one("#expert-map").build(100, 20))
        assert "L0" in rm and "L1" in rm
        row0 = [ln for ln in rm.splitlines() if ln.strip().startswith("L0")][0]
        # 4 experts, each 4 cells wide: experts 0 and 3 resident, 1 and 2 never routed
        assert row0.split("│", 1)[1][:16] == "████" + "····" * 2 + "████"
        # the exit's per-layer counts since load (L0: 8-4 hits, 1-1 misses; L1: 2-2 hits, 7-3
        # misses) land on pid 7's last request row: the layer x request heatmap
        hm = strips_text(app.query_one("#heatmap").build(100, 20))
        assert "layer × request hit share" in hm and "request 2" in hm
        share = run.hit_matrix()
        assert share.shape == (2, 2) and share[0, 1] == 1.0 and share[1, 1] == 0.0
        assert all(x != x for x in share[:, 0])  # no per-layer counts on the first request
        bd = strips_text(app.query_one("#breakdown").build(100, 14))
        assert "req└" in bd and "1–2 of 2" in bd
        trends = strips_text(app.query_one("#trends").build(100, 3))
        assert "hit %" in trends and "60.0 %" in trends and "tok/s" in trends and "200 [0–200]" in trends
        # the replay screen's title counts requests
        title = app.query_one("#title").plain
        assert "● live" in title and "requests 2" in title, title


async def test_audit_screen_over_a_real_server_log(tmp_path):
    from helpers.serve import Serve, complete

    from bmoe_top.runtime.models import make_model

    model = make_model(tmp_path / "tiny.gguf", preset="tiny", qtype="q8_0", seed=0)
    audit = tmp_path / "a.jsonl"
    s = Serve(model, "--cache-mb", "0.5", "--moe-cache-audit", str(audit))
    tail = FileTail(audit, poll_s=0.05)
    app = audit_app(tail, fps=30)
    try:
        async with app.run_test(size=(130, 36)) as pilot:
            n = complete(s.url, "the audit screen shows this request", 16).json()["tokens_predicted"]
            table = app.query_one("#requests DataTable", DataTable)
            await pilot_until(pilot, lambda: table.row_count == 1, "the request's row")  # never a duration
            assert str(table.get_row_at(0)[4]) == str(n)
            s.stop()
            panel = await pilot_until(pilot, lambda: (lambda p: p if "exited" in p else "")(
                plain(app.query_one("#attach-panel").content)), "the exit in the panel")
            assert "holds" in panel
            # the replay screen's views over the same run model: a breakdown column and the
            # exit record's per-layer counts on the request's row
            run = app.main.model
            assert run.tokens.n == 1 and run.tokens.view("wall_ms")[0] > 0
            bd = strips_text(app.query_one("#breakdown").build(100, 14))
            assert "1–1 of 1" in bd
            hm = strips_text(app.query_one("#heatmap").build(100, 20))
            assert "L0" in hm and "L1" in hm and "request 1" in hm
            assert (run.hit_matrix()[:, 0] == run.hit_matrix()[:, 0]).all()  # both layers have lookups
    finally:
        s.stop()


async def test_audit_screen_under_the_command_palette_and_keys(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(rec("load", 3, 0, 0, 0, 1, layers=layers([1], [2])))
    app = audit_app(FileTail(p, poll_s=0.02), fps=30)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+p")
        with open(p, "ab") as f:
            f.write(rec("ready", 3, 0, 0, 0, 2))
        await pilot_until(pilot, lambda: app.main.feed.runs.n_records == 2, "the ready record read")
        await pilot.press("escape")
        for k in ("full_stop", "comma", "f"):
            await pilot.press(k)
        await pilot_until(pilot, lambda: "ready" in plain(app.query_one("#attach-panel").content), "ready shown")
        assert app.main.feed.runs.n_records == 2


def test_the_attach_panels_labels_are_whole_and_values_wrap():
    """A narrow side panel cut labels into ``cache sl…`` and values into ``0 …``: every label is
    shown whole and each value wraps under its own column."""
    from rich.console import Console

    from bmoe_top.tui.screens.attach import rows_table

    rows = [("cache slots", "4 (2 busy, 2 idle, 0 waiting for a slot to free up)", "value"),
            ("resident/budget", "120 / 512 MiB", "value")]
    console = Console(width=30, record=True, color_system=None)
    console.print(rows_table(rows, width=30))
    text = console.export_text()
    assert "…" not in text
    lines = text.splitlines()
    assert lines[0].startswith("cache slots") and "resident/budget" in lines  # too wide: a line of its own
    assert lines[lines.index("resident/budget") + 1].strip() == "120 / 512 MiB"  # the value under its column
    assert " ".join(text.split()).count("waiting for a slot to free up") == 1
    assert all(len(ln) <= 30 for ln in lines)
