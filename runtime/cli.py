"""``bmoe-run``: run a MoE GGUF with expert streaming and print the telemetry contract.

    bmoe-run [-m MODEL] [-p PROMPT] [-n N] [-c N_CTX] [-t THREADS] [--cache-mb N] [--io-threads N]
             [--no-odirect] [--overlap] [--prefetch K] [--early-prefetch M] [--progress] [--csv PATH] [--session]
             [--route-telemetry] [--route-trace PATH] [--force] [--no-moe-stream] [--no-fill]
             [--huge-pages auto|on|off] [--quiet]
    bmoe-run make-model [--preset demo|bench|tiny | --arch NAME] [--qtype Q] [--force] OUT.gguf  (models.py)
    bmoe-run serve ...                                                       (runtime/server.py)
    bmoe-run make-profile MODEL TEXT -o OUT.strp [--force] ...               (runtime/strp.py)

stdout carries only the protocol (and, without --progress, the answer inline); llama.cpp's log
goes to stderr (dropped with --quiet). Bad input gets one line on stderr and a non-zero exit
(exit 2: bad arguments/model/budget, or a --csv / --route-trace file that is refused; 1: a failed
generation, or a write to one of those files that failed; 130: interrupted). Those files are never
written through a symbolic link, and an existing one only with --force (bmoe_top/outfile.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, NoReturn

from bmoe_top.outfile import STDOUT, OutputFileError, check_output, drop_stdout, guard_stdout

from .sampling import Sampling, add_sampling_args, sampling_from_args

USAGE_ERR = 2


def _make_model(argv: list[str]) -> int:
    from .models import models_main

    return models_main(argv)


def _serve(argv: list[str]) -> int:
    from .serve import serve_main

    return serve_main(argv)


def _make_profile(argv: list[str]) -> int:
    from .strp import make_profile_main

    return make_profile_main(argv)


#: sub-commands handled by other modules
SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
    "make-model": _make_model,
    "serve": _serve,
    "make-profile": _make_profile,
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        sys.stderr.write(f"bmoe-run: error: {message} (see bmoe-run --help)\n")
        raise SystemExit(USAGE_ERR)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="bmoe-run",
        description="Run a Mixture-of-Experts GGUF on llama.cpp, streaming expert weights from the file "
        "through a RAM expert cache, and print the BMOE telemetry contract. "
        "Sub-commands: make-model, serve, make-profile.",
    )
    ap.add_argument("-m", "--model", help="GGUF model, or the first shard of a split one (default: the demo model)")
    ap.add_argument("-p", "--prompt", default=None, help="prompt text (default: 'Hello')")
    ap.add_argument("-f", "--file", default=None, help="read the prompt from this file")
    ap.add_argument("-n", "--n-predict", type=int, default=64, help="tokens to generate (default 64)")
    ap.add_argument("-c", "--ctx-size", type=int, default=2048, help="context size in tokens (default 2048)")
    ap.add_argument("-t", "--threads", type=int, default=None, help="compute threads (default: all cores)")
    ap.add_argument("-b", "--batch-size", type=int, default=None, help="prefill batch (default min(ctx, 2048))")
    ap.add_argument("--cache-mb", type=float, default=None,
                    help="expert cache budget in MiB (default: 25%% of the expert bank, at least 2 tokens' "
                    "working set; 0 = no cache)")
    ap.add_argument("--force-cache", action="store_true", help="accept a budget below one token's working set")
    ap.add_argument("--io-threads", type=int, default=1, help="read lanes (default 1)")
    ap.add_argument("--no-odirect", action="store_true", help="read through the page cache instead of O_DIRECT")
    ap.add_argument("--overlap", action="store_true", help="speculative reads on idle I/O lanes (implies --prefetch 1)")
    ap.add_argument("--prefetch", type=int, default=0, metavar="K",
                    help="prefetch the previous token's experts for the next K layers")
    ap.add_argument("--early-prefetch", type=int, default=0, metavar="M",
                    help="at each layer's routing, read ahead the M experts the next layer's router predicts "
                    "from this layer's router input (at most 8; default 0 = off)")
    ap.add_argument("--moe-stream", dest="stream", action="store_true", default=True,
                    help="stream experts (default; accepted for compatibility)")
    ap.add_argument("--no-moe-stream", dest="stream", action="store_false",
                    help="run fully resident (same telemetry, no BMOE_LOAD, no moe-* lines)")
    ap.add_argument("--no-fill", dest="fill", action="store_false",
                    help="with a cache that holds every expert, read each expert when first routed rather "
                    "than the rest of the bank right after the prefill")
    ap.add_argument("--huge-pages", choices=["auto", "on", "off"], default="auto",
                    help="resident: read the weights into 2 MiB pages (fewer TLB misses a token) rather than map "
                    "the file; auto = for a file of 8 MiB or more that fits in half the available memory. "
                    "Streaming in frames: the frame pools in 2 MiB pages (auto, on) or 4 KiB pages (off: "
                    "a faster load where fresh 2 MiB pages are slow to fault in)")
    ap.add_argument("--progress", action="store_true", help="per-token BMOE lines, then === answer === / === perf ===")
    ap.add_argument("--csv", default=None, metavar="PATH", help="per-token CSV sink")
    ap.add_argument("--session", action="store_true", help="keep the model loaded; JSON requests on stdin")
    ap.add_argument("--session-socket", default=None, metavar="PATH",
                    help="with --session: also broadcast every line on this Unix socket (and accept requests)")
    ap.add_argument("--route-telemetry", action="store_true",
                    help="BMOE_ROUTE per token and BMOE_RESIDENT periodically (implies --progress)")
    ap.add_argument("--resident-every", type=int, default=8, metavar="N",
                    help="with --route-telemetry: BMOE_RESIDENT every N tokens (default 8)")
    ap.add_argument("--route-trace", default=None, metavar="PATH", help="write the route-trace CSV")
    ap.add_argument("--force", action="store_true",
                    help="replace an existing --csv / --route-trace file (never written through a symbolic link)")
    ap.add_argument("--moe-cache-profile", default=None, metavar="FILE",
                    help="fill the expert cache at load from an STRP profile, hottest first (runtime/cache_policy.py)")
    ap.add_argument("--moe-cache-adaptive", action="store_true",
                    help="heat-based expert swaps while generating (runtime/cache_policy.py)")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--quiet", action="store_true", help="silence llama.cpp's log (stderr)")
    add_sampling_args(ap)
    return ap


def _reason(e: OSError) -> str:
    """Why an output file could not be written, in words."""
    return e.reason if isinstance(e, OutputFileError) else str(e.strerror or e)


class _Fail(Exception):
    """A one-line error for stderr and the exit status (``fatal_line``: also a BMOE_ERROR in
    session mode, because the model never became ready)."""

    def __init__(self, msg: str, code: int = USAGE_ERR, fatal_line: bool = False) -> None:
        super().__init__(msg)
        self.code = code
        self.fatal_line = fatal_line


def _fail(msg: str, code: int = USAGE_ERR) -> int:
    sys.stderr.write(f"bmoe-run: error: {msg}\n")
    sys.stderr.flush()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``bmoe-run`` and its sub-commands. A write error on standard output (``> /dev/full``) is
    one line on stderr and exit status 1, for every command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with guard_stdout():
        try:
            return _main(argv)
        except OutputFileError as e:  # standard output (make-model's line, --help): see guard_stdout
            drop_stdout()
            return _fail(str(e), 1)


def _main(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        return int(SUBCOMMANDS[argv[0]](argv[1:]) or 0)
    args = build_parser().parse_args(argv)

    def _term(_sig: int, _frm: object) -> None:
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, _term)
    except (ValueError, OSError):  # not the main thread (embedded use)
        pass
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 1


def _run(args: argparse.Namespace) -> int:
    from .telemetry import Emitter, error_line

    emit = Emitter(sys.stdout)
    if _wants_progress(args):
        # ggml_abort runs gdb for a backtrace, and gdb writes it on stdout, which these modes give to
        # a reader of their lines; the assert itself still goes to stderr
        os.environ.setdefault("GGML_NO_BACKTRACE", "1")
    try:
        _check_args(args)
        prompt = _read_prompt(args)
        sampling = _sampling(args)
        with ExitStack() as stack:
            eng = _open_engine(args, sampling)
            stack.callback(eng.close)
            flags = _run_flags(args, sampling, eng)
            ext = _cache_policy(args, eng, flags)
            sinks = _Sinks(args, eng, flags, stack)
            lines = _TokenLines(args, eng, ext, sinks)
            if args.session:
                code = _session(args, eng, emit, lines, sinks, stack)
            else:
                code = _one_shot(args, eng, emit, lines, sinks, prompt)
        if emit.error is not None and not isinstance(emit.error, BrokenPipeError):
            # the lines could not be written (a full disk behind `> file`): the run's output is lost
            drop_stdout()
            err = emit.error
            return _fail(str(err) if isinstance(err, OutputFileError) else f"cannot write standard output: {err}", 1)
        return code
    except _Fail as f:
        if f.fatal_line and args.session:
            emit.line(error_line(None, True, str(f)))
        return _fail(str(f), f.code)
    except OutputFileError as e:  # a --csv / --route-trace (or standard output) write failed: loud, exit 1
        if e.path == STDOUT:
            drop_stdout()
        elif args.session:
            emit.line(error_line(None, True, str(e)))
        return _fail(str(e), 1)


# -- the steps of a run --------------------------------------------------------------------------
def _check_args(args: argparse.Namespace) -> None:
    for bad, msg in (
        (args.n_predict < 0, "-n must be >= 0"),
        (args.ctx_size < 8, "-c must be >= 8"),
        (args.io_threads < 1, "--io-threads must be >= 1"),
        (args.prefetch < 0, "--prefetch must be >= 0"),
        (not 0 <= args.early_prefetch <= 8, "--early-prefetch must be 0..8"),
        (args.cache_mb is not None and args.cache_mb < 0, "--cache-mb must be >= 0"),
        (bool(args.session_socket) and not args.session, "--session-socket needs --session"),
    ):
        if bad:
            raise _Fail(msg)
    for opt, path in (("--csv", args.csv), ("--route-trace", args.route_trace)):
        if path:  # refused before the model loads, not after
            try:
                check_output(path, force=args.force)
            except OutputFileError as e:
                raise _Fail(f"cannot write {opt} {path}: {e.reason}") from None


def _read_prompt(args: argparse.Namespace) -> str:
    if args.file:
        try:
            with open(args.file, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError as e:
            raise _Fail(f"cannot read prompt file {args.file}: {e.strerror or e}") from None
    return "Hello" if args.prompt is None else args.prompt


def _sampling(args: argparse.Namespace) -> Sampling:
    try:
        return sampling_from_args(args)
    except ValueError as e:
        raise _Fail(str(e)) from None


def _wants_progress(args: argparse.Namespace) -> bool:
    return bool(args.progress or args.route_telemetry or args.session)


def _open_engine(args: argparse.Namespace, sampling: Sampling) -> Any:
    from .engine import Engine, EngineError, ModelError

    try:
        return Engine(
            args.model,
            n_ctx=args.ctx_size,
            n_threads=args.threads,
            n_batch=args.batch_size,
            cache_mb=args.cache_mb,
            stream=args.stream,
            io_threads=args.io_threads,
            o_direct=not args.no_odirect,
            overlap=args.overlap,
            prefetch=args.prefetch,
            early_prefetch=args.early_prefetch,
            force_cache=args.force_cache,
            route_telemetry=args.route_telemetry,
            route_weights=bool(args.route_trace),
            quiet=args.quiet,
            flash_attn=None if args.flash_attn == "auto" else args.flash_attn == "on",
            huge_pages=None if args.huge_pages == "auto" else args.huge_pages == "on",
            fill=args.fill,
            sampling=sampling,
            process_stats=True,
        )
    except (ModelError, EngineError) as e:
        raise _Fail(str(e), fatal_line=True) from None
    except OSError as e:
        raise _Fail(f"{e.strerror or e}", fatal_line=True) from None


def _run_flags(args: argparse.Namespace, sampling: Sampling, eng: Any) -> dict[str, object]:
    """The run's settings as the CSV header writes them (``# moe_stream=.. cache_mb=.. ...``)."""
    flags: dict[str, object] = {
        "moe_stream": args.stream,
        "cache_mb": round(eng.budget_mib, 3) if eng.stream else 0,
        "force_cache": args.force_cache,
        "io_threads": args.io_threads,
        "o_direct": eng.o_direct,
        "overlap": args.overlap,
        "prefetch": args.prefetch,
        "n_predict": args.n_predict,
    }
    if not sampling.greedy:
        flags.update(temp=args.temp, top_k=args.top_k, top_p=args.top_p, repeat_penalty=args.repeat_penalty,
                     seed=args.seed)
    return flags


def _cache_policy(args: argparse.Namespace, eng: Any, flags: dict[str, object]) -> Any:
    """``--moe-cache-profile`` / ``--moe-cache-adaptive``: the policy object, or None."""
    if not (args.moe_cache_profile or args.moe_cache_adaptive):
        return None
    from .cache_policy import MoeCacheExt, ProfileError, load_profile

    if eng.cache is None or eng.cache.no_cache:
        raise _Fail("--moe-cache-profile/--moe-cache-adaptive need an expert cache (streaming with --cache-mb > 0)",
                    fatal_line=True)
    profile = None
    t_fill = time.perf_counter()
    if args.moe_cache_profile:
        try:
            profile = load_profile(args.moe_cache_profile, eng.n_layer, eng.n_expert)
        except ProfileError as e:
            raise _Fail(f"--moe-cache-profile {e}") from None
    ext = MoeCacheExt(eng, profile=profile, adaptive=args.moe_cache_adaptive)
    eng.load_s += time.perf_counter() - t_fill  # the profile fill is part of loading
    flags["moe_cache_profile"] = os.path.basename(args.moe_cache_profile) if profile is not None else "none"
    flags["moe_cache_adaptive"] = bool(args.moe_cache_adaptive)
    return ext


class _Sinks:
    """The files a run writes (``--csv``, ``--route-trace``), closed with the run's stack."""

    def __init__(self, args: argparse.Namespace, eng: Any, flags: dict[str, object], stack: ExitStack) -> None:
        from .telemetry import CsvSink, RouteTraceSink

        self.csv = self.trace = None
        if args.csv:
            try:
                self.csv = CsvSink(args.csv, eng, flags, force=args.force)
            except OSError as e:
                raise _Fail(f"cannot write --csv {args.csv}: {_reason(e)}") from None
            stack.callback(self.csv.close)
        if args.route_trace:
            try:
                self.trace = RouteTraceSink(args.route_trace, eng, force=args.force)
            except OSError as e:
                raise _Fail(f"cannot write --route-trace {args.route_trace}: {_reason(e)}") from None
            stack.callback(self.trace.close)

    def summary(self, eng: Any, res: Any) -> None:
        if self.csv is not None:
            self.csv.summary(eng, res)


class _TokenLines:
    """The lines a decoded token produces (BMOE_LOAD / ROUTE / PROGRESS / RESIDENT), the CSV row,
    and the cache policy's between-token step."""

    def __init__(self, args: argparse.Namespace, eng: Any, ext: Any, sinks: _Sinks) -> None:
        self.eng = eng
        self.ext = ext
        self.sinks = sinks
        self.progress = _wants_progress(args)
        self.route = bool(args.route_telemetry)
        self.every = max(1, args.resident_every)

    def __call__(self, st: Any) -> list[str]:
        from .telemetry import load_line, progress_line, resident_line, route_line

        if self.ext is not None:
            self.ext.after_token()  # adaptive swaps happen between tokens, on the decode thread
        if self.sinks.csv is not None:
            self.sinks.csv.row(st)
        if not self.progress:
            return []
        eng = self.eng
        out = []
        if eng.stream:
            ln = load_line(st)
            if ln:
                out.append(ln)
        if self.route and st.route is not None:
            out.append(route_line(st.step, eng.turn, "decode", st.route, st.route_tier))
        out.append(progress_line(st))
        if self.route and (st.step % self.every == 0 or st.step == st.steps):
            out.append(resident_line(eng, st.step))
        return out

    def prefill(self) -> list[str]:
        from .telemetry import route_line

        if not self.route or self.eng.last_prefill_route is None:
            return []
        return [route_line(0, self.eng.turn, "prefill", self.eng.last_prefill_route)]


def _session(args: argparse.Namespace, eng: Any, emit: Any, lines: _TokenLines, sinks: _Sinks,
             stack: ExitStack) -> int:
    from .session import Session, start_reader
    from .session_socket import SessionSocketServer
    from .telemetry import error_line

    sess = Session(eng, emit, lines, default_n_predict=args.n_predict, on_result=lambda res: sinks.summary(eng, res),
                   prefill_lines=lines.prefill)
    if args.session_socket:
        try:
            sock = SessionSocketServer(args.session_socket, on_request=lambda req, _c: sess.submit(req))
            sock.start()
        except Exception as e:  # noqa: BLE001 - one line, fatal
            emit.line(error_line(None, True, f"session socket {args.session_socket}: {e}"))
            raise _Fail(f"session socket {args.session_socket}: {e}") from None
        stack.callback(sock.close)
        emit.also = sock.broadcast
    start_reader(sess, close_on_eof=not args.session_socket)
    return sess.run()


def _one_shot(args: argparse.Namespace, eng: Any, emit: Any, lines: _TokenLines, sinks: _Sinks, prompt: str) -> int:
    from .engine import GenerationError, RequestError
    from .telemetry import resident_line, summary_text_lines

    stop = threading.Event()
    shown = [0]  # characters of the answer already written inline

    def on_token(st: Any) -> None:
        for ln in lines(st):
            emit.line(ln)
        if emit.broken:  # the reader went away: stop decoding
            stop.set()
        if not lines.progress:
            emit.raw(st.piece)
            shown[0] += len(st.piece)

    def on_prefill(_s: float, _n: int) -> None:
        for ln in lines.prefill():
            emit.line(ln)

    try:
        eng.check_request(prompt, args.n_predict, True)
        if not lines.progress:
            emit.raw(prompt)
        res = eng.generate(prompt, args.n_predict, clear_kv=True, on_token=on_token, cancel=stop, on_prefill=on_prefill)
    except RequestError as e:
        raise _Fail(str(e)) from None
    except GenerationError as e:
        raise _Fail(str(e), 1) from None
    sinks.summary(eng, res)
    if emit.broken:
        return 1
    if lines.progress:
        if args.route_telemetry and res.n_tokens != args.n_predict:
            emit.line(resident_line(eng, res.n_tokens))
        emit.line("=== answer ===")
        emit.line(res.text)
        emit.line("=== perf ===")
    else:
        emit.raw(res.text[shown[0]:] + "\n\n")
    for ln in summary_text_lines(eng, res):
        emit.line(ln)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
