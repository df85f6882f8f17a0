"""``bmoe-run serve``'s entry point (docs/metrics.md "bmoe-run serve"): the command line, the API
keys, the bind check, then a :class:`~bmoe_top.runtime.server.Server` with its
:class:`~bmoe_top.runtime.server_http.HttpFront`, run until SIGINT/SIGTERM.

``--api-key KEY`` / ``--api-key-file FILE`` (one key per line): every endpoint but ``/health``
needs ``Authorization: Bearer KEY`` (or ``X-Api-Key: KEY``), else 401. A non-loopback ``--host``
without a key is refused unless ``--insecure``. ``--moe-cache-audit FILE``, ``--moe-cache-profile
FILE``, ``--moe-cache-adaptive``: see docs/metrics.md and moe-cache-reference.md. ``--csv FILE``:
the per-token CSV sink (docs/telemetry.md, docs/metrics.md "The per-token CSV").
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import resource
import signal
import socket
import stat
import sys
import threading

from bmoe_top.outfile import check_output

from .audit import AuditError, AuditWriter
from .sampling import add_sampling_args, sampling_from_args
from .server import Server
from .server_http import HttpFront, Limits

__all__ = ["serve_main", "is_loopback_bind", "read_api_keys"]


def is_loopback_bind(host: str) -> bool:
    """True when ``host`` (a literal or a name) only resolves to loopback addresses."""
    h = host.strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(h, None)
    except OSError:
        return False
    addrs = {str(i[4][0]) for i in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)


def read_api_keys(path: str) -> list[str]:
    """The keys in ``path``, one per line (blank lines and ``#`` comments skipped), as
    llama-server's ``--api-key-file``. Raises ``ValueError`` (one line) when the file cannot be read
    or holds no key."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --api-key-file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    keys = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    if not keys:
        raise ValueError(f"--api-key-file {path} holds no key")
    return keys


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0-65535 (got {v})")
    return v


def _positive(kind: type, minimum: float = 1):
    def conv(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not v >= minimum or (kind is float and not math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"must be >= {minimum:g} (got {text})")
        return v

    return conv


def _parser() -> argparse.ArgumentParser:
    d = Limits()
    ap = argparse.ArgumentParser(prog="bmoe-run serve", description="Serve a MoE model over HTTP with expert "
                                 "streaming: /health, /metrics, POST /completion (llama-server's API) and the "
                                 "OpenAI-compatible /v1/models, /v1/completions, /v1/chat/completions.")
    ap.add_argument("model_pos", nargs="?", metavar="MODEL", help="GGUF model (same as -m)")
    ap.add_argument("-m", "--model", help="GGUF model (default: the demo model)")
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=_port, default=8080, help="port (default 8080; 0 = any free port)")
    ap.add_argument("--api-key", default=os.environ.get("LLAMA_API_KEY"),
                    help="require Authorization: Bearer KEY on every endpoint but /health (several: comma-separated)")
    ap.add_argument("--api-key-file", metavar="FILE",
                    help="read the keys from FILE, one per line (the key then does not show in ps)")
    ap.add_argument("--insecure", action="store_true", help="allow a non-loopback --host without an API key")
    lim = ap.add_argument_group("limits (docs/metrics.md, Limits)")
    lim.add_argument("--max-body-bytes", type=_positive(int), default=d.max_body_bytes, metavar="N",
                     help=f"largest request body; larger: 413 (default {d.max_body_bytes})")
    lim.add_argument("--max-connections", type=_positive(int), default=d.max_connections, metavar="N",
                     help=f"open connections served; beyond: 503 + Retry-After, /health still answers "
                          f"(default {d.max_connections})")
    lim.add_argument("--max-queue", type=_positive(int, 0), default=d.max_queue, metavar="N",
                     help="generation requests waiting for the model; beyond: 503 + Retry-After "
                          f"(default {d.max_queue})")
    lim.add_argument("--timeout-header", type=_positive(float, 0.01), default=d.timeout_header, metavar="S",
                     help="seconds from a request's first byte to the end of its headers "
                          f"(default {d.timeout_header:g})")
    lim.add_argument("--timeout-idle", type=_positive(float, 0.01), default=d.timeout_idle, metavar="S",
                     help=f"seconds without a byte while a request body is read: 408 (default {d.timeout_idle:g})")
    lim.add_argument("--timeout-keep-alive", type=_positive(float, 0.01), default=d.timeout_keep_alive, metavar="S",
                     help=f"seconds a connection may wait idle for its next request (default {d.timeout_keep_alive:g})")
    ap.add_argument("-c", "--ctx-size", "--n-ctx", dest="n_ctx", type=int, default=2048,
                    help="context tokens, split evenly over the --parallel slots (default 2048)")
    ap.add_argument("-np", "--parallel", type=_positive(int), default=1, metavar="N",
                    help="slots: requests decoded together, one llama_decode per step (default 1)")
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("-b", "--batch-size", dest="n_batch", type=int, default=None)
    ap.add_argument("--cache-mb", type=float, default=None, help="expert cache budget in MiB (0 = no cache)")
    ap.add_argument("--no-moe-stream", action="store_true", help="keep every expert resident (no cache)")
    ap.add_argument("--io-threads", type=int, default=1)
    ap.add_argument("--no-odirect", action="store_true")
    ap.add_argument("--overlap", action="store_true")
    ap.add_argument("--prefetch", type=int, default=0)
    ap.add_argument("--force-cache", action="store_true")
    ap.add_argument("--moe-cache-audit", metavar="FILE", default=os.environ.get("LLAMA_ARG_MOE_CACHE_AUDIT"),
                    help="append the audit log (JSONL) to FILE (never through a symbolic link)")
    ap.add_argument("--moe-cache-profile", metavar="FILE", default=os.environ.get("LLAMA_ARG_MOE_CACHE_PROFILE"),
                    help="fill the cache at load from an STRP profile, hottest first")
    ap.add_argument("--moe-cache-adaptive", action="store_true",
                    default=os.environ.get("LLAMA_ARG_MOE_CACHE_ADAPTIVE", "") not in ("", "0"),
                    help="heat-based swaps of experts into the cache while generating")
    ap.add_argument("--csv", metavar="FILE", default=None,
                    help="per-token CSV sink (docs/telemetry.md): every request's tokens, a # summary per request")
    ap.add_argument("--metrics", action="store_true", help="accepted for llama-server compatibility (always on)")
    ap.add_argument("-v", "--verbose", action="store_true", help="llama.cpp's log to stderr")
    add_sampling_args(ap)
    return ap


def _raise_fd_limit() -> None:
    """Lift the soft open-file limit to the hard one, so idle connections cannot exhaust it
    before ``--max-connections`` is reached (each connection is one descriptor)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    except (ValueError, OSError):
        pass


def serve_main(argv: list[str] | None = None) -> int:
    """Entry point of ``bmoe-run serve``. Returns the exit code (2: bad arguments or bind refused;
    1: cannot listen, cannot load, or an audit write failed); bad input is one line on stderr."""
    args = _parser().parse_args(argv)
    model = args.model or args.model_pos
    keys = [k.strip() for k in (args.api_key or "").split(",") if k.strip()]
    if args.api_key_file:
        try:
            keys += read_api_keys(args.api_key_file)
        except ValueError as exc:
            print(f"bmoe-run serve: {exc}", file=sys.stderr)
            return 2
        try:
            if os.stat(args.api_key_file).st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                print(f"bmoe-run serve: warning: --api-key-file {args.api_key_file} is readable by other users "
                      "(chmod 600 it)", file=sys.stderr)
        except OSError:
            pass
    if not keys and not is_loopback_bind(args.host) and not args.insecure:
        print(f"bmoe-run serve: refusing to bind {args.host} (not loopback) without an API key; "
              "add --api-key-file FILE (or --api-key KEY), or --insecure to serve it open", file=sys.stderr)
        return 2
    if args.moe_cache_audit:
        try:
            AuditWriter(args.moe_cache_audit).check()
        except AuditError as exc:
            print(f"bmoe-run serve: cannot write the audit log: {exc}", file=sys.stderr)
            return 1
    if args.csv:
        try:
            check_output(args.csv)
        except OSError as exc:
            print(f"bmoe-run serve: {exc}", file=sys.stderr)
            return 1
    engine_kw = dict(model_path=model, n_ctx=args.n_ctx, n_threads=args.threads, n_batch=args.n_batch,
                     cache_mb=args.cache_mb, stream=not args.no_moe_stream, io_threads=args.io_threads,
                     o_direct=not args.no_odirect, overlap=args.overlap, prefetch=args.prefetch,
                     force_cache=args.force_cache, quiet=not args.verbose, process_stats=True,
                     n_seq=args.parallel)
    try:
        engine_kw["sampling"] = sampling_from_args(args)
    except ValueError as exc:
        print(f"bmoe-run serve: {exc}", file=sys.stderr)
        return 2
    limits = Limits(max_body_bytes=args.max_body_bytes, max_connections=args.max_connections,
                    max_queue=args.max_queue, timeout_header=args.timeout_header, timeout_idle=args.timeout_idle,
                    timeout_keep_alive=args.timeout_keep_alive)
    _raise_fd_limit()
    try:
        srv = Server(args.host, args.port, front=HttpFront, limits=limits, api_keys=keys,
                     audit_path=args.moe_cache_audit, profile_path=args.moe_cache_profile,
                     adaptive=args.moe_cache_adaptive, engine_kw=engine_kw, csv_path=args.csv)
    except (OSError, OverflowError, ValueError) as exc:
        print(f"bmoe-run serve: cannot listen on {args.host}:{args.port}: {getattr(exc, 'strerror', None) or exc}",
              file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    srv.start_http()
    try:
        try:
            srv.load()
        except Exception as exc:  # noqa: BLE001 - ModelError / EngineError / OSError: one line
            print(f"bmoe-run serve: {exc}", file=sys.stderr)
            srv.shutdown()
            return 1
        srv.start_worker()
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"bmoe-run serve: listening on http://{host}:{srv.port} "
              f"(model {srv.engine.model_path.name}, {srv.engine.n_layer} layers x {srv.engine.n_expert} experts, "
              f"cache {srv.engine.budget_mib:.1f} MiB{', api key required' if srv.api_keys else ''})",
              file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        srv.shutdown()
        for s, h in old.items():
            signal.signal(s, h)
    return 1 if srv.audit_error or srv.csv_error else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(serve_main())
