"""End-of-run text lines (every documented form plus those real runs print) and canonical keys."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bmoe_top.parsers.summary_lines import (
    CANONICAL_KEYS,
    SummaryLine,
    canonical_summary,
    looks_like_summary,
    parse_summary_line,
)


@pytest.mark.parametrize("line,kind,values", [
    ("=== answer ===", "banner", {"name": "answer"}),
    ("=== perf ===", "banner", {"name": "perf"}),
    ("generation: 256 tokens, 0.317 s/token (3.152 tok/s)", "generation",
     {"tokens": 256, "s_per_tok": 0.317, "tok_s": 3.152}),
    ("prefill: 42 tokens, 6.525 s (6.4 tok/s) | model load 24.419 s | TTFT 30.944 s", "prefill",
     {"n_prompt": 42, "prefill_s": 6.525, "prefill_tps": 6.4, "load_s": 24.419, "ttft_s": 30.944}),
    ("prefill: 3 tokens, 0.300 s (10.0 tok/s)", "prefill",
     {"n_prompt": 3, "prefill_s": 0.3, "prefill_tps": 10.0}),
    ("compute: 82.5% CPU occupancy (0.5831 cpu-s/token over 4 threads), 18.26 major faults/token",
     "compute", {"cpu_occupancy_pct": 82.5, "cpu_s/tok": 0.5831, "threads": 4, "majflt/tok": 18.26}),
    # moe-stream: contract form (no cache mgmt), newer form (cache mgmt), --overlap stall_s/tok=
    ("moe-stream: read 57490.8 MiB (224.57 MiB/token), decode 0.251 s/token (compute 0.193 + "
     "flash I/O 0.300 s/token, 748 MiB/s)", "moe-stream",
     {"read_mib": 57490.8, "read_mib_per_tok": 224.57, "s_per_tok": 0.251, "compute_s_tok": 0.193,
      "io_s_tok": 0.3, "read_mib_s": 748}),
    ("moe-stream: read 93562.6 MiB (365.48 MiB/token), decode 0.317 s/token (compute 0.138 + cache "
     "mgmt 0.046 + flash I/O 0.535 s/token, 683 MiB/s)", "moe-stream",
     {"read_mib": 93562.6, "read_mib_per_tok": 365.48, "s_per_tok": 0.317, "compute_s_tok": 0.138,
      "mgmt_s_tok": 0.046, "io_s_tok": 0.535, "read_mib_s": 683}),
    ("moe-stream: read 10.0 MiB (1.00 MiB/token), decode 0.500 s/token (compute 0.200 + flash I/O "
     "0.300 s/token, 33 MiB/s) stall_s/tok=0.040", "moe-stream",
     {"read_mib": 10.0, "read_mib_per_tok": 1.0, "s_per_tok": 0.5, "compute_s_tok": 0.2,
      "io_s_tok": 0.3, "read_mib_s": 33, "stall_s_tok": 0.04}),
    ("moe-stream: read 10.0 MiB (1.00 MiB/token), decode 0.500 s/token (compute 0.200 + cache mgmt "
     "0.010 + flash I/O 0.300 s/token, 33 MiB/s), stall_s/tok=0.040", "moe-stream",
     {"read_mib": 10.0, "read_mib_per_tok": 1.0, "s_per_tok": 0.5, "compute_s_tok": 0.2,
      "mgmt_s_tok": 0.01, "io_s_tok": 0.3, "read_mib_s": 33, "stall_s_tok": 0.04}),
    # moe-cache: every form
    ("moe-cache: 58.0% hit, resident 1996.4 MiB", "moe-cache",
     {"cache_hit_pct": 58.0, "resident_mib": 1996.4}),
    ("moe-cache: 74.9% hit, resident 3997.7 MiB, budget 4000 MiB (auto)", "moe-cache",
     {"cache_hit_pct": 74.9, "resident_mib": 3997.7, "budget_mib": 4000}),
    ("moe-cache: 74.9% hit, resident 3997.7 MiB, budget 4000 MiB (auto, resized 3×)", "moe-cache",
     {"cache_hit_pct": 74.9, "resident_mib": 3997.7, "budget_mib": 4000, "cache_resizes": 3}),
    ("moe-cache: 120 evictions, 45 re-reads (0.2/token) — bytes the cache had already paid for once",
     "moe-cache", {"cache_evictions": 120, "cache_rereads": 45, "cache_rereads/tok": 0.2}),
    ("moe-cache: off", "moe-cache", {"cache_hit_pct": -1.0}),
    ("moe-prefetch: 812.5 MiB speculative, 120/300 experts useful (40%)", "moe-prefetch",
     {"prefetch_mib": 812.5, "prefetch_useful": 120, "prefetch_total": 300, "prefetch_useful_pct": 40}),
    ("moe-prefetch: 8.0 MiB speculative, 1/4 experts useful (25%) [route-ahead]", "moe-prefetch",
     {"prefetch_mib": 8.0, "prefetch_useful": 1, "prefetch_total": 4, "prefetch_useful_pct": 25,
      "prefetch_mode": "route-ahead"}),
    ("moe-spec-gate: 71% router prediction recall", "moe-spec-gate", {"spec_recall_pct": 71}),
    ("moe-spec-gate: 38% router prediction recall (auto-disabled below 50%)", "moe-spec-gate",
     {"spec_recall_pct": 38, "spec_auto_disabled_below_pct": 50}),
    ("moe-overlap: stall 0.133 s/token (flash reads overlapped with FFN compute)", "moe-overlap",
     {"stall_s_tok": 0.133}),
    ("moe-waits: drain 0.004 s/token (inside compute), adopt 0.001 s/token (inside mgmt)",
     "moe-waits", {"drain_s/tok": 0.004, "adopt_s/tok": 0.001}),
    ("moe-drop: 66582/469760 routed experts dropped (14.2%), threshold 0.75 x uniform", "moe-drop",
     {"experts_dropped": 66582, "experts_routed": 469760, "experts_dropped_pct": 14.2,
      "drop_threshold": 0.75}),
    ("mode: expert streaming, cache 3000 MiB, dense anon, overlap", "mode",
     {"mode": "expert streaming, cache 3000 MiB, dense anon, overlap"}),
    ("peak_rss_kb=5949324", "sidecar", {"peak_rss_kb": 5949324}),
    ("dense_weights=anon", "sidecar", {"dense_weights": "anon"}),
    ("\ufeffgeneration: 1 tokens, 1.000 s/token (1.000 tok/s)\r", "generation",
     {"tokens": 1, "s_per_tok": 1.0, "tok_s": 1.0}),
])
def test_every_form(line, kind, values):
    r = parse_summary_line(line)
    assert isinstance(r, SummaryLine) and r.kind == kind, r
    if any(isinstance(v, str) for v in values.values()):
        assert r.values == values
    else:
        assert r.values == pytest.approx(values)


@pytest.mark.parametrize("line", [
    "generation: a lot of tokens", "moe-stream: read everything", "moe-teleport: 3 experts",
    "moe-cache: 5 caches  hits=1 misses=2", "prefill: done", "compute: busy",
])
def test_summary_like_but_unknown_is_unparsed_not_lost(line):
    r = parse_summary_line(line)
    assert r is not None and r.kind == "unparsed"
    assert r.values["text"] == line and r.values["kind"] == line.split(":")[0]
    assert looks_like_summary(line)


@pytest.mark.parametrize("line", ["", "just text", "Generation: 5 tokens", "a = b",
                                  "x=1 y=2", "the moe-cache: is warm"])
def test_ordinary_text_is_none(line):
    assert parse_summary_line(line) is None


def test_canonical_summary_maps_csv_keys_and_keeps_others():
    raw = {"tokens": "1469", "s/tok": "0.254", "tok/s": "3.938", "read_MiB": "166692.6",
           "io_s": "278.39", "compute_s/tok": "0.195", "io_s/tok": "0.190", "cache_hit_pct": "77.2",
           "n_prompt": "19", "load_s": "38.755", "prefill_s": "7.228", "prefill_tps": "2.63",
           "stall_s/tok": "0.041", "mgmt_s/tok": "0.018", "cache_resident_MiB": "2998.5",
           "cache_budget_MiB": "3000.0", "spec_read_MiB": "0.0", "spec_experts": "0",
           "spec_useful": "0", "majflt/tok": "13.73", "junk": "n/a"}
    s = canonical_summary(raw)
    assert s["tokens"] == 1469 and s["tok_s"] == 3.938 and s["s_per_tok"] == 0.254
    assert s["resident_mib"] == 2998.5 and s["budget_mib"] == 3000.0
    assert s["prefetch_mib"] == 0.0 and s["prefetch_total"] == 0 and s["prefetch_useful"] == 0
    assert s["majflt/tok"] == 13.73 and "junk" not in s
    # derived exactly as the runtime prints them
    assert s["ttft_s"] == pytest.approx(38.755 + 7.228)
    assert s["read_mib_per_tok"] == pytest.approx(166692.6 / 1469)
    assert s["read_mib_s"] == pytest.approx(166692.6 / 278.39)
    assert set(CANONICAL_KEYS) - set(s) == {"spec_recall_pct"}  # not in this CSV: missing, not 0


def test_no_cache_keeps_minus_one_and_missing_stays_missing():
    s = canonical_summary({"cache_hit_pct": "-1.0", "tokens": "4"})
    assert s == {"cache_hit_pct": -1.0, "tokens": 4.0}


@pytest.mark.parametrize("line,kind,values", [
    ("generation: 64 tokens in 20.29 s, 3.15 tok/s", "generation",
     {"tokens": 64, "generation_s": 20.29, "tok_s": 3.15, "s_per_tok": 20.29 / 64}),
    ("moe-stream: read 1843.2 MiB in 4.1 s (449.6 MiB/s)", "moe-stream",
     {"read_mib": 1843.2, "io_s": 4.1, "read_mib_s": 449.6}),
    ("prefill: 12 tokens in 1.5 s (8.0 tok/s)", "prefill", {"n_prompt": 12, "prefill_s": 1.5, "prefill_tps": 8}),
    ("moe-cache: hit rate 55.5%, resident 100 MiB", "moe-cache", {"cache_hit_pct": 55.5, "resident_mib": 100}),
    ("moe-overlap: stall 0.2 s/tok", "moe-overlap", {"stall_s_tok": 0.2}),
])
def test_drifted_forms_give_the_numbers_they_carry(line, kind, values):
    sl = parse_summary_line(line)
    assert sl.kind == kind and not sl.exact and sl.raw == line
    assert sl.values == pytest.approx(values)


@pytest.mark.parametrize("line", ["moe-stream: something new entirely", "generation: done",
                                  "moe-frobnicate: 12 widgets", "generation: 5 tokens were fine"])
def test_unrecognised_summary_lines_are_returned_raw_and_marked_unparsed(line):
    sl = parse_summary_line(line)
    assert sl.kind == "unparsed" and sl.values["text"] == line and sl.raw == line


def test_transcript_keeps_drifted_numbers_and_lists_unparsed_lines():
    from bmoe_top.parsers.transcript import parse_transcript
    tr = parse_transcript(b"answer text\ngeneration: 64 tokens in 20.29 s, 3.15 tok/s\n"
                          b"moe-stream: read 1843.2 MiB in 4.1 s (449.6 MiB/s)\nmoe-newthing: to be decided\n")
    assert tr.summary["tokens"] == 64 and tr.summary["tok_s"] == 3.15 and tr.summary["read_mib_s"] == 449.6
    assert tr.summary["read_mib_per_tok"] == pytest.approx(1843.2 / 64)
    assert tr.unparsed == [(4, "moe-newthing: to be decided")]
    assert tr.answer == "answer text"


# bmoe-cli's lines as its source prints them (BigMoeOnEdge src/cli: --route-ahead, --predict-log,
# --substitute, row-gathered tables)
BMOE_CLI_TAIL = "".join(line + "\n" for line in [
    'generation: 64 tokens, 0.317 s/token (3.152 tok/s)',
    'moe-substitute: 12/345 reranked slots went to a resident expert (3.5%), margin 0.10 x score range',
    'moe-rows: 120 MiB of row-gathered table(s) off the resident set, 3.5 MiB resident, 4096 rows'
    ' gathered, 77 reads (1.2 MiB)',
    "moe-rows: 3 FAILED reads \u2014 this run's output is not trustworthy",
    'moe-route-ahead: 1 layers early \u2014 1234 routings committed, 56 passed through; committed'
    ' selection agreed with the router on 84.7% of slots',
    'moe-route-ahead: prediction 3.2 ms/token of worker CPU (4567 GEMVs, 0.012 ms each) + 0.4 ms/token'
    ' issuing the reads + 0.1 ms/token watchdog, both on the eval thread',
    'moe-predict: stale-gate 78.8% of routed slots (31.2% whole routings) | prev-token 55.0% (12.0%) |'
    ' fresh-gate control 97.0% (90.0%)',
    'moe-predict: stale-2 (two layers early) 70.1% of routed slots (20.0% whole routings)',
    'moe-predict: scored \u2014 stale-gate 4000 routings/32000 slots, prev-token 4100/32800, control'
    ' 4200/33600; 48 routings the stale-gate could not rank',
    "moe-predict: the control is below 100%, so this model's expert selection is not raw-logit",
    '             ranking (an added selection bias, or group-limited routing). The stale-gate',
    "             figure understates the method by about the control's own gap.",
    '  layer   stale    prev   ctrl   routings',
    '      0       -    40.0  100.0          0',
    '      1    80.0    60.0  100.0        500',
])


def test_bmoe_cli_route_ahead_predict_substitute_and_rows_lines_are_read():
    from bmoe_top.parsers.transcript import parse_transcript

    tr = parse_transcript(BMOE_CLI_TAIL.encode())
    assert tr.problems == [] and tr.unparsed == []
    kinds = [sl.kind for _n, sl in tr.summary_lines]
    assert kinds == ["generation", "moe-substitute", "moe-rows", "moe-rows", "moe-route-ahead", "moe-route-ahead",
                     "moe-predict", "moe-predict", "moe-predict", "moe-predict"]
    assert tr.summary == pytest.approx({
        "tokens": 64, "s_per_tok": 0.317, "tok_s": 3.152,
        "experts_substituted": 12, "experts_reranked": 345, "experts_substituted_pct": 3.5, "substitute_margin": 0.1,
        "rows_table_mib": 120, "rows_resident_mib": 3.5, "rows_gathered": 4096, "rows_reads": 77,
        "rows_read_mib": 1.2, "rows_failed_reads": 3,
        "route_ahead_layers": 1, "route_ahead_committed": 1234, "route_ahead_passed": 56,
        "route_ahead_agree_pct": 84.7, "route_ahead_cpu_ms/tok": 3.2, "route_ahead_gemvs": 4567,
        "route_ahead_gemv_ms": 0.012, "route_ahead_issue_ms/tok": 0.4, "route_ahead_watchdog_ms/tok": 0.1,
        "predict_stale_pct": 78.8, "predict_stale_exact_pct": 31.2, "predict_prev_pct": 55.0,
        "predict_prev_exact_pct": 12.0, "predict_control_pct": 97.0, "predict_control_exact_pct": 90.0,
        "predict_stale2_pct": 70.1, "predict_stale2_exact_pct": 20.0,
        "predict_stale_routings": 4000, "predict_stale_slots": 32000, "predict_prev_routings": 4100,
        "predict_prev_slots": 32800, "predict_control_routings": 4200, "predict_control_slots": 33600,
        "predict_unscored": 48,
    })
    # an ASCII copy of the log (the em dash as --) reads the same
    ascii_tail = BMOE_CLI_TAIL.replace("\u2014", "--")
    assert parse_transcript(ascii_tail.encode()).summary == tr.summary



@pytest.mark.parametrize("line,values", [
    # a C runtime under a de_DE / fr_FR LC_NUMERIC: printf's %.3f writes a decimal comma
    ("generation: 64 tokens, 0,317 s/token (3,152 tok/s)", {"tokens": 64, "s_per_tok": 0.317, "tok_s": 3.152}),
    ("prefill: 42 tokens, 6,525 s (6,4 tok/s) | model load 24,419 s | TTFT 30,944 s",
     {"n_prompt": 42, "prefill_s": 6.525, "prefill_tps": 6.4, "load_s": 24.419, "ttft_s": 30.944}),
    ("moe-cache: 77,2% hit, resident 2998,5 MiB", {"cache_hit_pct": 77.2, "resident_mib": 2998.5}),
    # de_DE groups thousands with '.' beside its decimal comma
    ("generation: 1.234 tokens, 0,317 s/token (3,152 tok/s)", {"tokens": 1234, "s_per_tok": 0.317, "tok_s": 3.152}),
    # thousands separators beside a decimal point
    ("generation: 1,234 tokens, 0.317 s/token (3.152 tok/s)", {"tokens": 1234, "s_per_tok": 0.317, "tok_s": 3.152}),
    ("generation: 1,234,567 tokens, 0.317 s/token (3.152 tok/s)",
     {"tokens": 1234567, "s_per_tok": 0.317, "tok_s": 3.152}),
])
def test_decimal_commas_and_thousands_separators_are_read_as_what_they_are(line, values):
    sl = parse_summary_line(line)
    assert sl.values == pytest.approx(values) and sl.raw == line


@pytest.mark.parametrize("line,why", [
    ("generation: 64 tokens, 3,152 s/token", "3,152 could be 3.152 (a decimal comma) or 3152 (thousands)"),
    ("generation: 64 tokens, 0,317 s/token (3.15 tok/s)",
     "0,317 has a decimal comma and 3.15 a decimal point: the numbers cannot be read for sure"),
    ("generation: 64 tokens, 0,317 s/token (1.23.4 tok/s)", "1.23.4 does not fit the line's decimal commas"),
])
def test_a_comma_that_could_be_either_is_refused_never_guessed(line, why):
    sl = parse_summary_line(line)
    assert sl.kind == "unparsed" and why in sl.values["why"] and sl.values["text"] == line


def test_a_refused_line_is_a_problem_that_says_why():
    from bmoe_top.parsers.transcript import parse_transcript

    tr = parse_transcript(b"generation: 64 tokens, 3,152 s/token\n")
    assert "tok_s" not in tr.summary and "s_per_tok" not in tr.summary
    (p,) = tr.problems
    assert p.reason == "'generation:' end-of-run line not read: 3,152 could be 3.152 (a decimal comma) or 3152 " \
                       "(thousands): not read"


@given(n=st.integers(1, 10**7), a=st.floats(0.0005, 999.0), b=st.floats(0.0005, 9999.0),
       comma=st.booleans(), group=st.booleans())
@settings(max_examples=300, deadline=None)
@example(n=64, a=0.317, b=3.152, comma=True, group=False)  # the reported line
def test_a_generation_line_is_read_right_or_not_at_all(n, a, b, comma, group):
    # as a locale writes them: en_US groups with ',' beside a decimal point, de_DE with '.' beside
    # a decimal comma
    sa, sb = f"{a:.3f}", f"{b:.3f}"
    sn = f"{n:,}" if group else str(n)
    if comma:
        sa, sb, sn = sa.replace(".", ","), sb.replace(".", ","), sn.replace(",", ".")
    sl = parse_summary_line(f"generation: {sn} tokens, {sa} s/token ({sb} tok/s)")
    for key, want in (("tokens", n), ("s_per_tok", float(f"{a:.3f}")), ("tok_s", float(f"{b:.3f}"))):
        got = sl.values.get(key)
        assert got is None or got == want, (key, got, want)
