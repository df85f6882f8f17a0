"""``bmoe-top`` command line: every sub-command.

    bmoe-top                                   the live demo: the bundled runtime on its demo model
    bmoe-top --version                         the version
    bmoe-top replay PATH...                    replay recorded runs (any format, sniffed from content)
    bmoe-top replay --summary [--json] PATH    print the run summary without the UI
    bmoe-top launch [-m MODEL] [-n N] [--record FILE] [-- CMD...]    run a session-protocol program live
    bmoe-top launch --once --json -p PROMPT [-n N] [-- CMD...]      headless: one generation, its numbers
    bmoe-top attach --session PATH [-n N] [--record FILE]           a running session, live
    bmoe-top attach --session PATH --once --json [-p PROMPT]        headless: the session's state (+ one prompt)
    bmoe-top attach --metrics URL | --audit FILE [--once --json]     /metrics or an audit log, live or headless
    bmoe-top attach --pid PID | --gguf FILE [--metrics URL] [--once --json]
                                                                    the page cache as a tier: any process's GGUF
    bmoe-top play FILE [--speed X] [--turn-by-turn]                 a recording on the live screen, paced
    bmoe-top fleet --prometheus URL [--selector S] [--window 5m] [--instance X]     many runtimes through Prometheus
    bmoe-top fleet --prometheus URL ... --once --json [--instance X]    headless: the table (and a drill-down)
    bmoe-top fleet --rules [--selector S]                               the alert rules as a Prometheus rules file
    bmoe-top compare A B [C ...] | A1,A2 vs B1,B2 | --arm NAME=FILES ...  [--json | --md | --csv]
    bmoe-top whatif TRACE [FILES...] [--json] [--budgets LIST] [--strp OUT [--force]]
    bmoe-top probe PATH [--json] [--qd-max N] [--slice-bytes B] [--seconds S] [--remember]
    bmoe-top sweep -m MODEL --cache-mb LIST -o DIR [--io-threads LIST] [--runs N] [--order O] [--once] [--json]

``CMD`` is any program that speaks the session protocol (docs/telemetry.md "Session mode"), e.g.
``bmoe-cli --session --progress``; without it, the bundled runtime (:func:`runtime_command`).
Bad input gets one clear line on stderr and a non-zero exit status, never a traceback
(docs/user-guide.md "Exit status"):

* 0: done;
* 1 (:data:`EXIT_FAILED`): something the command line names cannot be used, or the run failed: a
  missing, unreadable, empty or foreign file, a directory, files of different runs, files without
  what the command needs (routing, per-token rows), an output file that is refused or cannot be
  written (``--record``, ``--strp``), a command that cannot start, a source that does not answer;
* 2 (:data:`EXIT_USAGE`): the command line itself is wrong: an unknown option or a bad value
  (argparse), options that exclude each other, a screen asked for where standard output is not a
  terminal;
* 128 + N: ended by signal N (130: Ctrl+C).

Arguments are checked first, then the inputs, then the terminal: with standard output redirected
a bad file is reported as such (1), and only good inputs get the refusal that points to the text
forms (``--summary``, ``--once``, ``--json``). ``--ascii`` draws with ASCII glyphs whatever the locale.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from bmoe_top.outfile import STDOUT, OutputFileError, drop_stdout, guard_stdout
from bmoe_top.parsers.limits import MAX_EXPERTS, MAX_METRICS_BODY_MB
from bmoe_top.parsers.recording import Recording, parse_recording

if TYPE_CHECKING:
    from bmoe_top.tui.headless import Outcome
    from bmoe_top.tui.sources.recorder import Recorder

EXIT_USAGE = 2
EXIT_FAILED = 1

#: The default deadline of ``launch --once``'s turn (s, ``--turn-timeout``): 256 tokens at 0.5 tok/s
#: (a large model streaming every expert from flash) take 512 s.
TURN_TIMEOUT_S = 600.0


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived during a headless command: unwinds it (its ``finally`` blocks close
    the child or detach) so the command ends with ``128 + signum``, never leaving a child behind."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _end_on_signals() -> dict[int, Any]:
    """SIGTERM / SIGHUP raise :class:`Terminated` once (a second signal while the command closes
    its child is ignored, so the close finishes). Returns the handlers it replaced (none off the
    main thread, where Python cannot set them)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if fired:
            return
        fired.append(signum)
        raise Terminated(signum)

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}


#: How the bundled runtime samples when bmoe-top launches it: the small demo model loops under
#: greedy decoding (a line of spaces), while light sampling streams recognisable Python.
DEMO_SAMPLING = ["--temp", "0.7", "--top-p", "0.95", "--repeat-penalty", "1.1"]
#: The demo a bare ``bmoe-top`` starts (docs/demo-model.md "The demo run"): the prompt already in
#: the prompt box (a 2-byte comment opener, so decode starts on a cold cache), 1024-token turns
#: (the cumulative hit climbs from 12.5% at the first token to 79% at the last), shown in slow
#: motion (0.1x of the tokens' own wall time, trailing the live run; End goes real-time).
DEMO_PROMPT = "# "
DEMO_N_PREDICT = 1024
DEMO_SPEED = 0.1


def _once_exit(what: str, doc: Mapping[str, Any]) -> int:
    """The exit status of a ``--once`` document (:func:`~bmoe_top.tui.headless.exit_code`); a
    failure also says why in one line on stderr, whatever went to stdout."""
    from bmoe_top.tui.headless import exit_code

    code = exit_code(doc)
    if code:
        failed = doc.get("error") if doc.get("status") != "ok" else doc.get("drill_error")
        why = failed.get("message") if isinstance(failed, Mapping) else doc.get("detail") or failed
        where = "" if doc.get("status") != "ok" else f" (drill-down of {doc.get('instance')})"
        _die(f"{what}: {doc.get('status')}{where}" + (f": {why}" if why else ""), code)
    return code


def _say(msg: str) -> None:
    """One line on stderr, ``bmoe-top: `` first, made safe for the terminal (it may name a file or
    quote a server or a child)."""
    from bmoe_top.parsers.sanitize import sanitize

    print(f"bmoe-top: {sanitize(msg)}", file=sys.stderr, flush=True)


def _die(msg: str, code: int = EXIT_USAGE) -> int:
    """:func:`_say` ``msg`` and return the exit status ``code``."""
    _say(msg)
    return code


#: The text forms a refused screen points to, by command (``_terminal_refused``).
TEXT_FORMS = {
    "run": "`bmoe-top replay --summary [--json] PATH`, or `--once --json` with launch and attach",
    "compare": "`bmoe-top compare --json`, `--md` or `--csv`",
    "whatif": "`bmoe-top whatif --json` (or `--strp OUT` for a profile)",
    "fleet": "`bmoe-top fleet --once --json`",
    "sweep": "`bmoe-top sweep --once [--json]`",
}


def _terminal_refused(command: str = "run") -> int | None:
    """None when standard output is a terminal; else the refusal (exit 2) that points to the
    command's text forms (``TEXT_FORMS``): a screen written into a file or a pipe is escape codes,
    not a report."""
    if sys.stdout.isatty():
        return None
    return _die(f"standard output is not a terminal: the screen needs one. For text, use {TEXT_FORMS[command]}")


#: Sub-commands whose ``--json`` alone prints instead of opening a screen (the others take it with
#: ``--once``).
_JSON_PRINTS = frozenset({"replay", "compare", "whatif", "sweep"})

#: Options that make a command print text instead of opening a screen.
_TEXT_OPTIONS = ("once", "summary", "md", "csv", "strp", "rules")


def _prints(args: argparse.Namespace) -> bool:
    """The command prints and exits without a screen: the app (and Textual) and the settings file
    are then never loaded (docs/user-guide.md "Settings")."""
    return bool(args.cmd in ("probe", "events") or any(getattr(args, k, None) for k in _TEXT_OPTIONS)
                or (getattr(args, "json", False) and args.cmd in _JSON_PRINTS))


def _apply_look(args: argparse.Namespace) -> None:
    from bmoe_top.tui.app import BmoeTopApp

    if getattr(args, "ascii", False):
        BmoeTopApp.force_ascii = True
    if getattr(args, "refresh", None) is not None:
        BmoeTopApp.refresh_s = args.refresh


def _apply_settings(args: argparse.Namespace) -> int | None:
    """The settings file of a command that opens a screen (docs/user-guide.md "Settings"): the
    one ``--config FILE`` names, the user's (``platformdirs``), or none with ``--no-config``; what
    it has wrong is one line each on stderr (the screen says it again). None, or the exit status
    of a ``--config`` that cannot be used (a folder, a folder that does not exist)."""
    config, no_config = getattr(args, "config", None), getattr(args, "no_config", False)
    if config is not None and no_config:
        return _die("--config and --no-config exclude each other")
    if _prints(args):
        return None
    from bmoe_top.tui.app import BmoeTopApp
    from bmoe_top.tui.settings import default_path, load

    if no_config:
        path = None
    elif config is not None:
        path = Path(config)
        if not config or path.is_dir():
            return _die(f"--config {config}: it is a directory, not a settings file", EXIT_FAILED)
        if not path.parent.is_dir():
            return _die(f"--config {config}: the folder {path.parent} does not exist", EXIT_FAILED)
    else:
        path = default_path()
    store = load(path)
    for problem in store.problems:
        _say(f"settings {path}: {problem}")
    BmoeTopApp.settings_store = store
    return None


def runtime_exe() -> list[str]:
    """The bundled runtime's program: ``bmoe-run`` beside this Python, else on PATH, else its module."""
    exe = Path(sys.executable).with_name("bmoe-run")
    found = shutil.which("bmoe-run")
    if exe.exists():
        return [str(exe)]
    if found:
        return [found]
    return [sys.executable, "-m", "bmoe_top.runtime.cli"]


def runtime_command(model: str | None = None, extra: list[str] | None = None) -> list[str]:
    """The bundled runtime's session command line:
    ``bmoe-run --session --route-telemetry --temp 0.7 --top-p 0.95 --repeat-penalty 1.1 [-m MODEL]``."""
    cmd = runtime_exe()
    cmd += ["--session", "--route-telemetry", *DEMO_SAMPLING]
    if model:
        cmd += ["-m", model]
    return cmd + list(extra or [])


# ------------------------------------------------------------------------------------- replay
def replay_title(paths: list[str]) -> str:
    """The replay screen's title: the files' names, made safe to draw (a file name may hold escapes)."""
    from bmoe_top.parsers.sanitize import sanitize

    return sanitize("replay " + " + ".join(p.rsplit("/", 1)[-1] for p in paths))


def _measured(run: Any) -> bool:
    """The files gave something measured: token rows, a summary, routing, a sidecar or a profile
    (without any, a summary would be every field missing)."""
    with run.lock:
        return bool(run.tokens.n or run.summary or run.routes.total or run.sidecar
                    or run.expert_rank is not None or run.resident is not None)


def _requests_only(run: Any) -> bool:
    """The files gave requests and nothing measured (a session request log alone)."""
    with run.lock:
        return bool(run.requests) and not _measured(run)


def cmd_replay(args: argparse.Namespace) -> int:
    """``replay``: the summary (text or JSON) or the replay screen. Exit 1 with the reason when a
    file is not a recorded run (the summary of the others is still printed; the screen shows the
    others with a banner naming it, and quits with 1; no file is a run: no screen), or cannot be
    read, or files of different runs."""
    from bmoe_top.tui.headless import replay
    from bmoe_top.tui.present.numbers import print_json, print_lines
    from bmoe_top.tui.present.summary import run_summary, summary_text
    from bmoe_top.tui.sources.files import ReplayError

    text = bool(args.summary or args.json)
    if len(args.paths) == 1 and (code := _replay_memory(args.paths[0], text, bool(args.json), math.inf,
                                                        args.fps)) is not None:
        return code
    try:
        # the screen opens on the first file's run, the files of other runs named in its banner
        run, not_runs = replay(args.paths, allow_mixed=args.allow_mixed, keep_first=not text)
    except ReplayError as e:
        return _die(str(e), EXIT_FAILED)
    status = 0
    if text and not not_runs and _requests_only(run):
        return _die(f"{', '.join(args.paths)}: session requests only (the prompts sent), no measurements: give the "
                    "run's CSV, log or recording with it", EXIT_FAILED)
    if text and not not_runs and not _measured(run) and not set(run.meta) - {"format"} and not run.turns \
            and not run.problem_count:  # (a format line alone, "# route_trace v1", says nothing of a run)
        return _die(f"{', '.join(args.paths)}: no token rows, summary, routing, run details or problems: nothing "
                    "to summarize", EXIT_FAILED)
    if text:
        if len(not_runs) < len(args.paths):
            s = run_summary(run)
            if args.json:
                print_json(s)
            else:
                print_lines(summary_text(s))
        for path, why in not_runs:
            status = _die(f"{path}: {why}", EXIT_FAILED)
        return status
    if not_runs and (len(not_runs) == len(args.paths) or not sys.stdout.isatty()):
        # the inputs first: a bad file is the news, not the pipe; and no file to show, no screen
        for path, why in not_runs:
            status = _die(f"{path}: {why}", EXIT_FAILED)
        return status
    refused = _terminal_refused()
    if refused is not None:
        return refused
    from bmoe_top.tui.screens.replay import run_replay

    code = run_replay(run, replay_title(args.paths), args.fps)
    return EXIT_FAILED if not_runs and code == 0 else code  # the banner named them; the status says so too


def _replay_memory(path: str, text: bool, as_json: bool, speed: float, fps: float,
                   rec: Recording | None = None) -> int | None:
    """A recording of ``attach --pid/--gguf --record`` (memory entries only): its last reading's
    document (``text``) or the memory screen replaying it; None for any other file."""
    from bmoe_top.parsers.recording import memory_entries

    if rec is None:
        from bmoe_top.parsers.sniff import sniff
        from bmoe_top.tui.sources.files import ReplayError, read_path, regular_file

        try:
            regular_file(Path(path))  # a pipe is not opened here: the run replay says why not
            with open(path, "rb") as f:
                head = f.read(1 << 16)
            # a run's recording is told by its first lines and read once, by the run replay
            if sniff(head, path) != "recording" or \
                    memory_entries(parse_recording(head[:head.rfind(b"\n") + 1])) is None:
                return None
            rec = parse_recording(read_path(path))
        except (OSError, ReplayError):
            return None  # the run replay says why it cannot read it
    entries = memory_entries(rec)
    if entries is None:
        return None
    if text:
        from bmoe_top.tui.feed.memory import replay_memory
        from bmoe_top.tui.present.memory import memory_document, memory_lines
        from bmoe_top.tui.present.numbers import print_json, print_lines

        m = replay_memory(entries)
        if as_json:
            print_json(memory_document(m))
        else:
            print_lines(memory_lines(m))
        status = 0
        for p in [*(f"line {q.lineno}: {q.reason}" for q in rec.problems), *m.problems]:
            status = _die(f"{path}: {p}", EXIT_FAILED)
        return status
    if (refused := _terminal_refused()) is not None:
        return refused
    from bmoe_top.tui.screens.attach_memory import run_memory_play

    return run_memory_play(entries, speed, path, fps)


# --------------------------------------------------------------------------------------- live
def _recorder(args: argparse.Namespace) -> Recorder | None:
    """The ``--record`` file (``OutputFileError``, an ``OSError``, says why it cannot be written)."""
    if not args.record:
        return None
    from bmoe_top.tui.sources.recorder import Recorder

    return Recorder(args.record, force=bool(getattr(args, "force", False)))


def _record_refused(args: argparse.Namespace) -> int | None:
    """The ``--record`` path checked before anything starts (nothing is created): exit 1 with the
    reason when it cannot be written, else None."""
    if not getattr(args, "record", None):
        return None
    from bmoe_top.outfile import check_output

    try:
        check_output(args.record, force=bool(getattr(args, "force", False)))
    except OSError as e:
        return _die(str(e), EXIT_FAILED)
    return None


def _finish_recording(rec: Recorder | None, status: int) -> int:
    """Close the recording; a write error that stopped it is one line on stderr and exit 1."""
    if rec is None:
        return status
    rec.close()
    if rec.error is not None:
        return _die(f"{rec.path}: {rec.error}", EXIT_FAILED)
    return status


def _own_command(args: argparse.Namespace) -> list[str]:
    """The command the user gave after ``--`` (empty: the bundled runtime)."""
    cmd = list(args.command or [])
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def _child_argv(args: argparse.Namespace) -> list[str]:
    return _own_command(args) or runtime_command(args.model)


def _print_outcome(outcome: Outcome, as_json: bool) -> int:
    from bmoe_top.tui.present.numbers import print_json, print_lines
    from bmoe_top.tui.present.summary import summary_text

    doc = outcome.document
    if as_json:
        print_json(doc)
    elif outcome.error is None:
        print_lines(summary_text(doc["run"]))
        print_lines(outcome.text)
    if outcome.error is not None:
        return _die(outcome.error, outcome.status)
    return int(outcome.status)


def cmd_launch(args: argparse.Namespace) -> int:
    from bmoe_top.parsers.sanitize import sanitize
    from bmoe_top.tui.sources.child_session import ChildSession, machine_load, runtime_wait_env

    if (bad := _record_refused(args)) is not None:
        return bad
    if not args.once and (refused := _terminal_refused()) is not None:
        return refused
    argv = _child_argv(args)
    try:
        rec = _recorder(args)
    except OSError as e:
        return _die(str(e), EXIT_FAILED)
    # the bundled runtime on crowded cores waits passively at its OpenMP barriers (a command the
    # user gives runs in the user's environment as it is)
    env = None if _own_command(args) else runtime_wait_env(os.environ, *machine_load())
    src = ChildSession(argv, recorder=rec, ready_timeout_s=args.ready_timeout, env=env)
    status = EXIT_FAILED
    try:
        if args.once:
            from bmoe_top.tui.headless import launch_once

            status = _print_outcome(launch_once(src, args.prompt, args.n_predict, args.ready_timeout,
                                                args.turn_timeout), args.json)
        else:
            from bmoe_top.tui.screens.live import run_live

            status = run_live(src, title=sanitize(f"launch {Path(argv[0]).name}"), n_predict=args.n_predict,
                              fps=args.fps, speed=getattr(args, "speed", 1.0),
                              prompt=getattr(args, "initial_prompt", ""))
    finally:
        src.close()
    return _finish_recording(rec, status)


def cmd_attach(args: argparse.Namespace) -> int:
    if args.pid is not None or args.gguf is not None:
        return _attach_memory(args)
    if args.session is None and args.metrics is None and args.audit is None:
        return _die("attach: give --session PATH, --metrics URL, --audit FILE, --pid PID or --gguf FILE")
    if args.metrics is not None or args.audit is not None:
        if not (args.metrics or args.audit):
            return _die("attach: an empty URL or path")
        return _attach_network(args)
    from bmoe_top.parsers.sanitize import sanitize
    from bmoe_top.tui.sources.session_socket import SessionSocketClient

    if (bad := _record_refused(args)) is not None:
        return bad
    if not args.once and (refused := _terminal_refused()) is not None:
        return refused
    try:
        rec = _recorder(args)
    except OSError as e:
        return _die(str(e), EXIT_FAILED)
    src = SessionSocketClient(args.session, recorder=rec)
    status = EXIT_FAILED
    try:
        if args.once:
            from bmoe_top.tui.headless import session_once

            # no --timeout: wait 30 s for a socket that exists, none for a path that does not
            wait = args.timeout if args.timeout else (30.0 if os.path.lexists(args.session) else 0.0)
            status = _print_outcome(session_once(src, args.prompt, args.n_predict, wait), args.json)
        else:
            from bmoe_top.tui.screens.live import run_live

            status = run_live(src, title=sanitize(f"attach {args.session}"), n_predict=args.n_predict,
                              fps=args.fps)
    finally:
        src.close()
    return _finish_recording(rec, status)


def _attach_memory(args: argparse.Namespace) -> int:
    """--pid / --gguf (with --metrics: tokens for the per-token figures): the memory screen, or
    its headless document (docs/memory.md)."""
    if args.session is not None or args.audit is not None:
        return _die("attach: --pid and --gguf go with --metrics only, not with --session or --audit")
    if args.metrics is not None and args.pid is None:
        return _die("attach: --metrics with --gguf needs --pid too (the process whose reads the tokens divide)")
    if (bad := _record_refused(args)) is not None:
        return bad
    if not args.once and (refused := _terminal_refused()) is not None:
        return refused
    try:
        rec = _recorder(args)
    except OSError as e:
        return _die(str(e), EXIT_FAILED)
    if args.once:
        from bmoe_top.tui.headless import memory_once

        outcome = memory_once(args.pid, args.gguf, args.metrics, interval=args.interval or 0.0,
                              method=args.residency, api_key=args.api_key,
                              timeout=args.timeout if args.timeout else 5.0, recorder=rec)
        if args.json:
            from bmoe_top.tui.present.numbers import print_json

            print_json(outcome.document)
        elif outcome.error is None:
            from bmoe_top.tui.present.numbers import print_lines

            print_lines(outcome.text)
        status = _die(outcome.error, outcome.status) if outcome.error else outcome.status
        return _finish_recording(rec, status)
    from bmoe_top.tui.screens.attach_memory import MemoryAttachOptions, run_memory_attach

    opts = MemoryAttachOptions(pid=args.pid, gguf=args.gguf, metrics=args.metrics, api_key=args.api_key,
                               interval_s=float(args.interval or 1.0), method=args.residency,
                               fps=float(args.fps or 10.0))
    return _finish_recording(rec, run_memory_attach(opts, rec))


def _attach_network(args: argparse.Namespace) -> int:
    """--metrics / --audit: the headless documents, or the attach screens. A ``--metrics`` value
    that is not an http(s) URL is a usage error (2), told before anything is asked."""
    if args.metrics is not None:
        from bmoe_top.tui.sources.http_client import check_url

        if (why := check_url(args.metrics)) is not None:
            return _die(f"attach --metrics {args.metrics}: {why}")
    if args.once:
        from bmoe_top.tui.headless import audit_once, metrics_once
        from bmoe_top.tui.present.numbers import print_lines, to_json

        if args.metrics is not None:
            d = metrics_once(args.metrics, api_key=args.api_key, interval=args.interval or 0.0,
                             timeout=args.timeout if args.timeout else 5.0, slots=args.slots,
                             max_body_mb=args.max_body_mb)
        else:
            d = audit_once(args.audit)
        if args.json:
            print(to_json(d))
        else:
            print_lines([f"{args.metrics or args.audit}: {d.get('status')} {d.get('detail') or ''}".rstrip()])
        return _once_exit(f"attach {args.metrics or args.audit}", d)
    refused = _terminal_refused()
    if refused is not None:
        return refused
    fps = float(args.fps or 10.0)
    if args.metrics is not None:
        from bmoe_top.tui.screens.attach_metrics import MetricsAttachOptions, run_metrics_attach

        return run_metrics_attach(MetricsAttachOptions(
            args.metrics, interval_s=float(args.interval or 1.0),
            timeout_s=float(args.timeout) if args.timeout else None, api_key=args.api_key,
            slots=bool(getattr(args, "slots", False)), max_body_mb=args.max_body_mb, fps=fps))
    from bmoe_top.tui.screens.attach_audit import run_audit_attach

    return run_audit_attach(args.audit, fps=fps)


def cmd_play(args: argparse.Namespace) -> int:
    from bmoe_top.tui.screens.live import run_live
    from bmoe_top.tui.sources.files import ReplayError, read_path
    from bmoe_top.tui.sources.replay import RecordingSource

    try:
        rec = parse_recording(read_path(args.path))  # a pipe or a device refused, the size checked
    except ReplayError as e:
        return _die(str(e), EXIT_FAILED)
    if (code := _replay_memory(args.path, False, False, math.inf if args.speed == 0 else args.speed, args.fps,
                               rec)) is not None:
        return code
    if not rec.entries:
        first = rec.problems[0] if rec.problems else None
        what = f" ({len(rec.problems)} bad lines; first: line {first.lineno}: {first.reason})" if first else ""
        return _die(f"{args.path} holds no recorded lines{what}", EXIT_FAILED)
    refused = _terminal_refused()
    if refused is not None:
        return refused
    src = RecordingSource(rec, speed=math.inf if args.speed == 0 else args.speed, turn_by_turn=args.turn_by_turn,
                          name=str(args.path))
    return run_live(src, title=f"play {Path(args.path).name}", fps=args.fps)


def default_main(args: argparse.Namespace) -> int:
    """``bmoe-top`` with no sub-command: launch the bundled runtime on the demo model, with
    :data:`DEMO_PROMPT` in the prompt box, :data:`DEMO_N_PREDICT`-token turns, in slow motion."""
    ns = argparse.Namespace(model=None, ready_timeout=300.0, once=False, json=False, prompt=DEMO_PROMPT,
                            command=[], n_predict=DEMO_N_PREDICT, record=None, fps=args.fps, speed=DEMO_SPEED,
                            initial_prompt=DEMO_PROMPT)
    return cmd_launch(ns)


# ------------------------------------------------------------------------------------- parser
def _live_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--n-predict", type=_count, default=256, help="tokens per generation (default 256)")
    p.add_argument("--record", metavar="FILE", help="write every received line to FILE (JSONL, flushed per line); "
                                                    "an existing FILE or a symbolic link is refused")
    p.add_argument("--force", action="store_true", help="with --record: replace an existing FILE")
    p.add_argument("--fps", type=_fps, default=10.0, help=argparse.SUPPRESS)
    _ascii_flag(p)


def _ascii_flag(p: argparse.ArgumentParser, refresh: bool = True) -> None:
    """The flags of every command that opens a screen, after a sub-command too: ``--ascii``,
    ``--config FILE``, ``--no-config`` (and ``--refresh`` for the run screens)
    (``bmoe-top replay --ascii PATH``, ``bmoe-top whatif --ascii TRACE``)."""
    p.add_argument("--ascii", action="store_true", default=argparse.SUPPRESS, help="ASCII glyphs only")
    _config_flags(p, argparse.SUPPRESS)
    if refresh:
        p.add_argument("--refresh", type=_refresh_s, default=argparse.SUPPRESS, metavar="S", help=REFRESH_HELP)


def _config_flags(p: argparse.ArgumentParser, default: Any = None) -> None:
    p.add_argument("--config", metavar="FILE", default=default,
                   help="the settings file to read and keep changes in (default: settings.toml in the user's "
                        "config folder, e.g. ~/.config/bmoe-top/)")
    p.add_argument("--no-config", action="store_true", default=default if default is not None else False,
                   help="read no settings file and keep nothing (the defaults)")


#: What ``--refresh`` does, for every parser that takes it.
REFRESH_HELP = ("seconds between repaints of the maps, trends and panels while data streams, like htop's -d "
                "(default 1; 0.1 to 10; the title and the answer text follow faster; { and } change it at run time)")


#: Screen ticks per second ``--fps`` takes (a tick is how soon a key shows; under 1 the screen
#: would lag keys by seconds, and 0 would never tick).
FPS_RANGE = (1.0, 100.0)


def _number(lo: float, hi: float = math.inf, unit: str = "", *, above: bool = False,
            whole: bool = False) -> Callable[[str], Any]:
    """The argparse ``type`` of every numeric option: a finite number (an integer with ``whole``)
    from ``lo`` (above it with ``above``) to ``hi``, ``unit`` after the range in the refusal
    (``argument --interval: must be between 0.01 and 3600 seconds, got nan``: exit 2). NaN and the
    infinities are always refused (``--interval nan`` scraped as fast as it could)."""
    kind = "a whole number" if whole else "a number"
    if hi < math.inf:
        allowed = f"between {lo:g} and {hi:g}{unit}"
    else:
        allowed = f"{kind} above {lo:g}{unit}" if above else f"{kind} {lo:g} or more{unit}"

    def parse(text: str) -> Any:
        try:
            v: float = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from None
        if not (math.isfinite(v) and (v > lo if above else v >= lo) and v <= hi):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text}")
        return v

    return parse


_fps = _number(*FPS_RANGE, " ticks a second")
_positive_float = _number(0, above=True)
_refresh_s = _number(0.1, 10, " seconds")
#: Seconds of a wait or a deadline (``--timeout``, ``--ready-timeout``).
_seconds = _number(0, unit=" seconds", above=True)
#: A count of at least one (tokens, runs, a batch).
_count = _number(1, whole=True)


#: Seconds ``attach --interval`` takes between scrapes or samples.
INTERVAL_RANGE = (0.01, 3600.0)
#: ``fleet --points``: Prometheus answers a range query with at most 11,000 points a series.
FLEET_MAX_POINTS = 11_000


#: Options whose value is a list of numbers: ``--budgets -5,0`` would be read by argparse as an
#: option (a value starting with '-' that is not one number), so it is joined as ``--budgets=-5,0``
#: and the value's own check says what is wrong with it.
LIST_OPTIONS = ("--budgets",)
_NUMBER_LIST = re.compile(r"-[\d.,\s+eE-]*")


def _join_list_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out += argv[i:]
            break
        if a in LIST_OPTIONS and i + 1 < len(argv) and _NUMBER_LIST.fullmatch(argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


#: The fleet's window without ``--window`` (the screen: the settings' ``[fleet] window``).
FLEET_WINDOW = "5m"


def cmd_fleet(args: argparse.Namespace) -> int:
    """``bmoe-top fleet``: the instances a Prometheus scrapes (docs/fleet.md), on the screen or
    with ``--once --json`` as one document."""
    from bmoe_top.tui.fleet.queries import selector_problem
    from bmoe_top.tui.sources.prometheus import parse_duration, require_url

    if (why := selector_problem(args.selector)) is not None:  # every form: --rules, --once, the screen
        return _die(f"fleet --selector {args.selector}: {why}")
    if args.rules:
        return _fleet_rules(args)
    if args.prometheus is None:
        return _die("fleet: --prometheus URL is required (or --rules: the alert rules for Prometheus)")
    if args.once and not args.json:
        return _die("fleet: --once needs --json (--once --json prints the document; without --once, the screen)")
    if args.window is None:  # the screen's kept window; the document's is always the default
        from bmoe_top.tui.app import BmoeTopApp

        args.window = BmoeTopApp.startup_settings().fleet.window if not args.once else FLEET_WINDOW
    try:
        window = float(args.window) if args.window.replace(".", "", 1).isdigit() else parse_duration(args.window)
        if not window > 0:
            raise ValueError(f"--window must be > 0, got {args.window!r}")
        labels = _labels(args.label or [])
        if args.once:
            from bmoe_top.tui.headless import fleet_once
            from bmoe_top.tui.present.numbers import print_json

            doc = fleet_once(args.prometheus, selector=args.selector, window_s=window, instance=args.instance,
                             job=args.job, labels=labels, api_key=args.api_key, timeout=args.timeout,
                             points=args.points, at=args.at)
            print_json(doc)
            return _once_exit(f"fleet {args.prometheus}", doc)
        require_url(args.prometheus)  # a usage error is told before the terminal refusal
        if (refused := _terminal_refused("fleet")) is not None:
            return refused
        from bmoe_top.tui.screens.fleet import FleetOptions, run_fleet

        return run_fleet(FleetOptions(
            args.prometheus, args.selector, window, points=args.points, api_key=args.api_key,
            timeout=args.timeout, at=args.at, drill=(args.job, args.instance, labels) if args.instance else None,
            fps=float(args.fps or 10.0)))
    except ValueError as e:
        return _die(f"fleet: {e}")


def _fleet_rules(args: argparse.Namespace) -> int:
    """``bmoe-top fleet --rules``: the alert rules (the defaults with the settings file's
    thresholds and rules) as a Prometheus rules file on stdout (docs/alerts.md)."""
    from bmoe_top.tui.fleet.rules import rules_file
    from bmoe_top.tui.settings import default_path, load

    config, no_config = getattr(args, "config", None), getattr(args, "no_config", False)
    if config is not None and no_config:
        return _die("--config and --no-config exclude each other")
    path = None if no_config else Path(config) if config is not None else default_path()
    store = load(path)
    for problem in store.problems:
        _say(f"settings {path}: {problem}")
    sys.stdout.write(rules_file(store.settings.rules(), args.selector))
    return 0


def _labels(items: list[str]) -> dict[str, str]:
    """``--label NAME=VALUE`` items as a dict; ``ValueError`` for an item without ``=`` or a name."""
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ValueError(f"--label wants NAME=VALUE, got {item!r}")
        out[name.strip()] = value
    return out


def add_fleet_parser(sub: Any) -> None:
    f = sub.add_parser("fleet", help="many runtimes through a Prometheus server (--prometheus URL)",
                       description="Read a fleet of runtimes from the Prometheus that scrapes them "
                                   "(PromQL query/query_range). docs/fleet.md.")
    f.add_argument("--prometheus", metavar="URL", help="the Prometheus server, e.g. http://127.0.0.1:9090")
    f.add_argument("--rules", action="store_true",
                   help="print the alert rules as a Prometheus rules file (YAML) and exit; no Prometheus needed "
                        "(docs/alerts.md)")
    f.add_argument("--selector", default="", metavar="S", help='PromQL label matchers, e.g. \'{job="bmoe"}\'')
    f.add_argument("--window", default=None, metavar="D",
                   help=f"span of the sparklines and the drill-down (default {FLEET_WINDOW}; the screen: the "
                        "settings' [fleet] window)")
    f.add_argument("--instance", metavar="X", help="also the drill-down of this instance (its instance label); "
                                                   "on the screen: open on it")
    f.add_argument("--job", metavar="J", help="with --instance: its job, when one address serves several")
    f.add_argument("--label", action="append", metavar="NAME=VALUE",
                   help="with --instance: another label of its target, when two Prometheus servers hold an "
                        "instance of that name (e.g. prometheus=west); repeatable")
    f.add_argument("--points", type=_number(1, FLEET_MAX_POINTS, whole=True), default=120, metavar="N",
                   help="sparkline points (default 120)")
    f.add_argument("--at", type=_number(0, unit=" (Unix seconds)"), metavar="T",
                   help="the table's time, Unix seconds (default now)")
    f.add_argument("--api-key", help="bearer token, for a Prometheus behind an authenticating proxy")
    f.add_argument("--timeout", type=_seconds, default=10.0, metavar="S", help="seconds per request (default 10)")
    f.add_argument("--once", action="store_true", help="headless: one refresh, print, exit (else the screen)")
    f.add_argument("--fps", type=_fps, default=10.0, help=argparse.SUPPRESS)
    f.add_argument("--json", action="store_true", help="with --once: as JSON")
    _ascii_flag(f, refresh=False)
    f.set_defaults(func=cmd_fleet)


# ------------------------------------------------------------------------------- analysis
def cmd_compare(args: argparse.Namespace) -> int:
    """``bmoe-top compare``: arms of runs, noise-aware deltas (docs/analysis.md)."""
    from bmoe_top.tui.jobs import compare as J
    from bmoe_top.tui.present import compare as P

    if sum(bool(x) for x in (args.json, args.md, args.csv)) > 1:
        return _die("compare: choose one of --json, --md, --csv")
    try:
        specs = J.parse_arms(args.arms, args.arm or [])
    except J.CompareError as e:
        return _die(f"compare: {e}")
    try:
        arms = J.load_arms(specs)
    except J.CompareError as e:
        return _die(f"compare: {e}", EXIT_FAILED)
    if not (args.json or args.md or args.csv) and (refused := _terminal_refused("compare")) is not None:
        return refused
    from bmoe_top.tui.analysis.compare import compare

    c = compare(J.arm_inputs(arms), noise_floor_pct=args.noise_floor)
    if args.json:
        from bmoe_top.tui.present.numbers import print_json

        print_json(P.comparison_document(arms, c))
        return 0
    if args.md:  # both made safe for a terminal line by line (arm names are file and folder names)
        sys.stdout.write(P.comparison_markdown(c))
        return 0
    if args.csv:
        sys.stdout.write(P.comparison_csv(c))
        return 0
    from bmoe_top.tui.screens.compare import run_compare

    return run_compare(arms, c, "compare " + " vs ".join(a.name for a in arms))


def _numbers(text: str, what: str, most: float = math.inf, unit: str = "") -> list[float]:
    """A comma-separated list of finite numbers from 0 to ``most`` (in ``unit``); ValueError names
    ``what``."""
    out = []
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            raise ValueError(f"{what}: {part!r} is not a number") from None
        if not (math.isfinite(v) and 0 <= v <= most):
            raise ValueError(f"{what}: {part!r} must be a finite number from 0" +
                             (f" to {most:,.0f}{unit}" if math.isfinite(most) else " up"))
        out.append(v)
    if not out:
        raise ValueError(f"{what}: no values")
    return out


_SIZE_UNITS = {"": 1 << 20, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def _ram_size(text: str) -> float:
    """``--ram SIZE``: bytes from ``16G``, ``16GiB``, ``12000M``, ``12000`` (MiB); binary units."""
    t = text.strip().lower().replace(" ", "")
    num = t.rstrip("kmgtib")
    unit = t[len(num):]
    try:
        v = float(num)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (16G, 16GiB, 12000M; a bare number is MiB)") from None
    if unit not in _SIZE_UNITS or not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size > 0 (16G, 16GiB, 12000M; a bare number is MiB)")
    return v * _SIZE_UNITS[unit]


def _whatif_speed(args: argparse.Namespace, inp: Any, report: Any) -> Any:
    """The tok/s model over the report (``tui/jobs/sizing.py``) with the flags, the model file and the
    remembered probe."""
    from bmoe_top.tui.jobs.sizing import speed_view

    probe = None
    if not args.no_config:
        from bmoe_top.tui.settings import load

        probe = load(_settings_path(args)).settings.probe
    dense, dense_from = (args.dense_mib * (1 << 20), "--dense-mib") if args.dense_mib is not None else (None, "")
    readahead, ra_from = (args.readahead_kb * 1024, "--readahead-kb") if args.readahead_kb is not None else (None, "")
    pieces = None
    if args.model:
        from bmoe_top.tui.jobs.whatif import gguf_dense_bytes, gguf_pieces
        from bmoe_top.tui.sources.procfs import device_readahead

        pieces = gguf_pieces(args.model)
        if dense is None:
            dense, dense_from = gguf_dense_bytes(args.model), "the model file: its bytes minus the expert bank"
        if readahead is None and (ra := device_readahead(args.model)) is not None:
            readahead, ra_from = float(ra), "the model file's device read_ahead_kb"
    return speed_view(inp, report, ram=args.ram, bandwidth_mb_s=args.bandwidth, dense=dense, dense_from=dense_from,
                      runtime=None if args.runtime_mib is None else args.runtime_mib * (1 << 20), readahead=readahead,
                      readahead_from=ra_from, probe=probe, mmap_pieces=pieces,
                      mmap_bandwidth_mb_s=args.mmap_bandwidth)


def cmd_whatif(args: argparse.Namespace) -> int:
    """``bmoe-top whatif``: the cache-sizing screen, or its JSON / an STRP profile."""
    from bmoe_top.outfile import OutputFileError
    from bmoe_top.tui.jobs import whatif as W
    from bmoe_top.tui.present.whatif import ProfileDoc, WhatIfProfileDocument, whatif_document

    try:
        from bmoe_top.tui.analysis.cachesim import MAX_BUDGET_MIB

        budgets = _numbers(args.budgets, "--budgets", MAX_BUDGET_MIB, " MiB") if args.budgets is not None else None
    except ValueError as e:
        return _die(f"whatif: {e}")
    try:
        layer_bytes = W.gguf_layer_bytes(args.model) if args.model else None
        inp = W.load_whatif(args.paths, n_expert=args.n_expert, prefill_batch=args.prefill_batch,
                            layer_bytes=layer_bytes, run_budget_mib=args.run_budget, read_mib_s=args.read_mib_s)
    except ValueError as e:
        return _die(f"whatif: {e}", EXIT_FAILED)
    if not (args.json or args.strp) and (refused := _terminal_refused("whatif")) is not None:
        return refused
    try:
        report, replay = W.analyse_input(inp, budgets)
        speed = _whatif_speed(args, inp, report)
    except ValueError as e:
        return _die(f"whatif: {e}", EXIT_FAILED)
    profile: ProfileDoc | None = None
    if args.strp:
        try:
            ranked, slots = W.write_profile(inp, report, args.strp, force=args.force)
        except OutputFileError as e:
            return _die(str(e), EXIT_FAILED)
        profile = {"path": args.strp, "ranked": ranked, "slots": slots}
        if not args.json:
            from bmoe_top.tui.present.numbers import print_lines

            print_lines([f"wrote {args.strp}: {ranked:,} experts ranked, hottest first, for {slots:,} slots "
                         f"(bmoe-run --moe-cache-profile {args.strp})"])
    if args.json:
        from bmoe_top.tui.present.numbers import print_json

        doc = whatif_document(inp, report, speed)
        if profile is not None:
            with_profile: WhatIfProfileDocument = {**doc, "profile": profile}
            print_json(with_profile)
        else:
            print_json(doc)
        return 0
    if profile is not None:
        return 0
    from bmoe_top.tui.screens.whatif import run_whatif

    return run_whatif(inp, report, replay, "whatif " + " + ".join(Path(p).name for p in args.paths), speed)


def add_analysis_parsers(sub: Any) -> None:
    c = sub.add_parser("compare", help="compare runs: A B, A1,A2,A3 vs B1,B2,B3, or --arm NAME=FILES",
                       description="Compare arms of runs with noise-aware deltas (docs/analysis.md). Each "
                                   "argument is an arm; runs of an arm are separated by ',' and files of one run "
                                   "joined by '+' (a.csv+a.log); the word 'vs' between arms is optional. The "
                                   "first arm is the baseline.")
    c.add_argument("arms", nargs="*", metavar="ARM", help="RUN[,RUN...], RUN = FILE[+FILE...]")
    c.add_argument("--arm", action="append", metavar="NAME=FILES", help="a named arm (repeatable)")
    c.add_argument("--noise-floor", type=_number(0, unit=" percent"), default=2.0, metavar="PCT",
                   help="a change smaller than this %% of the baseline is ~ (default 2)")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON, no UI")
    c.add_argument("--md", action="store_true", help="print a markdown table to paste into notes, no UI")
    c.add_argument("--csv", action="store_true", help="print the comparison as CSV, no UI")
    c.add_argument("--fps", type=_fps, default=10.0, help=argparse.SUPPRESS)
    _ascii_flag(c, refresh=False)
    c.set_defaults(func=cmd_compare)

    w = sub.add_parser("whatif", help="size the cache from a routing trace: every policy at every budget",
                       description="Replay a routing trace (route-trace CSV, binary routing trace, or a "
                                   "recording/transcript with BMOE_ROUTE) through cache policies at every "
                                   "budget (docs/analysis.md). Give the run's CSV or log beside the trace for "
                                   "its budget and read bandwidth. Hit figures are decode hits / decode lookups.")
    w.add_argument("paths", nargs="+", metavar="FILE", help="the routing trace, and files of the same run")
    w.add_argument("--json", action="store_true", help="print the curves, per-layer table and recommended budget "
                                                       "as JSON, no UI")
    w.add_argument("--budgets", metavar="LIST", help="budgets to report, MiB, comma-separated (default: a sweep "
                                                     "from the token cycle T to the whole bank)")
    w.add_argument("--strp", metavar="OUT", help="write an STRP profile (for bmoe-run --moe-cache-profile)")
    w.add_argument("--force", action="store_true", help="with --strp: replace an existing file")
    w.add_argument("--run-budget", type=_positive_float, metavar="MIB",
                   help="the run's cache budget (default: from its files)")
    w.add_argument("--read-mib-s", type=_positive_float, metavar="X", help="read bandwidth for the I/O estimate "
                                                                  "(default: from the run's log)")
    w.add_argument("--model", metavar="GGUF", help="the model, for expert sizes a binary trace or BMOE_ROUTE "
                                                   "lines do not carry, its dense weights and its device's readahead")
    w.add_argument("--ram", type=_ram_size, metavar="SIZE",
                   help="RAM for the expert cache and the page cache together (16G, 12000M; default: this "
                        "machine's, or its memory cgroup's limit)")
    w.add_argument("--bandwidth", type=_positive_float, metavar="MB/S",
                   help="read bandwidth of all lanes together, 10^6 bytes/s, for predicted tok/s (default: the "
                        "run's, else bmoe-top probe --remember)")
    w.add_argument("--mmap-bandwidth", type=_positive_float, metavar="MB/S",
                   help="the rate plain mmap's page faults read at, 10^6 bytes/s, for its line (default: bmoe-top "
                        "probe --remember's faults' rate at the model's readahead, else the read bandwidth)")
    w.add_argument("--dense-mib", type=_positive_float, metavar="MIB",
                   help="always-resident weights (default: from --model)")
    w.add_argument("--runtime-mib", type=_positive_float, metavar="MIB",
                   help="the runtime's own memory: KV cache, buffers (default: 0)")
    w.add_argument("--readahead-kb", type=_positive_float, metavar="KB",
                   help="the page cache's read size for plain mmap (default: the model's device, else 128)")
    w.add_argument("--n-expert", type=_number(1, MAX_EXPERTS, whole=True), metavar="N",
                   help="experts per layer of a binary routing trace")
    w.add_argument("--prefill-batch", type=_count, metavar="N", help="the run's prefill ubatch (bmoe-run -b; "
                                                                  "default: the prompt was one batch)")
    w.add_argument("--fps", type=_fps, default=10.0, help=argparse.SUPPRESS)
    _ascii_flag(w, refresh=False)
    w.set_defaults(func=cmd_whatif)


def _settings_path(args: argparse.Namespace) -> Path | None:
    """The settings file a text command keeps a result in: ``--config FILE``, none with
    ``--no-config``, else the user's (``platformdirs``)."""
    from bmoe_top.tui.settings import default_path

    if args.no_config:
        return None
    return Path(args.config) if args.config is not None else default_path()


def cmd_probe(args: argparse.Namespace) -> int:
    """``bmoe-top probe``: O_DIRECT and buffered read bandwidth at the expert-slice size, per
    queue depth (docs/user-guide.md "probe")."""
    from bmoe_top.tui.jobs.probe import MAX_DEPTH, MAX_SLICE_BYTES, ProbeError, probe, stderr_progress
    from bmoe_top.tui.present.numbers import print_json, print_lines
    from bmoe_top.tui.present.probe import probe_document, probe_lines

    if not 1 <= args.qd_max <= MAX_DEPTH:
        return _die(f"probe: --qd-max {args.qd_max}: must be 1 to {MAX_DEPTH}")
    if not 0.05 <= args.seconds <= 600:
        return _die(f"probe: --seconds {args.seconds:g}: must be 0.05 to 600")
    if args.slice_bytes is not None and not 1 <= args.slice_bytes <= MAX_SLICE_BYTES:
        return _die(f"probe: --slice-bytes {args.slice_bytes}: must be 1 to {MAX_SLICE_BYTES}")
    if args.remember and args.no_config:
        return _die("probe: --remember and --no-config exclude each other")
    try:
        result = probe(args.path, args.slice_bytes, qd_max=args.qd_max, seconds=args.seconds,
                       progress=stderr_progress())
    except ProbeError as e:
        return _die(f"probe: {e}", EXIT_FAILED)
    if result.direct_note:
        _say(f"probe: {result.direct_note}")
    if args.json:
        print_json(probe_document(result))
    else:
        print_lines(probe_lines(result))
    if args.remember:
        from bmoe_top.tui.settings import load

        store = load(_settings_path(args))
        values = {"probe.file": os.path.abspath(result.path), "probe.slice_bytes": float(result.slice_bytes),
                  "probe.direct_mb_s": tuple(d.mb_s for d in result.direct or ()),
                  "probe.buffered_mb_s": tuple(d.mb_s for d in result.buffered),
                  "probe.mmap_mb_s": result.faults.mb_s if result.faults else None,
                  "probe.mmap_readahead_kb": (result.faults.readahead / 1024
                                              if result.faults and result.faults.readahead else None)}
        if not store.writable:
            return _die(f"probe: not remembered: {store.problems[0] if store.problems else 'no settings file'}",
                        EXIT_FAILED)
        for name, value in values.items():
            if (failed := store.set(name, value)) is not None:
                return _die(f"probe: {failed}", EXIT_FAILED)
        _say(f"probe: remembered in {store.path}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """``bmoe-top sweep``: the runtime at every budget x lanes, N times, measured against the
    tok/s model (docs/analysis.md "The sweep")."""
    import shlex

    from bmoe_top.tui.jobs.sweep import ORDERS, SweepError, SweepPlan, parse_list, run_sweep
    from bmoe_top.tui.present.numbers import print_json, print_lines
    from bmoe_top.tui.present.sweep import SweepProgress, progress_line, sweep_document, sweep_lines
    from bmoe_top.tui.sources.child_session import machine_load, runtime_wait_env

    try:
        cache = parse_list(args.cache_mb, "--cache-mb")
        lanes = tuple(int(v) for v in parse_list(args.io_threads, "--io-threads", lanes=True))
    except SweepError as e:
        return _die(f"sweep: {e}")
    if args.order not in ORDERS:
        return _die(f"sweep: --order {args.order!r}: one of {', '.join(ORDERS)}")
    if not os.path.isfile(args.model):
        what = ("is a directory, not a model file" if os.path.isdir(args.model)
                else "not a regular file" if os.path.exists(args.model) else "no such model file")
        return _die(f"sweep: {args.model}: {what}", EXIT_FAILED)
    prompt = args.prompt
    if args.prompts is not None:
        try:
            prompt = Path(args.prompts).read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            return _die(f"sweep: {args.prompts}: {e.strerror}", EXIT_FAILED)
    try:
        command = tuple(shlex.split(args.runtime)) if args.runtime else tuple(runtime_exe())
    except ValueError as e:
        return _die(f"sweep: --runtime: {e}")
    # the bundled runtime on crowded cores waits passively at its OpenMP barriers, in every arm alike
    # (a command the user gives runs in the user's environment as it is)
    env = () if args.runtime else tuple(runtime_wait_env(os.environ, *machine_load()).items())
    plan = SweepPlan(command, args.model, cache, lanes, args.overlap, args.runs, args.order, prompt, args.n_predict,
                     args.out, args.timeout, tuple(args.extra or ()), args.seed, env)
    if not (args.json or args.once):
        if (refused := _terminal_refused("sweep")) is not None:
            return refused
        from bmoe_top.tui.screens.sweep import run_sweep_screen

        return run_sweep_screen(plan)

    def progress(p: SweepProgress) -> None:
        if p.last is not None:
            print_lines([progress_line(p)], sys.stderr)
            sys.stderr.flush()

    try:
        result = run_sweep(plan, progress)
    except SweepError as e:
        return _die(f"sweep: {e}", EXIT_FAILED)
    if args.json:
        print_json(sweep_document(result))
    else:
        print_lines(sweep_lines(result))
    failed = any(x.tok_s is None for a in result.arms for x in a.runs)
    return EXIT_FAILED if failed else 0


def add_sweep_parser(sub: Any) -> None:
    sw = sub.add_parser("sweep", help="run the runtime at several cache budgets and check the predicted tok/s",
                        description="Run the bundled runtime (or --runtime CMD, taking bmoe-run's flags) at every "
                                    "--cache-mb x --io-threads, --runs times each in --order, record every run in "
                                    "OUT (resumable: a run done is not run again), and show each arm's measured "
                                    "tok/s beside the tok/s model's prediction from the first arm (its first run's "
                                    "routing, its runs' median costs): a screen with the progress and the arms "
                                    "(compare two arms, the what-if with the measured points), or with --once / "
                                    "--json the table or the document (docs/analysis.md \"The sweep\").")
    sw.add_argument("-m", "--model", required=True, metavar="GGUF", help="the model")
    sw.add_argument("--cache-mb", required=True, metavar="LIST", help="cache budgets, MiB, comma-separated; the "
                                                                      "first is the reference")
    sw.add_argument("--io-threads", default="1", metavar="LIST", help="read lanes, comma-separated (default 1)")
    sw.add_argument("--overlap", action="store_true", help="every run with --overlap")
    sw.add_argument("--runs", type=_count, default=1, metavar="N", help="runs per arm (default 1)")
    sw.add_argument("--order", default="interleaved", metavar="ORDER",
                    help="interleaved (every arm once a round), reversed (every other round backwards) or random")
    sw.add_argument("--seed", type=int, default=0, help="the shuffle of --order random")
    what = sw.add_mutually_exclusive_group()
    what.add_argument("-p", "--prompt", default="Hello", help="the prompt (default 'Hello')")
    what.add_argument("--prompts", metavar="FILE", help="the prompt from a file")
    sw.add_argument("-n", "--n-predict", type=_count, default=32, metavar="N", help="tokens per run (default 32)")
    sw.add_argument("-o", "--out", required=True, metavar="DIR", help="the folder every run is recorded in")
    sw.add_argument("--timeout", type=_seconds, default=600.0, metavar="S", help="seconds per run (600)")
    sw.add_argument("--runtime", metavar="CMD", help="the runtime's command (default: the bundled bmoe-run)")
    sw.add_argument("--extra", action="append", metavar="FLAG", help="a flag for every run (repeatable)")
    sw.add_argument("--json", action="store_true", help="print the result as JSON, no screen")
    sw.add_argument("--once", action="store_true", help="no screen: progress on stderr, the table (or with --json "
                                                        "the document) on stdout")
    _ascii_flag(sw, refresh=False)
    sw.set_defaults(func=cmd_sweep)


def add_probe_parser(sub: Any) -> None:
    pr = sub.add_parser("probe", help="read bandwidth of a model file at its expert-slice size, per queue depth",
                        description="Measure O_DIRECT and buffered (cold) read bandwidth of PATH at the "
                                    "model's expert-slice size: queue depths 1..N, threads issuing pread at "
                                    "random 4 KiB-aligned offsets, fio's randread pattern (docs/user-guide.md "
                                    "\"probe\").")
    pr.add_argument("path", metavar="PATH", help="the model (GGUF: the slice size is read from it) or any file")
    pr.add_argument("--json", action="store_true", help="print the result as JSON")
    pr.add_argument("--qd-max", type=int, default=8, metavar="N", help="queue depths 1..N (default 8)")
    pr.add_argument("--slice-bytes", type=int, metavar="B", help="bytes per read (default: the GGUF's expert slice)")
    pr.add_argument("--seconds", type=float, default=1.0, metavar="S", help="seconds per depth and mode (default 1)")
    pr.add_argument("--remember", action="store_true",
                    help="keep the result in the settings file's [probe] section for the what-if")
    _config_flags(pr, argparse.SUPPRESS)
    pr.set_defaults(func=cmd_probe)


def _since(text: str) -> float:
    """``--since``: a duration back from now (``90s``, ``10m``, ``2h``, ``1d``), a unix time, or
    an ISO 8601 date/time (without a zone: UTC)."""
    import time
    from datetime import UTC, datetime

    from bmoe_top.tui.sources.prometheus import parse_duration

    s = text.strip()
    try:
        return time.time() - (float(s[:-1]) * 86400 if s.endswith("d") and s[:-1].isdigit() else parse_duration(s))
    except ValueError:
        pass
    try:
        if math.isfinite(at_s := float(s)):
            return at_s
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration back from now (10m, 2h, 1d), a unix time or an "
                                         "ISO date/time (2026-12-05T06:00:00Z)") from None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def cmd_events(args: argparse.Namespace) -> int:
    """``bmoe-top events``: the event log, listed and filtered (docs/events.md)."""
    from bmoe_top.parsers.events import KINDS
    from bmoe_top.tui.jobs.event_file import default_path, log_files, read_events
    from bmoe_top.tui.present.events import EventFilter, events_document, events_lines
    from bmoe_top.tui.present.numbers import print_json, print_lines

    kinds = tuple(k for part in args.kind for k in part.split(",") if k)
    if bad := [k for k in kinds if k not in KINDS]:
        return _die(f"events: --kind {bad[0]}: one of {', '.join(KINDS)}")
    paths = [Path(p) for p in args.files] if args.files else log_files(default_path())
    read, unread = read_events(paths)
    present = [str(p) for p in paths if os.path.lexists(p)]
    names = present or [str(p) for p in paths] or [str(default_path())]  # a missing log is named as asked
    flt = EventFilter(kinds, args.since, args.grep or "")
    if unread and len(unread) == len(present):  # no file read (a folder, unreadable): the reasons alone
        pass
    elif args.json:
        print_json(events_document(read, names, unread, flt))
    else:
        print_lines(events_lines(read, names, flt))
    for why in unread:
        _die(f"events: {why}")
    return EXIT_FAILED if unread else 0


def add_events_parser(sub: Any) -> None:
    ev = sub.add_parser("events", help="list the event log: alerts, diagnosis, source states, turns (headless)",
                        description="List the events bmoe-top's run screens recorded (docs/events.md): by "
                                    "default the log in the user's state folder with its rotated files, "
                                    "oldest first. An empty or missing log is no error.")
    ev.add_argument("files", nargs="*", metavar="FILE", help="event logs to read (default: the state folder's)")
    ev.add_argument("--json", action="store_true", help="print a JSON document")
    ev.add_argument("--kind", action="append", default=[], metavar="K",
                    help="only events of this kind: alert, diagnosis, source, turn (repeat or comma-separate)")
    ev.add_argument("--since", type=_since, metavar="T",
                    help="only events at or after T: a duration back from now (10m, 2h, 1d), a unix time or an "
                         "ISO date/time (UTC without a zone)")
    ev.add_argument("--grep", metavar="S", help="only events with this text in a field (case-insensitive)")
    ev.set_defaults(func=cmd_events)


class _Parser(argparse.ArgumentParser):
    """A wrong command line is one line on stderr and exit status 2 (docs/user-guide.md "Exit
    status"): the error and where the options are listed, not the usage block first. Sub-command
    parsers are of the same class (``add_subparsers`` makes them so)."""

    def error(self, message: str) -> NoReturn:
        from bmoe_top.parsers.sanitize import sanitize

        # (the message quotes what was typed: an argument may hold an escape sequence)
        sys.stderr.write(f"{self.prog}: error: {sanitize(message)} (see {self.prog} --help)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import version

    p = _Parser(
        prog="bmoe-top", description="Terminal observatory for MoE expert streaming. Without a sub-command, "
        "bmoe-top starts the live demo: the bundled runtime (bmoe-run) on its demo model, with a prompt box "
        f"(Enter sends {DEMO_PROMPT!r}, {DEMO_N_PREDICT} tokens), in {DEMO_SPEED:g}x slow motion (End: real time).")
    p.add_argument("--version", action="version", version=f"bmoe-top {version('bmoe-top')}")
    p.add_argument("--fps", type=_fps, default=10.0,
                   help="screen ticks per second: replay frames, and how soon a key shows (default 10)")
    p.add_argument("--refresh", type=_refresh_s, default=None, metavar="S", help=REFRESH_HELP)
    p.add_argument("--ascii", action="store_true", help="ASCII glyphs only (also chosen when the locale has no UTF-8)")
    _config_flags(p)
    sub = p.add_subparsers(dest="cmd")

    r = sub.add_parser("replay", help="replay recorded runs (CSV, transcripts, route traces, recordings)")
    r.add_argument("paths", nargs="+", metavar="PATH")
    r.add_argument("--summary", action="store_true", help="print the run summary, no UI")
    r.add_argument("--json", action="store_true", help="with --summary: as JSON")
    r.add_argument("--allow-mixed", action="store_true",
                   help="load files of different runs (another model or arch) together instead of refusing")
    r.add_argument("--fps", type=_fps, default=10.0, help=argparse.SUPPRESS)
    _ascii_flag(r)
    r.set_defaults(func=cmd_replay)

    lp = sub.add_parser("launch", help="run a session-protocol program (default: bmoe-run) and watch it live",
                        description="Run a session-protocol program as a child (own process group, "
                                    "pipes) and show it live. Default: bmoe-run --session --route-telemetry "
                                    f"{' '.join(DEMO_SAMPLING)} (light seeded sampling: the small demo model "
                                    "loops when greedy; docs/demo-model.md).")
    lp.add_argument("-m", "--model", help="GGUF for the bundled runtime (default: the demo model)")
    lp.add_argument("--ready-timeout", type=_seconds, default=300.0, metavar="S",
                    help="seconds to wait for BMOE_READY before saying so (default 300)")
    lp.add_argument("--turn-timeout", type=_seconds, default=TURN_TIMEOUT_S, metavar="S",
                    help="with --once: the deadline of the turn, seconds from the request to its end (default "
                         f"{TURN_TIMEOUT_S:g}); past it the child is closed and --once says what its stdout gave")
    lp.add_argument("--once", action="store_true", help="headless: one generation, print its numbers, exit")
    lp.add_argument("--json", action="store_true", help="with --once: print JSON")
    lp.add_argument("-p", "--prompt", default="Hello", help="with --once: the prompt (default 'Hello')")
    lp.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the program to run")
    _live_common(lp)
    lp.set_defaults(func=cmd_launch)

    ap = sub.add_parser("attach", help="attach to a running session (--session SOCK), /metrics (--metrics URL) "
                                       "or an audit log (--audit FILE)")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--session", metavar="PATH", help="Unix socket of bmoe-run --session --session-socket PATH")
    what.add_argument("--metrics", metavar="URL", help="a /metrics endpoint (bmoe-run serve, llama-server "
                                                       "--metrics); with --pid: the tokens that process generated")
    what.add_argument("--audit", metavar="FILE", help="an audit log to follow like tail -F")
    ap.add_argument("--pid", type=_count, metavar="PID",
                    help="any process that runs a GGUF model (llama-server, llama-cli, ollama, bmoe-run): the "
                         "page-cache residency of its expert slices, its faults, reads and RSS (docs/memory.md)")
    ap.add_argument("--gguf", metavar="FILE", help="a GGUF model's page-cache residency, whatever process uses it")
    ap.add_argument("--residency", choices=("auto", "cachestat", "mincore"), default="auto",
                    help="with --pid/--gguf: how residency is asked (default auto: cachestat where the kernel has "
                         "it, else mincore over a read-only mapping; neither reads the model)")
    ap.add_argument("--api-key", help="with --metrics: bearer token")
    ap.add_argument("--interval", type=_number(*INTERVAL_RANGE, " seconds"), default=None, metavar="S",
                    help="with --metrics, --pid, --gguf: seconds between scrapes or samples (default 1; with "
                         "--once, a second one S later fills the rates)")
    ap.add_argument("--once", action="store_true", help="headless: print what the screen would show, exit")
    ap.add_argument("--json", action="store_true", help="with --once: print JSON")
    ap.add_argument("-p", "--prompt", default=None, help="with --session --once: send this prompt and wait for its end")
    ap.add_argument("--timeout", type=_seconds, default=None, metavar="S",
                    help="--session --once: seconds to wait for the session (default 30, or 0 when no socket is at "
                         "the path: give --timeout to wait for one that is starting); --metrics: the deadline "
                         "of each scrape, seconds for the whole request (default 5 with --once, 2x the "
                         "interval live)")
    ap.add_argument("--max-body-mb", type=_positive_float, default=MAX_METRICS_BODY_MB, metavar="MIB",
                    help=f"with --metrics: the largest /metrics body read, MiB (default "
                         f"{MAX_METRICS_BODY_MB:g}); a larger one is refused, not read")
    ap.add_argument("--slots", action="store_true",
                    help="with --metrics: also read llama-server's /slots (started with --slots): live "
                         "progress of requests its counters count only when they end")
    _live_common(ap)
    ap.set_defaults(func=cmd_attach)

    pp = sub.add_parser("play", help="play a --record recording on the live screen at its original pace",
                        description="Play a recording (bmoe-top --record FILE) through the live screen: "
                                    "original pace (or --speed X faster), optionally pausing at each turn.")
    pp.add_argument("path", metavar="FILE")
    pp.add_argument("--speed", type=_number(0), default=1.0,
                    help="1 = original pace (default), 10 = ten times faster, 0 = no waiting")
    pp.add_argument("--turn-by-turn", action="store_true", help="pause before each turn, the first too; Enter plays it")
    pp.add_argument("--fps", type=_fps, default=10.0, help=argparse.SUPPRESS)
    _ascii_flag(pp)
    pp.set_defaults(func=cmd_play)
    add_fleet_parser(sub)
    add_analysis_parsers(sub)
    add_probe_parser(sub)
    add_events_parser(sub)
    add_sweep_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """The ``bmoe-top`` command (``argv`` None: the program's own command line, and the app it
    runs owns the process: :attr:`~bmoe_top.tui.app.BmoeTopApp.own_process`)."""
    own_process = argv is None
    argv = _join_list_values(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(argv)
    before = _end_on_signals() if getattr(args, "once", False) or getattr(args, "summary", False) else {}
    if getattr(args, "json", False) and not _prints(args):
        return _die(f"{args.cmd}: --json needs --once (--once --json prints the document; without --once, the screen)")
    if not _prints(args):
        if own_process:
            from bmoe_top.tui.app import BmoeTopApp

            BmoeTopApp.own_process = True
        _apply_look(args)
    if (bad := _apply_settings(args)) is not None:
        return bad
    try:
        with guard_stdout():
            if args.cmd is None:
                return default_main(args)
            return int(args.func(args))
    except OutputFileError as e:  # standard output itself (`> /dev/full`): one line, status 1
        if e.path != STDOUT:
            raise
        drop_stdout()
        return _die(str(e), EXIT_FAILED)
    except Terminated as t:
        return 128 + t.signum
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `bmoe-top replay --summary x | head`: not an error
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    finally:
        for sig, h in before.items():
            signal.signal(sig, h)


if __name__ == "__main__":
    sys.exit(main())
