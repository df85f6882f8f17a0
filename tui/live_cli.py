"""The live sub-commands of ``bmoe-top`` (hooked in by ``bmoe_top.tui.cli``):

    bmoe-top                                   = launch: the bundled runtime on its demo model
    bmoe-top launch [-m MODEL] [-n N] [--record FILE] [-- CMD...]
    bmoe-top launch --once --json -p PROMPT [-n N] [-- CMD...]   headless: one generation, print numbers
    bmoe-top attach --session PATH [-n N] [--record FILE]
    bmoe-top attach --session PATH --once --json [-p PROMPT]     headless: the session's state (+ one prompt)
    bmoe-top attach --metrics URL | --audit FILE [--once --json]  helper S's sources and screens
    bmoe-top play FILE [--speed X] [--turn-by-turn]               a recording on the live screen, paced

``CMD`` is any program that speaks the session protocol (telemetry-contract.md "Session
mode"), e.g. ``bmoe-cli --session --progress``; without it, ``bmoe-run --session
--route-telemetry`` (the bundled runtime; ``-m`` picks the model, default the demo model).
Bad input (a command that cannot start, an unwritable --record path, a READY timeout) gets
one clear line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

EXIT_USAGE = 2
EXIT_FAILED = 1


def _die(msg: str, code: int = EXIT_USAGE) -> int:
    print(f"bmoe-top: {msg}", file=sys.stderr)
    return code


#: How the bundled runtime samples when bmoe-top launches it: the small demo model loops under
#: greedy decoding (a line of spaces), while light sampling streams recognisable Python.
DEMO_SAMPLING = ["--temp", "0.7", "--top-p", "0.95", "--repeat-penalty", "1.1"]


def runtime_command(model: str | None = None, extra: list[str] | None = None) -> list[str]:
    """The bundled runtime's session command line:
    ``bmoe-run --session --route-telemetry --temp 0.7 --top-p 0.95 --repeat-penalty 1.1 [-m MODEL]``."""
    exe = Path(sys.executable).with_name("bmoe-run")
    if exe.exists():
        cmd = [str(exe)]
    elif shutil.which("bmoe-run"):
        cmd = [shutil.which("bmoe-run")]  # type: ignore[list-item]
    else:
        cmd = [sys.executable, "-m", "bmoe_top.runtime.cli"]
    cmd += ["--session", "--route-telemetry", *DEMO_SAMPLING]
    if model:
        cmd += ["-m", model]
    return cmd + list(extra or [])


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--n-predict", type=int, default=256, help="tokens per generation (default 256)")
    p.add_argument("--record", metavar="FILE", help="write every received line to FILE (JSONL, flushed per line)")
    p.add_argument("--fps", type=float, default=10.0, help=argparse.SUPPRESS)


def add_commands(sub: Any) -> None:
    """Add ``launch`` and ``attach`` to the ``bmoe-top`` sub-parsers."""
    lp = sub.add_parser("launch", help="run a session-protocol program (default: bmoe-run) and watch it live",
                        description="Run a session-protocol program as a child (own process group, "
                                    "pipes) and show it live. Default: bmoe-run --session --route-telemetry.")
    _add_launch_args(lp)
    lp.set_defaults(func=cmd_launch)
    ap = sub.add_parser("attach", help="attach to a running session (--session SOCK), /metrics (--metrics URL) "
                                       "or an audit log (--audit FILE)")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--session", metavar="PATH", help="Unix socket of bmoe-run --session --session-socket PATH")
    what.add_argument("--metrics", metavar="URL", help="a /metrics endpoint (bmoe-run serve)")
    what.add_argument("--audit", metavar="FILE", help="an audit log to follow like tail -F")
    ap.add_argument("--api-key", help="with --metrics: bearer token")
    ap.add_argument("--interval", type=float, default=None, metavar="S",
                    help="with --metrics: seconds between scrapes (default 1; with --once, a second "
                         "scrape S later fills the rates)")
    ap.add_argument("--once", action="store_true", help="headless: print what the screen would show, exit")
    ap.add_argument("--json", action="store_true", help="with --once: print JSON")
    ap.add_argument("-p", "--prompt", default=None, help="with --session --once: send this prompt and wait for its end")
    ap.add_argument("--timeout", type=float, default=30.0, help="with --once: seconds to wait (default 30)")
    _common(ap)
    ap.set_defaults(func=cmd_attach)
    pp = sub.add_parser("play", help="play a --record recording on the live screen at its original pace",
                        description="Play a recording (bmoe-top --record FILE) through the live screen: "
                                    "original pace (or --speed X faster), optionally pausing at each turn.")
    pp.add_argument("path", metavar="FILE")
    pp.add_argument("--speed", type=float, default=1.0,
                    help="1 = original pace (default), 10 = ten times faster, 0 = no waiting")
    pp.add_argument("--turn-by-turn", action="store_true", help="pause before each turn; Enter or n plays the next")
    pp.add_argument("--fps", type=float, default=10.0, help=argparse.SUPPRESS)
    pp.set_defaults(func=cmd_play)


def _add_launch_args(lp: argparse.ArgumentParser) -> None:
    lp.add_argument("-m", "--model", help="GGUF for the bundled runtime (default: the demo model)")
    lp.add_argument("--ready-timeout", type=float, default=300.0, metavar="S",
                    help="seconds to wait for BMOE_READY before saying so (default 300)")
    lp.add_argument("--once", action="store_true", help="headless: one generation, print its numbers, exit")
    lp.add_argument("--json", action="store_true", help="with --once: print JSON")
    lp.add_argument("-p", "--prompt", default="Hello", help="with --once: the prompt (default 'Hello')")
    lp.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the program to run")
    _common(lp)


def _child_argv(args: argparse.Namespace) -> list[str]:
    cmd = list(getattr(args, "command", None) or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return cmd or runtime_command(getattr(args, "model", None))


def _recorder(args: argparse.Namespace):
    if not getattr(args, "record", None):
        return None
    from bmoe_top.tui.sources.recorder import Recorder

    return Recorder(args.record)


def cmd_launch(args: argparse.Namespace) -> int:
    from bmoe_top.tui.sources.child_session import ChildSession

    argv = _child_argv(args)
    try:
        rec = _recorder(args)
    except OSError as e:
        return _die(f"cannot record to {args.record}: {e.strerror or e}")
    src = ChildSession(argv, recorder=rec, ready_timeout_s=getattr(args, "ready_timeout", 300.0))
    try:
        if getattr(args, "once", False):
            return _once(src, args)
        from bmoe_top.tui.screens.live import run_live

        name = Path(argv[0]).name if argv else "?"
        return run_live(src, title=f"launch {name}", n_predict=args.n_predict, fps=args.fps)
    finally:
        src.close()
        if rec is not None:
            rec.close()


def cmd_attach(args: argparse.Namespace) -> int:
    if args.metrics is not None or args.audit is not None:
        if not (args.metrics or args.audit):
            return _die("attach: an empty URL or path")
        return _attach_network(args)
    from bmoe_top.tui.sources.session_socket import SessionSocketClient

    try:
        rec = _recorder(args)
    except OSError as e:
        return _die(f"cannot record to {args.record}: {e.strerror or e}")
    src = SessionSocketClient(args.session, recorder=rec)
    try:
        if args.once:
            return _attach_once(src, args)
        from bmoe_top.tui.screens.live import run_live

        return run_live(src, title=f"attach {args.session}", n_predict=args.n_predict, fps=args.fps)
    finally:
        src.close()
        if rec is not None:
            rec.close()


def _attach_network(args: argparse.Namespace) -> int:
    """--metrics / --audit: helper S's headless twins (``tui/headless_attach.py``) and screens
    (``tui/screens/attach_metrics.py`` / ``attach_audit.py``, entry point ``run_attach(args)``)."""
    if args.once:
        try:
            from bmoe_top.tui import headless_attach as ha
        except ImportError:
            return _die("attach --metrics/--audit is not available in this build")
        if args.metrics is not None:
            d = ha.metrics_once(args.metrics, api_key=args.api_key, interval=args.interval or 0.0)
        else:
            d = ha.audit_once(args.audit)
        if args.json:
            print(ha.to_json(d))
        else:
            print(f"{args.metrics or args.audit}: {d.get('status')} {d.get('detail') or ''}".rstrip())
        return ha.exit_code(d)
    modname = "attach_metrics" if args.metrics is not None else "attach_audit"
    try:
        import importlib

        mod = importlib.import_module(f"bmoe_top.tui.screens.{modname}")
        run_attach = mod.run_attach
    except (ImportError, AttributeError):
        return _die(f"the {modname.replace('_', ' ')} screen is not available in this build; try --once --json")
    return int(run_attach(args) or 0)


def _attach_once(src, args: argparse.Namespace) -> int:
    """Headless attach: connect, take the replayed state (and run one prompt with -p), print."""
    from bmoe_top.tui.run import RunModel, run_summary

    run = RunModel()
    src.connect(lambda r, t: run.ingest(r, t, source="socket"),
                on_event=lambda k, i: run.note_request(i["request"]) if k == "request" else None)
    run.sources.append(f"socket: {args.session}")
    src.start()
    if not src.wait_state({"ready", "generating"}, args.timeout):
        return _die(f"no session on {args.session} after {args.timeout:g} s ({src.status().message})", EXIT_FAILED)
    time.sleep(0.2)  # let the replay of the current state arrive
    rid = None
    if args.prompt is not None:
        src.wait_state("ready", args.timeout)
        before = src.status().turns_done
        rid = src.generate(args.prompt, args.n_predict)
        end = time.monotonic() + args.timeout
        while time.monotonic() < end:
            st = src.status()
            if st.turns_done > before or (st.last_error and st.state == "ready") or st.state == "disconnected":
                break
            time.sleep(0.02)
    st = src.status()
    out = {**run_summary(run), "live": _live_block(st, run, rid)}
    from bmoe_top.tui.cli import format_summary_text, print_json

    if args.json:
        print_json(out)
    else:
        print(format_summary_text(out))
        print(f"live: {st.message}; turns {st.turns_done}")
    return 0 if st.state in ("ready", "generating") and not (args.prompt and st.last_error) else EXIT_FAILED


def _live_block(st, run, rid) -> dict:
    return {
        "state": st.state, "message": st.message, "exit_code": st.exit_code, "request_id": rid,
        "ready": None if st.ready is None else {"load_s": st.ready.load_s, "arch": st.ready.arch,
                                                "n_ctx": st.ready.n_ctx},
        "turns": [dict(t.done) for t in run.turns if t.done], "error": st.last_error,
        "text": run.turns[-1].text if run.turns else "",
        "problems": [f"line {p.lineno}: {p.reason}" for p in st.problems],
    }


def cmd_play(args: argparse.Namespace) -> int:
    from bmoe_top.tui.sources.recorder import LiveReplaySource, load_recording

    try:
        rec = load_recording(args.path)
    except OSError as e:
        return _die(f"cannot read {args.path}: {e.strerror or e}")
    if not rec.entries:
        first = rec.problems[0] if rec.problems else None
        what = f" ({len(rec.problems)} bad lines; first: line {first.lineno}: {first.reason})" if first else ""
        return _die(f"{args.path} holds no recorded lines{what}")
    if args.speed < 0:
        return _die("--speed must be >= 0")
    src = LiveReplaySource(rec, speed=float("inf") if args.speed == 0 else args.speed, turn_by_turn=args.turn_by_turn)
    from bmoe_top.tui.screens.live import run_live

    return run_live(src, title=f"play {Path(args.path).name}", fps=args.fps)


def default_main(args: argparse.Namespace) -> int:
    """``bmoe-top`` with no sub-command: launch the bundled runtime on the demo model."""
    ns = argparse.Namespace(model=None, ready_timeout=300.0, once=False, json=False, prompt="Hello",
                            command=[], n_predict=256, record=None, fps=getattr(args, "fps", 10.0))
    return cmd_launch(ns)


def _once(src, args: argparse.Namespace) -> int:
    """Headless twin of the live screen: one generation, then the numbers the screen shows."""
    from bmoe_top.tui.run import RunModel, run_summary

    run = RunModel()
    src.connect(lambda r, t: run.ingest(r, t, source="child"),
                on_stderr=lambda line, t: run.log.append(line),
                on_event=lambda k, i: run.note_request(i["request"]) if k == "request" else None)
    run.sources.append("child: " + " ".join(src.argv))

    def fail(msg: str) -> int:
        """One stderr line; with --json also the JSON a script expects (status and error)."""
        if args.json:
            from bmoe_top.tui.cli import print_json

            print_json({"status": "failed", "error": msg, "sources": run.sources,
                        "live": {"state": src.state, "exit_code": src.status().exit_code}})
        return _die(msg, EXIT_FAILED)

    src.start()
    st = src.status()
    if st.state == "failed":
        return fail(st.message)
    if not src.wait_state({"ready", "exited", "aborted", "failed"}, args.ready_timeout):
        return fail(f"no BMOE_READY from {src.argv[0]} after {args.ready_timeout:g} s")
    if src.state != "ready":
        return fail(src.status().message)
    t0 = time.monotonic()
    rid = src.generate(args.prompt, args.n_predict, clear_kv=True)
    # wait for the turn's end (DONE or rejection), or the child's end
    while True:
        st = src.status()
        if st.turns_done >= 1 or st.state in ("exited", "aborted", "failed"):
            break
        if st.last_error is not None and st.state == "ready":
            break
        time.sleep(0.02)
    wall = time.monotonic() - t0
    src.close()
    st = src.status()
    with run.lock:
        run.status = "aborted" if st.state in ("aborted", "failed") else "done"
        run.status_detail = st.message
    summary = run_summary(run)
    done = [dict(t.done) for t in run.turns if t.done]
    out = {**summary, "live": {**_live_block(st, run, rid), "wall_s": round(wall, 3)}}
    from bmoe_top.tui.cli import format_summary_text, print_json

    if args.json:
        print_json(out)
    else:
        print(format_summary_text(summary))
        print(f"live: {st.message}; turns {len(done)}; error: {st.last_error or 'none'}")
    ok = bool(done) and st.state == "exited" and st.last_error is None
    return 0 if ok else EXIT_FAILED
