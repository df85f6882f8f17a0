"""``bmoe-run``: run a MoE GGUF with expert streaming and print the telemetry contract.

    bmoe-run [-m MODEL] [-p PROMPT] [-n N] [-c N_CTX] [-t THREADS] [--cache-mb N] [--io-threads N]
             [--no-odirect] [--overlap] [--prefetch K] [--progress] [--csv PATH] [--session]
             [--route-telemetry] [--route-trace PATH] [--no-moe-stream] [--quiet]
    bmoe-run make-model [--preset demo|bench|tiny] [--qtype Q] OUT.gguf      (runtime/models.py)
    bmoe-run serve ...                                                       (runtime/server.py)
    bmoe-run make-profile ...                                                (runtime/strp.py)

stdout carries only the protocol (and, without --progress, the answer inline); llama.cpp's log
goes to stderr (dropped with --quiet). Bad input gets one line on stderr and a non-zero exit
(exit 2: bad arguments/model/budget; 1: a failed generation; 130: interrupted).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .sampling import add_sampling_args, sampling_from_args

USAGE_ERR = 2

#: sub-commands dispatched to other modules: name -> (module, function)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "make-model": ("bmoe_top.runtime.models", "models_main"),
    "serve": ("bmoe_top.runtime.server", "serve_main"),
    "make-profile": ("bmoe_top.runtime.strp", "make_profile_main"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2
        sys.stderr.write(f"bmoe-run: error: {message} (see bmoe-run --help)\n")
        raise SystemExit(USAGE_ERR)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="bmoe-run",
        description="Run a Mixture-of-Experts GGUF on llama.cpp, streaming expert weights from the file "
        "through a RAM expert cache, and print the BMOE telemetry contract. "
        "Sub-commands: make-model, serve, make-profile.",
    )
    ap.add_argument("-m", "--model", help="GGUF model (default: the demo model, created on first use)")
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
    ap.add_argument("--moe-stream", dest="stream", action="store_true", default=True,
                    help="stream experts (default; accepted for compatibility)")
    ap.add_argument("--no-moe-stream", dest="stream", action="store_false",
                    help="run fully resident (same telemetry, no BMOE_LOAD, no moe-* lines)")
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
    ap.add_argument("--moe-cache-profile", default=None, metavar="FILE",
                    help="fill the expert cache at load from an STRP profile, hottest first (runtime/moe_cache.py)")
    ap.add_argument("--moe-cache-adaptive", action="store_true",
                    help="heat-based expert swaps while generating (runtime/moe_cache.py)")
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--quiet", action="store_true", help="silence llama.cpp's log (stderr)")
    add_sampling_args(ap)
    return ap


def _fail(msg: str, code: int = USAGE_ERR) -> int:
    sys.stderr.write(f"bmoe-run: error: {msg}\n")
    sys.stderr.flush()
    return code


def _dispatch(name: str, argv: list[str]) -> int:
    mod, fn = SUBCOMMANDS[name]
    try:
        m = importlib.import_module(mod)
        f = getattr(m, fn)
    except (ImportError, AttributeError):
        return _fail(f"'{name}' is not available in this build ({mod}.{fn} missing)")
    rc = f(argv)
    return int(rc or 0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return _dispatch(argv[0], argv[1:])
    args = build_parser().parse_args(argv)

    def _term(_sig, _frm):
        raise KeyboardInterrupt

    try:
        import signal

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


def _run(args) -> int:  # noqa: C901 - the CLI's one flow
    from .engine import Engine, EngineError, GenerationError, ModelError, RequestError
    from .telemetry import (
        CsvSink,
        Emitter,
        RouteTraceSink,
        error_line,
        load_line,
        progress_line,
        resident_line,
        route_line,
        summary_text_lines,
    )

    if args.n_predict < 0:
        return _fail("-n must be >= 0")
    if args.ctx_size < 8:
        return _fail("-c must be >= 8")
    if args.io_threads < 1:
        return _fail("--io-threads must be >= 1")
    if args.prefetch < 0:
        return _fail("--prefetch must be >= 0")
    if args.cache_mb is not None and args.cache_mb < 0:
        return _fail("--cache-mb must be >= 0")
    if args.session_socket and not args.session:
        return _fail("--session-socket needs --session")
    prompt = args.prompt
    if args.file:
        try:
            with open(args.file, encoding="utf-8", errors="replace") as fh:
                prompt = fh.read()
        except OSError as e:
            return _fail(f"cannot read prompt file {args.file}: {e.strerror or e}")
    if prompt is None:
        prompt = "Hello"

    emit = Emitter(sys.stdout)
    sock = None
    if args.session_socket:
        try:
            from .session_socket import SessionSocketServer
        except ImportError:
            return _fail("--session-socket is not available in this build")

    flags = {
        "moe_stream": args.stream,
        "cache_mb": args.cache_mb,
        "force_cache": args.force_cache,
        "io_threads": args.io_threads,
        "o_direct": not args.no_odirect,
        "overlap": args.overlap,
        "prefetch": args.prefetch,
        "n_predict": args.n_predict,
    }
    try:
        sampling = sampling_from_args(args)
    except ValueError as e:
        return _fail(str(e))
    if not sampling.greedy:
        flags.update(temp=args.temp, top_k=args.top_k, top_p=args.top_p, repeat_penalty=args.repeat_penalty,
                     seed=args.seed)
    try:
        eng = Engine(
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
            force_cache=args.force_cache,
            route_telemetry=args.route_telemetry,
            route_weights=bool(args.route_trace),
            quiet=args.quiet,
            flash_attn=None if args.flash_attn == "auto" else args.flash_attn == "on",
            sampling=sampling,
        )
    except (ModelError, EngineError) as e:
        if args.session:
            emit.line(error_line(None, True, str(e)))
        return _fail(str(e))
    except OSError as e:
        if args.session:
            emit.line(error_line(None, True, str(e)))
        return _fail(f"{e.strerror or e}")
    flags["cache_mb"] = round(eng.budget_mib, 3) if eng.stream else 0
    flags["o_direct"] = eng.o_direct

    ext = None
    if args.moe_cache_profile or args.moe_cache_adaptive:
        if eng.cache is None or eng.cache.no_cache:
            eng.close()
            msg = "--moe-cache-profile/--moe-cache-adaptive need an expert cache (streaming with --cache-mb > 0)"
            if args.session:
                emit.line(error_line(None, True, msg))
            return _fail(msg)
        import time as _time

        from bmoe_top.parsers.strp import StrpError, check_dims, read_strp

        from .moe_cache import MoeCacheExt

        profile = None
        t_fill = _time.perf_counter()
        if args.moe_cache_profile:
            try:
                profile = read_strp(args.moe_cache_profile)
            except (StrpError, OSError) as e:
                eng.close()
                return _fail(f"--moe-cache-profile {args.moe_cache_profile}: {e}")
            why = check_dims(profile, eng.n_layer, eng.n_expert)
            if why:
                eng.close()
                return _fail(f"--moe-cache-profile {args.moe_cache_profile}: {why}")
        ext = MoeCacheExt(eng, profile=profile, adaptive=args.moe_cache_adaptive)
        eng.load_s += _time.perf_counter() - t_fill  # the profile fill is part of loading
        flags["moe_cache_profile"] = os.path.basename(args.moe_cache_profile) if profile is not None else "none"
        flags["moe_cache_adaptive"] = bool(args.moe_cache_adaptive)

    csv = trace = None
    try:
        if args.csv:
            try:
                csv = CsvSink(args.csv, eng, flags)
            except OSError as e:
                return _fail(f"cannot write --csv {args.csv}: {e.strerror or e}")
        if args.route_trace:
            try:
                trace = RouteTraceSink(args.route_trace, eng)
            except OSError as e:
                return _fail(f"cannot write --route-trace {args.route_trace}: {e.strerror or e}")

        progress = args.progress or args.route_telemetry or args.session
        every = max(1, args.resident_every)
        state = {"turn": 0}

        def token_lines(st) -> list[str]:
            out = []
            if ext is not None:
                ext.after_token()  # adaptive swaps happen between tokens, on the decode thread
            if csv is not None:
                csv.row(st)
            if not progress:
                return out
            if eng.stream:
                ln = load_line(st)
                if ln:
                    out.append(ln)
            if args.route_telemetry and st.route is not None:
                out.append(route_line(st.step, eng.turn, "decode", st.route))
            out.append(progress_line(st))
            if args.route_telemetry and (st.step % every == 0 or st.step == st.steps):
                out.append(resident_line(eng, st.step))
            return out

        def prefill_lines() -> list[str]:
            if not args.route_telemetry or eng.last_prefill_route is None:
                return []
            return [route_line(0, eng.turn, "prefill", eng.last_prefill_route)]

        if args.session:
            from .session import Session, start_reader

            def on_result(res):
                if csv is not None:
                    csv.summary(eng, res)

            sess = Session(eng, emit, token_lines, default_n_predict=args.n_predict, on_result=on_result,
                           prefill_lines=prefill_lines)
            if args.session_socket:
                try:
                    sock = SessionSocketServer(args.session_socket, on_request=lambda req, _c: sess.submit(req))
                    sock.start()
                except Exception as e:  # noqa: BLE001 - one line, fatal
                    emit.line(error_line(None, True, f"session socket {args.session_socket}: {e}"))
                    return _fail(f"session socket {args.session_socket}: {e}")
                emit.also = sock.broadcast
            start_reader(sess, close_on_eof=not args.session_socket)
            return sess.run()

        # one-shot
        import threading

        stop = threading.Event()

        def on_token(st):
            for ln in token_lines(st):
                emit.line(ln)
            if emit.broken:  # the reader went away: stop decoding
                stop.set()
            if not progress:
                emit.raw(st.text[len(state.get("shown", "")):])
                state["shown"] = st.text

        try:
            eng.check_request(prompt, args.n_predict, True)
        except RequestError as e:
            return _fail(str(e))
        if not progress:
            emit.raw(prompt)
        try:
            res = eng.generate(prompt, args.n_predict, clear_kv=True, on_token=on_token, cancel=stop,
                               on_prefill=lambda _s, _n: [emit.line(ln) for ln in prefill_lines()])
        except RequestError as e:
            return _fail(str(e))
        except GenerationError as e:
            return _fail(str(e), 1)
        if csv is not None:
            csv.summary(eng, res)
        if emit.broken:
            return 1
        if progress:
            if args.route_telemetry and res.n_tokens != args.n_predict:
                emit.line(resident_line(eng, res.n_tokens))
            emit.line("=== answer ===")
            emit.line(res.text)
            emit.line("=== perf ===")
        else:
            rest = res.text[len(state.get("shown", "")):]
            emit.raw(rest + "\n\n")
        for ln in summary_text_lines(eng, res):
            emit.line(ln)
        return 0
    finally:
        if csv is not None:
            csv.close()
        if trace is not None:
            trace.close()
        if sock is not None:
            try:
                sock.close()
            except Exception:  # noqa: BLE001
                pass
        eng.close()


if __name__ == "__main__":
    raise SystemExit(main())
