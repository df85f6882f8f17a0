"""The PromQL rules: rate ranges (Grafana's $__rate_interval), steps under the point cap, label
matchers, per-layer aggregation."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bmoe_top.tui.fleet import queries as q
from bmoe_top.tui.fleet.table import Grid
from bmoe_top.tui.sources.prometheus import parse_duration


@pytest.mark.parametrize(("scrape", "step", "want"), [(1, 1, 4), (1, 5, 6), (15, 15, 60), (15, 120, 135), (1, 2.5, 4)])
def test_rate_interval_is_four_scrapes_or_step_plus_scrape(scrape, step, want):
    assert q.rate_interval(scrape, step) == want


# scrape intervals are Prometheus durations: whole milliseconds
@given(window=st.floats(1, 30 * 86400), scrape=st.integers(100, 600_000).map(lambda ms: ms / 1000),
       points=st.integers(2, 11000))
def test_step_keeps_series_under_the_cap_and_at_least_one_scrape(window, scrape, points):
    step = q.choose_step(window, scrape, points)
    assert step >= scrape
    grid = Grid.ending_at(1_800_000_000.0, window, step)
    assert grid.n <= max(points, 2)
    r = q.rate_interval(scrape, step)
    assert r >= 4 * scrape and r >= step + scrape


def test_step_for_the_default_window():
    assert q.choose_step(300, 1.0, 2000) == 1.0  # 300 points: one per scrape
    assert q.choose_step(86400, 1.0, 2000) == pytest.approx(43.222, abs=0.001)
    assert Grid.ending_at(1000.0, 86400, q.choose_step(86400, 1.0)).n <= 2000
    with pytest.raises(ValueError):
        q.choose_step(0, 1)


def test_matchers_from_a_selector():
    assert q.matchers('{job="bmoe"}') == '{job="bmoe"}'
    assert q.matchers('job="bmoe"') == '{job="bmoe"}'
    assert q.matchers("") == ""
    assert q.matchers("{}", 'instance="a:1"') == '{instance="a:1"}'
    assert q.matchers('{job="bmoe",}', 'instance="a:1"') == '{job="bmoe", instance="a:1"}'


@pytest.mark.parametrize("selector", ["", "{}", '{job="bmoe"}', 'job="bmoe"', '{job="bmoe",}', "{job='a'}",
                                      'job="a", instance=~"b.*"', '{job!~`a\\`}', '{job="a{b}"}', '{job="a\\"b"}'])
def test_a_selector_of_label_matchers_is_taken(selector):
    assert q.selector_problem(selector) is None


@pytest.mark.parametrize("selector, says", [
    ('{job="x', "a quoted value is not closed"), ('{job="x}', "a quoted value is not closed"),
    ("{job='x}", "a quoted value is not closed"), ('{job="x"', "its braces do not balance"),
    ('job="x"}', "its braces do not balance"), ('{job="x"}}', "its braces do not balance"),
    ('up{job="x"}', "it takes label matchers"), ("job", "it takes label matchers"),
    ('job="x" or vector(1)', "it takes label matchers"), ('job="a\nb"', "control character"),
    ('job="\x1b[31m"', "control character"),
])
def test_a_malformed_selector_says_why(selector, says):
    assert says in (q.selector_problem(selector) or "")


def test_label_values_are_escaped():
    assert q.label_matcher("instance", 'a"b\\c\nd') == 'instance="a\\"b\\\\c\\nd"'


def test_every_column_query_groups_by_instance_and_rates_over_the_interval():
    qs = q.column_queries('{job="bmoe"}', 6.0)
    assert set(qs) == {c.key for c in q.COLUMNS}
    for key, expr in qs.items():
        assert "by (job, instance)" in expr, key
        for name in re.findall(r"rate\(([^\[]+)\[([^\]]+)\]\)", expr):
            assert name[0].endswith('{job="bmoe"}')
            assert parse_duration(name[1]) == 6.0
        assert "$" not in expr
    assert "rate(" in qs["tok_s"] and "rate(" not in qs["budget_experts"]


def test_per_layer_queries_sum_per_layer_never_per_expert():
    qs = q.layer_queries("", 4.0, 'instance="a:1"')
    for expr in qs.values():
        assert expr.startswith("sum by (layer) (rate(") and "expert" not in expr
        assert '{instance="a:1"}[4s]' in expr


def test_totals_query_reads_counters_not_layers():
    expr = q.totals_query('{job="bmoe"}', 'instance="a:1"')
    assert expr.startswith("sum by (__name__) ({")
    assert '__name__!~"llamacpp:moe_cache_layer_.+"' in expr and 'instance="a:1"' in expr


def test_restarts_query_over_the_window():
    expr = q.restarts_query("", 300)
    assert "changes(process_start_time_seconds[5m])" in expr and "resets(llamacpp:n_decode_total[5m])" in expr


def test_range_durations_are_whole_milliseconds():
    expr = q.column_query(q.COLUMN_BY_KEY["tok_s"], "", 2.5004)
    assert "[2s501ms]" in expr
    assert not math.isnan(parse_duration("2s501ms"))


@pytest.mark.parametrize(("value", "want"), [(1.0, 1.0), (300 / 301, 1.0), (300 / 299, 1.0), (10 / 9, 1.0),
                                             (10 / 11, 1.0), (15.0, 15.0), (300 / 19, 15.0), (1.5, 1.5),
                                             (7.0, 7.0), (42.0, 42.0), (0.0, None), (math.inf, None),
                                             (math.nan, None)])
def test_interval_estimate_reads_round_numbers(value, want):
    assert q.interval_estimate(value) == want


def test_interval_query_counts_samples_of_targets_older_than_its_window():
    text = q.interval_query('{job="bmoe"}')
    parts = text.split(" or ")
    assert len(parts) == len(q.ESTIMATE_WINDOWS_S) and q.ESTIMATE_WINDOWS_S == tuple(sorted(q.ESTIMATE_WINDOWS_S,
                                                                                               reverse=True))
    assert parts[0] == 'max(300 / count_over_time(up{job="bmoe"}[300s]) and up{job="bmoe"} offset 300s)'


def test_grouping_labels_reach_every_aggregation():
    by = ("job", "instance", "prometheus")
    for text in (*q.column_queries("", 4.0, by=by).values(), q.up_query("", by=by),
                 q.restarts_query("", 60.0, by=by), q.exported_query("", 60.0, by=by)):
        assert "by (job, instance, prometheus" in text and "by (job, instance)" not in text, text
