"""``replay --summary`` says which of two states a cache hit rate is in: the run had no cache
(the source's hit rate is -1), or this source does not carry the figure at all (a bmoe-cli log
has no hit rate) - never "no cache" for one and "missing" for the other of the same run."""

from __future__ import annotations

from bmoe_top.tui.feed.files import open_paths
from bmoe_top.tui.present.summary import NO_CACHE, run_summary, summary_rows, summary_text


def _hit(paths) -> str:
    rows = {label: text for label, text, _k in summary_rows(run_summary(open_paths([str(p) for p in paths])))}
    return rows["cache hit"]


def test_the_same_run_from_its_csv_and_its_log(real_runs):
    run = real_runs / "bigmoeonedge-2026-07-12"
    assert _hit([run / "gemma_stream.csv"]) == NO_CACHE
    assert _hit([run / "gemma_stream.log"]) == "not in this source"
    text = summary_text(run_summary(open_paths([str(run / "gemma_stream.log")])))
    assert "cache hit        not in this source" in text and "cache hit        missing" not in text


def test_synthetic_no_cache_csv_and_log_without_a_hit_rate(tmp_path):
    csv = tmp_path / "run.csv"
    csv.write_text("step,steps,wall_ms,io_ms,compute_ms,read_bytes,cache_hit_pct,stall_ms\n"
                   "1,2,600.0,400.0,180.0,1000,-1.00,0.000\n2,2,610.0,410.0,180.0,1000,-1.00,0.000\n")
    assert _hit([csv]) == NO_CACHE
    log = tmp_path / "run.log"
    log.write_text("generation: 64 tokens in 20.29 s (3.15 tok/s)\n")
    assert _hit([log]) == "not in this source"


def test_the_device_sidecar_is_in_human_units_like_the_run_panel(tmp_path):
    """The bmoe-cli device lines (kB, milli- and deci-degrees) read as MiB and °C; keys it does not
    know follow as they are."""
    log = tmp_path / "run.log"
    log.write_text("generation: 64 tokens in 20.29 s (3.15 tok/s)\n"
                   "peak_rss_kb=5949324\ncpu_temp_max_mC=70200\nbatt_temp_max_dC=409\nfan=on\n")
    text = summary_text(run_summary(open_paths([str(log)])))
    device = text.split("device:\n", 1)[1].splitlines()
    assert device == ["  peak RSS         5.67 GiB", "  CPU temp max     70.2 °C", "  battery max      40.9 °C",
                      "  fan              on"]
    assert "peak_rss_kb" not in text


def test_the_run_panel_shows_bmoe_cli_route_ahead_and_prediction(tmp_path):
    from bmoe_top.tui.headless import replay
    from bmoe_top.tui.present.summary import run_summary, summary_text

    f = tmp_path / "cli.log"
    f.write_text("generation: 64 tokens, 0.317 s/token (3.152 tok/s)\n"
                 "moe-route-ahead: 1 layers early \u2014 1234 routings committed, 56 passed through; committed "
                 "selection agreed with the router on 84.7% of slots\n"
                 "moe-predict: stale-gate 78.8% of routed slots (31.2% whole routings) | prev-token 55.0% (12.0%) "
                 "| fresh-gate control 97.0% (90.0%)\n")
    run, not_runs = replay([str(f)])
    assert not_runs == [] and run.problem_count == 0
    doc = run_summary(run)
    assert doc["extra"]["route_ahead_agree_pct"] == 84.7 and doc["extra"]["predict_stale_pct"] == 78.8
    text = summary_text(doc)
    assert "ahead agreed     84.7 %" in text and "stale-gate hit   78.8 %" in text


def test_a_running_source_says_each_scope_once_and_rightly():
    # while a run generates, the panel's figures from its token rows say their scope: a gauge
    # (resident, budget) is "now", a total "so far"; a label that names its scope already
    # (tok/s (run so far)) does not say it twice
    from bmoe_top.tui.model import RunModel, Status

    run = RunModel()
    run.set_status(Status.GENERATING)
    n = 10
    run.add_token_rows({"wall_ms": [781.25] * n, "read_mib": [2.0] * n}, n)
    run.set_cache_mib(resident_mib=4.98, budget_mib=5.0)
    rows = {label: text for label, text, _kind in summary_rows(run_summary(run))}
    assert rows["resident"] == "4.98 MiB (now)" and rows["budget"] == "5.00 MiB (now)"
    assert rows["tok/s (run so far)"] == "1.28"
    assert rows["tokens"] == "10 tok (so far)"
    assert sum("so far" in label + text for label, text in rows.items() if label.startswith("tok/s")) == 1


def test_at_a_row_of_an_earlier_turn_the_newest_turns_figures_say_whose_they_are():
    # paused at token 2 of a 3-turn session the panel said "prompt tokens missing", "prefill
    # missing", "load missing", "TTFT/turn missing": the source sent them, for its newest turn
    from bmoe_top.tui.model import RunModel, Status

    run = RunModel()
    run.set_status(Status.GENERATING)
    for _ in range(3):
        run.begin_turn()
        run.add_token_rows({"wall_ms": [10.0] * 5}, 5)
    run.update_summary({"n_prompt": 7, "prefill_s": 0.2, "ttft_s": 0.3, "load_s": 0.05, "budget_mib": 4.0})
    rows = {label: (text, kind) for label, text, kind in summary_rows(run_summary(run, stop=2))}
    assert rows["load"][0] == "50.0 ms" and rows["budget"][0].startswith("4.00 MiB")  # one load: the run's
    for label in ("prompt tokens", "prefill", "TTFT"):
        assert rows[label] == ("the newest turn's (End)", "missing"), (label, rows[label])
    newest = {label: text for label, text, _k in summary_rows(run_summary(run))}
    assert newest["prompt tokens"] == "7 tok" and newest["prefill"] == "200 ms"


def test_a_pending_alert_says_when_it_fires_on_the_runs_clock():
    # it said "fires at 30 s" (the rule's for:) beside "since 12.0 s", both read as times of the run
    from bmoe_top.tui.model.alerts import Active, AlertState, Rule, Severity
    from bmoe_top.tui.present.summary import alert_rows

    rule = Rule("TokSCollapse", "recent.tok_s_pct_first", "<", 50.0, 30.0, Severity.CRITICAL, "")
    [(name, text, kind)] = alert_rows([Active(rule, AlertState.PENDING, since=12.0, value=40.0)])
    assert name == "TokSCollapse" and text == "pending since 12.0 s (fires at 42.0 s)" and kind == ""


def test_at_a_row_of_a_finished_turn_the_panel_shows_that_turns_own_start_figures():
    # paused inside turn 2 the panel said "the newest turn's (End)" for the prompt, the prefill and
    # the TTFT although turn 2's end record holds its own
    from bmoe_top.tui.model import RunModel, Status

    run = RunModel()
    run.set_status(Status.GENERATING)
    for i in range(3):
        run.begin_turn()
        run.add_token_rows({"wall_ms": [10.0] * 5}, 5)
        if i < 2:
            run.finish_turn({"tokens": 5, "n_prompt": 10 + i, "prefill_s": 0.1 * (i + 1), "ttft_s": 0.5 + i})
    run.update_summary({"n_prompt": 11, "prefill_s": 0.2, "ttft_s": 1.5, "load_s": 0.05})
    doc = run_summary(run, stop=7)  # row 6: turn 2
    assert doc["at_turn"] == {"turn": 2, "keys": ["n_prompt", "prefill_s", "ttft_s"]}
    rows = {label: (text, kind) for label, text, kind in summary_rows(doc)}
    assert rows["prompt tokens"] == ("11 tok (turn 2)", "") and rows["prefill"] == ("200 ms (turn 2)", "")
    assert rows["TTFT"][0] == "1.50 s (turn 2)"
    assert rows["prefill tok/s"] == ("55.0 (turn 2)", "derived")
    first = {label: text for label, text, _k in summary_rows(run_summary(run, stop=3))}
    assert first["prompt tokens"] == "10 tok (turn 1)" and first["prefill"] == "100 ms (turn 1)"
    # the newest turn still runs: no end record of its own yet, the source's figures are turn 2's
    running = {label: text for label, text, _k in summary_rows(run_summary(run, stop=12))}
    assert running["prompt tokens"] == "the newest turn's (End)"
    assert "at_turn" not in run_summary(run, stop=12)


def test_a_routing_trace_alone_gives_its_decode_tokens_and_hit_share(tmp_path):
    # a replay of a route trace alone said "tokens missing", "cache hit not in this source" and
    # "token 128 / 0" beside a title at "token 128/128" and a heatmap of hit shares
    import numpy as np
    from helpers import synth

    from bmoe_top.parsers.route_trace import load_route_trace
    from bmoe_top.tui.present.summary import run_panel_rows

    data = synth.route_trace(64)
    path = tmp_path / "run.route.csv"
    path.write_bytes(data)
    trace = load_route_trace(data)
    decode = np.asarray(trace.phase) == 1
    want = 100.0 * float(np.asarray(trace.residency)[decode].sum()) / int(decode.sum())
    run = open_paths([str(path)])
    doc = run_summary(run)
    assert doc["derived"]["tokens"] == 64 and abs(doc["derived"]["cache_hit_pct"] - want) < 1e-9
    rows = {label: text for label, text, _k in summary_rows(doc)}
    assert rows["tokens"] == "64 tok (from routing)" and rows["cache hit"] == f"{want:.1f} % (from routing)"
    panel = {label: text for label, text, _k in run_panel_rows(run, 64)}
    assert panel["token"] == "64 / 64"
    at = {label: text for label, text, _k in summary_rows(run_summary(run, stop=10))}
    assert at["tokens"] == "10 tok"  # up to the viewed row (the heading says tokens 1-10)


def test_a_csv_without_its_summary_takes_the_budget_from_its_rows(tmp_path):
    # every row said cache_budget_mib=3000.0, the panel said "budget missing"
    path = tmp_path / "run.csv"
    path.write_text("# model=m.gguf cache_mb=3000\nstep,steps,wall_ms,cache_hit_pct,cache_budget_mib\n"
                    "1,3,10.0,50.0,3000.0\n2,3,11.0,60.0,3000.0\n3,3,12.0,70.0,3000.0\n")
    run = open_paths([str(path)])
    rows = {label: (text, kind) for label, text, kind in summary_rows(run_summary(run))}
    assert rows["budget"] == ("2.93 GiB (from token rows)", "derived"), rows["budget"]


def test_a_live_run_whose_rows_carry_both_reads_names_them_from_the_first_token():
    # the live panel said "read/token" until the turn's end record, then "payload/tok": the rows
    # of bmoe-run carry the page-aligned read (xfer_mb) beside the payload from the first token
    from bmoe_top.tui.model import RunModel, Status

    run = RunModel()
    run.set_status(Status.GENERATING)
    run.add_token_rows({"wall_ms": [5.0] * 4, "read_mib": [0.1] * 4, "xfer_mb": [0.15] * 4}, 4)
    labels = [label for label, _t, _k in summary_rows(run_summary(run))]
    assert "payload/tok" in labels and "read/token" not in labels


def test_a_turn_a_file_ends_inside_says_it_has_no_end_record():
    # a recording cut inside turn 2, paused there: "the newest turn's (End)", though End shows
    # turn 1's figures and turn 2 never gets an end record
    from bmoe_top.tui.model import RunModel, Status

    run = RunModel()
    run.set_status(Status.REPLAY)
    run.begin_turn()
    run.add_token_rows({"wall_ms": [10.0] * 5}, 5)
    run.finish_turn({"tokens": 5, "n_prompt": 10, "prefill_s": 0.1})
    run.update_summary({"n_prompt": 10, "prefill_s": 0.1})
    run.begin_turn()
    run.add_token_rows({"wall_ms": [10.0] * 5}, 5)
    rows = {label: text for label, text, _k in summary_rows(run_summary(run, stop=8))}
    assert rows["prompt tokens"] == "no end record (turn 2)" and rows["prefill"] == "no end record (turn 2)"
