"""``bmoe-top`` command line.

    bmoe-top                                  launch the bundled runtime on its demo model, live
    bmoe-top replay PATH...                   replay recorded runs (any format, sniffed from content)
    bmoe-top replay --summary [--json] PATH   print the run summary without the UI
    bmoe-top launch [--once --json -p P] [-- CMD...]   run a session-protocol program live
    bmoe-top attach --session SOCK | --metrics URL | --audit FILE [--once --json]
    bmoe-top fleet --prometheus URL [--selector S] [--window 5m] --once --json [--instance X]

Bad input (a missing file, an unknown format, an unreachable source) gets one clear line on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import orjson

EXIT_USAGE = 2


def _die(msg: str) -> int:
    print(f"bmoe-top: {msg}", file=sys.stderr)
    return EXIT_USAGE


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    opts = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
    sys.stdout.write(orjson.dumps(_jsonable(obj), option=opts).decode() + "\n")


def format_summary_text(s: dict[str, Any]) -> str:
    """The run panel's numbers as text (same rows, same 'missing' / 'from token rows' marks)."""
    from bmoe_top.tui.run import summary_rows

    lines = [f"sources: {', '.join(s['sources'])}"]
    meta = s["meta"]
    lines.append(f"model: {meta.get('model', 'missing')}  arch: {meta.get('arch', 'missing')}  "
                 f"layers: {s['n_layer'] or 'missing'}  experts: {s['n_expert'] or 'missing'}")
    lines.append(f"mode: {s['mode']} ({s['mode_reason']})")
    for label, text, _kind in summary_rows(s):
        lines.append(f"  {label:<16} {text}")
    lines.append(f"token rows: {s['derived']['token_rows']}  turns: {s['turns']}  "
                 f"routing rows: {s['routing_rows']}  problems: {s['problems']}")
    if s["sidecar"]:
        lines.append("device: " + " ".join(f"{k}={v}" for k, v in s["sidecar"].items()))
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    from bmoe_top.tui.run import run_summary
    from bmoe_top.tui.sources.file_replay import ReplayError, open_paths

    try:
        run = open_paths(args.paths)
    except ReplayError as e:
        return _die(str(e))
    if args.summary or args.json:
        s = run_summary(run)
        if args.json:
            print_json(s)
        else:
            print(format_summary_text(s))
        return 0
    from bmoe_top.tui.app import BmoeTopApp

    title = " + ".join(p.rsplit("/", 1)[-1] for p in args.paths)
    BmoeTopApp(run, title=f"replay {title}", fps=args.fps).run()
    return 0


def cmd_fleet(args: argparse.Namespace) -> int:
    """``bmoe-top fleet``: the instances a Prometheus scrapes (docs/fleet.md)."""
    from bmoe_top.tui.fleet.headless import exit_code, fleet_once
    from bmoe_top.tui.sources.prometheus import parse_duration

    if not (args.once and args.json):
        return _die("fleet: only the headless form is available so far: add --once --json")
    try:
        window = float(args.window) if args.window.replace(".", "", 1).isdigit() else parse_duration(args.window)
        doc = fleet_once(args.prometheus, selector=args.selector, window_s=window, instance=args.instance,
                         job=args.job, api_key=args.api_key, timeout=args.timeout, points=args.points, at=args.at)
    except ValueError as e:
        return _die(f"fleet: {e}")
    print_json(doc)
    return exit_code(doc)


def add_fleet_parser(sub: Any) -> None:
    f = sub.add_parser("fleet", help="many runtimes through a Prometheus server (--prometheus URL)",
                       description="Read a fleet of runtimes from the Prometheus that scrapes them "
                                   "(PromQL query/query_range). docs/fleet.md.")
    f.add_argument("--prometheus", required=True, metavar="URL", help="the Prometheus server, e.g. http://127.0.0.1:9090")
    f.add_argument("--selector", default="", metavar="S", help='PromQL label matchers, e.g. \'{job="bmoe"}\'')
    f.add_argument("--window", default="5m", metavar="D", help="span of the sparklines and the drill-down (default 5m)")
    f.add_argument("--instance", metavar="X", help="also the drill-down of this instance (its instance label)")
    f.add_argument("--job", metavar="J", help="with --instance: its job, when one address serves several")
    f.add_argument("--points", type=int, default=120, metavar="N", help="sparkline points (default 120)")
    f.add_argument("--at", type=float, metavar="T", help="the table's time, Unix seconds (default now)")
    f.add_argument("--api-key", help="bearer token, for a Prometheus behind an authenticating proxy")
    f.add_argument("--timeout", type=float, default=10.0, metavar="S", help="seconds per request (default 10)")
    f.add_argument("--once", action="store_true", help="headless: one refresh, print, exit")
    f.add_argument("--json", action="store_true", help="with --once: as JSON")
    f.set_defaults(func=cmd_fleet)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bmoe-top", description="Terminal observatory for MoE expert streaming.")
    p.add_argument("--fps", type=float, default=10.0, help="maximum repaints per second (default 10)")
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("replay", help="replay recorded runs (CSV, transcripts, route traces, recordings)")
    r.add_argument("paths", nargs="+", metavar="PATH")
    r.add_argument("--summary", action="store_true", help="print the run summary, no UI")
    r.add_argument("--json", action="store_true", help="with --summary: as JSON")
    r.add_argument("--fps", type=float, default=10.0, help=argparse.SUPPRESS)
    r.set_defaults(func=cmd_replay)
    from bmoe_top.tui import live_cli

    live_cli.add_commands(sub)
    add_fleet_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        from bmoe_top.tui import live_cli

        return live_cli.default_main(args)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `bmoe-top replay --summary x | head`: not an error
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


if __name__ == "__main__":
    sys.exit(main())
