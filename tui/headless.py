"""The headless twins of the screens (``--once``, ``--summary``): a source bound to a run model with
``bind`` exactly as the screens bind it, run to a stop condition, then the documents of
``bmoe_top.tui.present``. For scripts and CI; docs/user-guide.md "Headless"."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bmoe_top.parsers.limits import MAX_METRICS_BODY_MB
from bmoe_top.tui.feed.files import open_replay
from bmoe_top.tui.fleet.drill import DrillDown
from bmoe_top.tui.fleet.session import TABLE_POINTS, FleetSession
from bmoe_top.tui.fleet.table import FleetTable
from bmoe_top.tui.model import RunModel, Status
from bmoe_top.tui.present.fleet import FleetDocument, fleet_document
from bmoe_top.tui.sources.prometheus import PromError, PrometheusClient

if TYPE_CHECKING:
    from bmoe_top.tui.sources.child_session import ChildSession
    from bmoe_top.tui.sources.recorder import Recorder
    from bmoe_top.tui.sources.session_socket import SessionSocketClient

# The live twins import their sources and documents when called: ``replay --summary`` (a file
# read in a fresh process) loads none of the live, metrics or socket code.

__all__ = ["Outcome", "audit_once", "exit_code", "fleet_once", "launch_once", "memory_once", "metrics_once", "replay",
           "session_once"]


@dataclass(slots=True)
class Outcome:
    """What a headless live command ends with: the JSON ``document``, the ``text`` lines for a
    person, the process ``status`` (0 ok, 1 failed) and ``error``, one line for stderr (or None)."""

    document: dict[str, Any]
    text: list[str]
    status: int
    error: str | None = None


def replay(paths: Sequence[str], allow_mixed: bool = False,
           keep_first: bool = False) -> tuple[RunModel, list[tuple[str, str]]]:
    """Every path into one run model, and ``(path, why)`` for each file that is not a recorded run
    (``ReplayError`` for a path that cannot be read, ``MixedRunsError`` for files of different
    runs unless ``allow_mixed``; with ``keep_first`` the first file's run is loaded and the files
    of other runs are alerts)."""
    return open_replay(paths, allow_mixed=allow_mixed, keep_first=keep_first)


def launch_once(source: ChildSession, prompt: str, n_predict: int | None, ready_timeout: float,
                turn_timeout: float) -> Outcome:
    """One generation on a child session, then the numbers the live screen shows: ``BMOE_READY``
    within ``ready_timeout`` s of the start, the turn's end within ``turn_timeout`` s of its
    request (else a failure that says what the child's stdout gave). The source is closed before
    returning."""
    from bmoe_top.tui.feed.bind import bind
    from bmoe_top.tui.present.live import failure_document, live_document
    from bmoe_top.tui.sources.events import FINAL_STATES, LiveState

    binding = bind(source)
    run = binding.run
    source.start()

    def fail(msg: str) -> Outcome:
        binding.publish()
        return Outcome(failure_document(msg, run), [], 1, msg)

    try:
        if source.state == LiveState.FAILED:
            return fail(source.status().message)
        if not source.wait_state({LiveState.READY, *FINAL_STATES}, ready_timeout):
            source.expire_ready(ready_timeout)  # the watchdog's timer may not have run out yet: said once, now
            return fail(f"no BMOE_READY from {source.argv[0]} after {ready_timeout:g} s (--ready-timeout): "
                        + source.stdout_seen())
        if source.state != LiveState.READY:
            return fail(source.status().message)
        t0 = time.monotonic()
        lines_before = source.status().lines
        rid = source.generate(prompt, n_predict, clear_kv=True)
        while True:  # the turn's end (DONE or a rejection), or the child's end
            st = source.status()
            if st.turns_done >= 1 or st.state in FINAL_STATES:
                break
            if st.last_error is not None and st.state == LiveState.READY:
                break
            if time.monotonic() - t0 > turn_timeout:
                return fail(f"no BMOE_DONE within {turn_timeout:g} s of the request (--turn-timeout): "
                            + source.stdout_seen(lines_before))
            time.sleep(0.02)
        wall = time.monotonic() - t0
    finally:
        source.close()
    st = source.status()
    binding.publish()
    doc = live_document(run, rid, wall_s=round(wall, 3))
    done = doc["live"]["turns"]
    ok = bool(done) and st.state == LiveState.EXITED and st.last_error is None
    text = [f"live: {st.message}; turns {len(done)}; error: {st.last_error or 'none'}"]
    return Outcome(doc, text, 0 if ok else 1)


def session_once(source: SessionSocketClient, prompt: str | None, n_predict: int | None,
                 timeout: float) -> Outcome:
    """Connect, take the replayed state (and run one prompt), then the numbers the live screen
    shows. The source is closed (detached) before returning."""
    from bmoe_top.tui.feed.bind import bind
    from bmoe_top.tui.present.live import failure_document, live_document
    from bmoe_top.tui.sources.events import LiveState

    binding = bind(source)
    run = binding.run
    source.start()
    rid = None
    try:
        if not source.wait_state({LiveState.READY, LiveState.GENERATING}, timeout):
            st = source.status()
            after = f" after {timeout:g} s" if timeout > 0 else ""
            msg = f"no session on {source.path}{after} ({st.message})"
            binding.publish()
            return Outcome(failure_document(msg, run), [], 1, msg)
        time.sleep(0.2)  # let the replay of the current state arrive
        if prompt is not None:
            source.wait_state(LiveState.READY, timeout)
            before = source.status().turns_done
            rid = source.generate(prompt, n_predict)
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                st = source.status()
                if (st.turns_done > before or (st.last_error and st.state == LiveState.READY)
                        or st.state == LiveState.DISCONNECTED):
                    break
                time.sleep(0.02)
        st = source.status()
        binding.publish()
        doc = live_document(run, rid)
    finally:
        source.close()
    ok = st.state in (LiveState.READY, LiveState.GENERATING) and not (prompt and st.last_error)
    return Outcome(doc, [f"live: {st.message}; turns {st.turns_done}"], 0 if ok else 1)


def metrics_once(url: str, api_key: str | None = None, timeout: float = 5.0, interval: float = 0.0,
                 slots: bool = False, max_body_mb: float = MAX_METRICS_BODY_MB) -> dict[str, Any]:
    """One scrape of ``url`` (``interval`` > 0: two scrapes that far apart, so rates are filled;
    ``timeout``: the deadline of each request, seconds; ``max_body_mb``: the cap on a body, MiB;
    ``slots``: also read ``/slots``):
    :func:`~bmoe_top.tui.present.metrics.metrics_document`. Never raises for network, HTTP or
    format trouble: ``status`` says what went wrong."""
    from bmoe_top.tui.feed.bind import bind
    from bmoe_top.tui.present.metrics import metrics_document
    from bmoe_top.tui.sources.metrics_poll import MetricsPoller

    poller = MetricsPoller(url, interval=max(interval, 0.05), timeout=timeout, api_key=api_key, slots=slots,
                           max_body_mb=max_body_mb)
    binding = bind(poller)
    try:
        poller.scrape_once()
        if interval > 0 and binding.run.status == Status.OK:
            time.sleep(interval)
            poller.scrape_once()
    finally:
        poller.client.close()
    return metrics_document(binding.run)


def audit_once(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The audit log at ``path`` read to its current end (complete lines only):
    :func:`~bmoe_top.tui.present.audit.audit_document`."""
    from bmoe_top.tui.feed.bind import bind
    from bmoe_top.tui.present.audit import audit_document
    from bmoe_top.tui.sources.tail import FileTail

    tail = FileTail(path)
    binding = bind(tail)
    tail.read_to_end()
    return audit_document(binding.run)


def fleet_once(url: str, selector: str = "", window_s: float = 300.0, instance: str | None = None,
               job: str | None = None, api_key: str | None = None, timeout: float = 10.0,
               points: int = TABLE_POINTS, at: float | None = None,
               labels: Mapping[str, str] | None = None) -> FleetDocument:
    """One refresh of the fleet table through the Prometheus at ``url`` (the instances
    ``selector`` picks, at ``at``; ``None`` = now), and with ``instance`` (of ``job``, with
    these other ``labels``) its drill-down:
    :func:`~bmoe_top.tui.present.fleet.fleet_document` (docs/fleet.md "Headless"). Never raises
    for Prometheus trouble: ``status`` (and ``drill_error``) say what went wrong; ``ValueError``
    only for a URL or window that cannot be used at all."""
    table: FleetTable | None = None
    drill: DrillDown | None = None
    error = drill_error = None
    with PrometheusClient(url, timeout=timeout, api_key=api_key) as client:
        session = FleetSession(client, selector=selector, window_s=window_s, points=points)
        try:
            table = session.refresh(at)
        except PromError as exc:
            error = exc
        if instance is not None and table is not None:
            try:
                drill = session.drill(instance, job=job, at=table.at, labels=labels)
            except PromError as exc:
                drill_error = exc
    return fleet_document(prometheus=url, selector=selector, window_s=window_s, table=table, error=error,
                          drill=drill, drill_error=drill_error, instance=instance)


def exit_code(doc: Mapping[str, Any]) -> int:
    """0 when the source answered (``ok``) and, for a fleet document asked for an instance, its
    drill-down came back; 1 otherwise: for ``--once`` in scripts."""
    if doc.get("status") != Status.OK:
        return 1
    return 1 if doc.get("instance") is not None and doc.get("drill") is None else 0


def memory_once(pid: int | None, gguf: str | None, metrics: str | None = None, interval: float = 0.0,
                method: str = "auto", api_key: str | None = None, timeout: float = 5.0,
                recorder: Recorder | None = None) -> Outcome:
    """One reading of the memory watcher (``interval`` > 0: two readings that far apart, so the
    rates and churn are filled): :func:`~bmoe_top.tui.present.memory.memory_document`. Status 0
    when residency or the process could be read, 1 otherwise (``error``: the one line why)."""
    from bmoe_top.tui.feed.memory import bind_memory
    from bmoe_top.tui.present.memory import memory_document, memory_lines
    from bmoe_top.tui.sources.memory import MemoryWatcher
    from bmoe_top.tui.sources.metrics_poll import MetricsPoller

    poller = MetricsPoller(metrics, interval=max(interval, 0.05), timeout=timeout, api_key=api_key) \
        if metrics else None
    watcher = MemoryWatcher(pid=pid, gguf=gguf, interval=max(interval, 0.05), poller=poller, method=method,
                            recorder=recorder)
    model = bind_memory(watcher)
    try:
        watcher.sample_once()
        if interval > 0 and model.state not in ("error",):
            time.sleep(interval)
            watcher.sample_once()
    finally:
        watcher.close()
        if poller is not None:
            poller.client.close()
    doc = memory_document(model)
    ok = model.residency is not None or model.figures_at is not None
    error = None if ok else (model.detail or "nothing could be read")
    return Outcome(doc, memory_lines(model), 0 if ok else 1, error)
