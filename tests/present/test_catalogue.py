"""The catalogue of quantities (tui/model/quantities.py) and the views that read the run model
alone: every quantity is defined once with its unit, scope, definition and what it is not; labels
another scope shares name their scope; the formats (sizes, durations, points) are one each; the
metrics and audit panels take the model alone and show bytes as MiB."""

from __future__ import annotations

import inspect

import pytest
from helpers import REPO

from bmoe_top.parsers.prom import parse_exposition
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.fleet.queries import DERIVED
from bmoe_top.tui.model import RunModel
from bmoe_top.tui.model.quantities import CATALOGUE, SHARED_LABELS, Form, Scope, q
from bmoe_top.tui.present.audit import audit_document, audit_run_rows
from bmoe_top.tui.present.catalogue_doc import numbers_section, rewrite
from bmoe_top.tui.present.live import live_document
from bmoe_top.tui.present.metrics import metrics_document, metrics_panel_rows, status_parts
from bmoe_top.tui.present.numbers import diff, ms, show, size
from bmoe_top.tui.present.summary import run_panel_rows, run_summary, summary_rows
from bmoe_top.tui.sources.metrics_poll import MetricsPoller

SERVE_BODY = """\
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {tok}
# TYPE llamacpp:moe_cache_hits_total counter
llamacpp:moe_cache_hits_total {hits}
# TYPE llamacpp:moe_cache_misses_total counter
llamacpp:moe_cache_misses_total 40
# TYPE llamacpp:moe_cache_upload_bytes_total counter
llamacpp:moe_cache_upload_bytes_total {up}
# TYPE bmoe:timed_tokens_total counter
bmoe:timed_tokens_total {tok}
# TYPE bmoe:token_wall_seconds_total counter
bmoe:token_wall_seconds_total {wall}
"""


def serve_body(tok: int, hits: int, up: int, wall: float) -> str:
    return SERVE_BODY.format(tok=tok, hits=hits, up=up, wall=wall)


def scraped_model(*bodies: str) -> tuple[RunModel, MetricsPoller]:
    """A run model bound to a poller that took ``bodies`` as its scrapes (no network: ``apply``)."""
    poller = MetricsPoller("http://127.0.0.1:9/metrics", interval=1.0)
    run = bind(poller, RunModel()).run
    for i, body in enumerate(bodies):
        poller.apply(parse_exposition(body, float(i + 1)), wall_t=1000.0 + i)
    poller.client.close()
    return run, poller


def test_every_quantity_says_what_it_is_and_is_not():
    assert len(CATALOGUE) > 60
    for key, x in CATALOGUE.items():
        assert key == x.key and "." in key
        assert x.label and x.unit and x.field, key
        assert x.definition.endswith(".") and x.not_.endswith("."), key
        assert x.definition != x.not_, key
        assert isinstance(x.scope, Scope) and isinstance(x.form, Form)
        assert "{" not in x.scoped(), key  # every placeholder has a general word
    # the fleet's columns carry their PromQL here (bmoe_top.tui.fleet.queries reads it)
    assert all(x.promql and x.needs for x in CATALOGUE.values() if x.key.startswith("fleet.")
               and x.field != "stall_share")


def test_a_label_two_scopes_share_names_its_scope():
    assert "tok/s" in SHARED_LABELS and "hit" in SHARED_LABELS and "read" in SHARED_LABELS
    assert q("interval.tok_s").screen_label(interval="1.00 s") == "tok/s (all slots, 1.00 s)"
    assert q("fleet.tok_s").screen_label(window="10 s") == "tok/s (all slots, 10 s)"
    assert q("request.tok_s").screen_label() == "tok/s (this request)"
    assert q("summary.tok_s").screen_label(summary="since start") == "tok/s (since start)"
    assert q("since_load.hit_pct").screen_label() == "hit (since load)"
    # the labels of one screen differ whenever their scopes do
    labels = {x.screen_label(interval="1 s", window="10 s", summary="since start", n=32)
              for x in CATALOGUE.values() if x.label == "tok/s"}
    assert len(labels) == sum(1 for x in CATALOGUE.values() if x.label == "tok/s")


def test_one_format_per_kind():
    assert size(156_567_552) == "149 MiB" and size(3 * 1024 ** 3) == "3.00 GiB"
    assert show(q("since_start.upload_bytes"), 156_567_552) == "149 MiB"
    assert ms(245.0) == "245 ms" and ms(1234.0) == "1.23 s" and ms(0.412) == "0.412 ms"
    assert show(q("summary.compute_s_tok"), 0.0123) == "12.3 ms"
    assert show(q("fleet.wall_ms"), 12.34) == "12.3 ms/tok"
    assert show(q("summary.tokens"), 1024) == "1,024 tok" and show(q("summary.tok_s"), 133.4) == "133"
    assert show(q("interval.hit_pct"), 79.31) == "79.3 %" and show(q("summary.tok_s"), None) == "missing"
    # a percentage's difference is in points, never a relative change of a percentage
    assert diff(q("summary.cache_hit_pct"), 59.7, 95.2) == "+35.5 pt"
    assert diff(q("summary.tok_s"), 2.21, 7.13) == "+4.92 tok/s (+223 %)"


def test_metrics_panel_reads_bytes_as_mib():
    """``attach --metrics`` on a bmoe-run serve showed ``read 156,567,552 MiB`` since start (the
    byte counter printed as a count, labelled MiB) while the run panel said ``read 149 MiB``."""
    run, _ = scraped_model(serve_body(100, 200, 100_000_000, 1.0), serve_body(130, 260, 156_567_552, 1.3))
    rows = {label: value for label, value, _k in metrics_panel_rows(metrics_document(run))}
    assert rows["read (since start)"] == "149 MiB"
    assert not any("156,567,552" in v for v in rows.values())
    assert rows["tok/s (all slots, 1.00 s)"] == "30.0"
    assert rows["hit (since start)"] == "86.7 %"  # 260 / 300


def test_the_panels_take_the_model_alone():
    for fn in (metrics_document, audit_document, live_document):
        assert next(iter(inspect.signature(fn).parameters)) == "run", fn.__name__
    assert list(inspect.signature(audit_run_rows).parameters) == ["run", "selected"]


def test_the_scrape_status_detail_is_built_once():
    bad = serve_body(1, 1, 1, 0.1) + "this is not a metric line\n"
    run, poller = scraped_model('"' + bad.replace("\n", "\\n") + '"')
    health = run.scrape_health
    assert health is not None and health.json_quoted
    assert run.status_detail == poller.state.detail == health.detail
    assert run.status_detail.startswith("body was JSON-quoted; decoded once; 1 bad line (first: line ")
    line = "".join(t for t, _k in status_parts(metrics_document(run)))
    assert "scrapes 1 ok / 0 failed" in line


@pytest.mark.parametrize("stale", [True, False])
def test_scrape_health_ages_when_read(stale):
    run, _ = scraped_model(serve_body(1, 1, 1, 0.1))
    h = run.scrape_health
    assert h is not None and h.last_ok_mono is not None
    now = h.last_ok_mono + (7.0 if stale else 0.0)
    assert metrics_document(run, now=now)["stale_s"] == (7.0 if stale else 0.0)


def test_the_user_guide_table_is_the_catalogue(tmp_path):
    """docs/user-guide.md "Numbers" is generated from the catalogue: the page holds exactly what
    ``catalogue_doc`` writes (rewrite it: ``python -m bmoe_top.tui.present.catalogue_doc
    docs/user-guide.md``)."""
    page = REPO / "docs" / "user-guide.md"
    assert rewrite(page, check=True), "docs/user-guide.md's table of numbers differs from the catalogue"
    section = numbers_section()
    for x in CATALOGUE.values():
        assert f"| `{x.label}` | {x.unit.replace('|', chr(92) + '|')} |" in section, x.key
    # the check sees a difference
    copy = tmp_path / "guide.md"
    copy.write_text(page.read_text().replace(q("summary.tok_s").not_, "something else"))
    assert not rewrite(copy, check=True)
    assert rewrite(copy) is False and rewrite(copy, check=True)


def test_the_run_panel_before_the_newest_row_is_that_rows():
    """Viewed before its newest row, the run panel's numbers are the rows' up to it (heading
    ``tokens 1-10``): the source's end figures covering later rows are left out, the cache is as
    the viewed row says it, and the position does not repeat a live source's head."""
    run = RunModel()
    for i in range(40):
        run.add_token_row({"wall_ms": 10.0 + i, "read_mib": 1.0, "cache_hit_pct": float(i), "resident_mib": 1.0 + i})
    run.set_cache_mib(resident_mib=40.0, budget_mib=64.0)
    run.update_summary({"tokens": 40, "tok_s": 33.0, "n_prompt": 7})
    rows = {label: value for label, value, _k in run_panel_rows(run, 10)}
    text = [label for label, _v, kind in run_panel_rows(run, 10) if kind == "section"]
    assert "tokens 1-10" in text
    assert rows["tokens"] == "10 tok" and rows["cache hit"] == "9.0 %" and rows["resident"] == "10.0 MiB"
    assert rows["tok/s (tokens 1-10)"] == show(q("summary.tok_s"), 1000.0 / 14.5)  # mean wall of rows 1-10
    assert rows["prompt tokens"] == "7 tok"  # known by the first token of a one-turn run
    assert rows["token"] == "10 / 40"
    at_end = {label: value for label, value, _k in run_panel_rows(run, 40)}
    assert at_end["tokens"] == "40 tok" and at_end["tok/s (run)"] == "33.0"
    assert at_end["resident"] == "40.0 MiB (from token rows)"  # the newest the source said


def test_a_serial_run_has_no_stall_only_flash_wait():
    """A serial instance showed ``stall 20.9 %`` beside ``stall/token 0.000 s``: serial I/O has
    no stall, the share of wall spent on expert reads is flash wait (io there)."""
    run = RunModel()
    for _ in range(8):
        run.add_token_row({"wall_ms": 10.0, "io_ms": 2.09, "stall_ms": 0.0, "mgmt_ms": 0.1, "compute_ms": 7.81})
    s = run_summary(run)
    assert s["mode"] == "serial"
    rows = {label: value for label, value, _k in summary_rows(s)}
    assert rows["stall/token"] == "none (serial I/O)" and rows["flash io/token"].startswith("2.09 ms")
    share = q("fleet.stall_share")
    assert share.screen_label(window="4s") == "flash/wall (4s)" and "stall" not in share.label
    assert DERIVED["stall_share"][0] == "flash/wall %"


def test_every_quantity_is_shown_at_its_documented_precision():
    """``prefill tok/s`` showed 6.40 from a log that prints 6.4, and nothing said which precision
    a quantity is shown at: the user guide's table says it for every quantity, with examples the
    formatter itself makes, and a value read from a file is shown at that precision."""
    from bmoe_top.tui.present.numbers import FORM_RULES, shown_as

    assert set(FORM_RULES) == set(Form)
    table = numbers_section()
    assert "| shown as |" in table
    for x in CATALOGUE.values():
        assert shown_as(x) in table, x.key
    prefill = q("summary.prefill_tps")
    assert shown_as(prefill).startswith("3 significant digits") and "`6.40`" in shown_as(prefill)


def test_a_rate_read_from_a_log_is_shown_at_the_catalogues_precision(tmp_path):
    from bmoe_top.tui.feed.files import open_paths

    log = tmp_path / "run.log"
    log.write_text("generation: 256 tokens, 0.621 s/token (1.61 tok/s)\n"
                   "prefill: 42 tokens, 6.525 s (6.4 tok/s) | model load 24.419 s | TTFT 30.944 s\n")
    s = run_summary(open_paths([str(log)]))
    assert s["prefill_tps"] == 6.4 and s["prefill_s"] == 6.525  # the JSON: the value as read
    rows = {label: text for label, text, _k in summary_rows(s)}
    assert rows["prefill tok/s"] == show(q("summary.prefill_tps"), 6.4) == "6.40"
    assert rows["prefill"] == show(q("summary.prefill_s"), 6.525) == "6.53 s"


def test_the_metrics_panels_ms_per_token_reads_as_the_breakdowns_readout():
    """The panel showed ``wall 10.00 ms`` beside the breakdown's ``wall 10.0 ms`` for the same
    interval: one duration formatter for both."""
    run, _ = scraped_model(serve_body(100, 200, 100_000_000, 1.0), serve_body(130, 260, 156_567_552, 1.3))
    rows = {label: value for label, value, _k in metrics_panel_rows(metrics_document(run))}
    assert rows["wall"] == ms(10.0) == "10.0 ms"  # 0.3 s over 30 timed tokens
