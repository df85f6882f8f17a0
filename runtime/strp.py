"""``bmoe-run make-profile MODEL TEXT -o P.strp``: trace the routing over a text and write an STRP
profile (moe-cache-reference.md "Profile format (STRP)"; the file format itself is
:mod:`bmoe_top.parsers.strp`).

The text is fed to the model in windows of at most ``n_ctx - 1`` tokens (prefill only, no
generation; batches of ``--batch`` tokens). Every routed token's experts at every MoE layer are
counted (through the Engine's route sink, i.e. the router's own top-k ids). llama.cpp computes
the last layer only for the tokens whose logits it outputs (one per batch), so layers are
compared by pick frequency (picks / tokens routed at that layer), not raw counts, and the pairs
are ranked hottest first by that frequency. ``--batch 1`` routes every token at every layer
(slower, exact). ``slots`` in the header is the number of experts the default (or given)
cache budget holds: informational, as in the reference. The profile is written whole
(``bmoe_top.outfile.write_atomic``): never through a symbolic link, an existing file only with
``--force``, checked before the trace starts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bmoe_top.outfile import OutputFileError, check_output
from bmoe_top.parsers.strp import StrpProfile, profile_from_counts, write_strp

__all__ = ["trace_counts", "make_profile", "make_profile_main"]


def trace_counts(engine, text: str, window: int | None = None,
                 routed: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Route ``text`` through ``engine`` (prefill only) and count, per (layer, expert), the tokens
    that picked it. Returns (counts int64 (n_layer, n_expert), tokens traced). ``routed``: an
    optional int64 (n_layer,) array that receives how many tokens each layer routed (the last
    layer routes only the output token of each batch)."""
    counts = np.zeros((engine.n_layer, engine.n_expert), dtype=np.int64)
    if routed is None:
        routed = np.zeros(engine.n_layer, dtype=np.int64)
    n_tok = [0]

    def sink(phase, turn, pos, data):  # noqa: ARG001 - Engine.route_sink signature
        ids = data.get("ids") or {}
        for il, arr in ids.items():
            arr = np.asarray(arr)
            routed[il] += arr.shape[0] if arr.ndim == 2 else 1
            a = arr.reshape(-1)
            a = a[(a >= 0) & (a < engine.n_expert)]
            np.add.at(counts[il], a, 1)
        n_tok[0] += int(data.get("n_tokens") or 0)

    toks = engine.tokenize(text, add_special=False)
    if not toks:
        return counts, 0
    window = int(window or max(1, engine.n_ctx - 2))
    old = engine.route_sink
    engine.route_sink = sink
    try:
        # decode windows of text by bytes of the token pieces: the Engine takes text, so cut the
        # token list and turn each window back into its exact text
        for i in range(0, len(toks), window):
            piece = b"".join(engine.token_bytes(t) for t in toks[i:i + window]).decode("utf-8", "replace")
            engine.generate(piece, 0, clear_kv=True)
    finally:
        engine.route_sink = old
    return counts, n_tok[0]


def make_profile(engine, text: str, slots: int = 0) -> tuple[StrpProfile, int]:
    """Trace ``text`` and rank the pairs by pick frequency per layer (see module doc);
    returns (profile, tokens traced)."""
    routed = np.zeros(engine.n_layer, dtype=np.int64)
    counts, n = trace_counts(engine, text, routed=routed)
    with np.errstate(divide="ignore", invalid="ignore"):
        freq = np.where(routed[:, None] > 0, counts / np.maximum(routed, 1)[:, None], 0.0)
    return profile_from_counts(freq, slots=slots, min_count=1e-12), n


def make_profile_main(argv: list[str] | None = None) -> int:
    """Entry point of ``bmoe-run make-profile``. Returns the exit code; errors are one line."""
    ap = argparse.ArgumentParser(prog="bmoe-run make-profile",
                                 description="Trace a model's routing over a text and write an STRP profile.")
    ap.add_argument("model", help="GGUF model")
    ap.add_argument("text", help="text file to trace (UTF-8)")
    ap.add_argument("-o", "--out", required=True, help="profile to write (.strp)")
    ap.add_argument("--force", action="store_true",
                    help="replace an existing profile (never written through a symbolic link)")
    ap.add_argument("-c", "--ctx", type=int, default=2048, help="context window per trace chunk (default 2048)")
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("-b", "--batch", type=int, default=None, help="prefill batch (default: the context)")
    ap.add_argument("--cache-mb", type=float, default=None,
                    help="budget the profile is meant for (sets the header's slots; default: bmoe-run's default)")
    args = ap.parse_args(argv)
    try:
        text = Path(args.text).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"bmoe-run make-profile: cannot read {args.text}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if not text.strip():
        print(f"bmoe-run make-profile: {args.text} is empty", file=sys.stderr)
        return 1
    try:  # refused before the trace, not after it
        check_output(args.out, force=args.force)
    except OutputFileError as exc:
        print(f"bmoe-run make-profile: {exc}", file=sys.stderr)
        return 1
    from .engine import Engine, default_cache_mb

    try:
        # every expert resident while tracing (budget = the whole bank): nothing is evicted
        from bmoe_top.parsers.gguf_layout import read_layout

        lay = read_layout(args.model)
        bank_mib = lay.expert_bank_bytes / 1048576 + 1
        eng = Engine(args.model, n_ctx=args.ctx, n_threads=args.threads, n_batch=args.batch, cache_mb=bank_mib,
                     stream=True, quiet=True)
    except Exception as exc:  # noqa: BLE001 - ModelError / EngineError: one line
        print(f"bmoe-run make-profile: {exc}", file=sys.stderr)
        return 1
    try:
        cache_mb = args.cache_mb if args.cache_mb is not None else default_cache_mb(lay)
        eb = max(lay.expert_bytes) if lay.expert_bytes else 1
        slots = int(cache_mb * 1048576 // eb)
        prof, n = make_profile(eng, text, slots=slots)
        nbytes = write_strp(args.out, prof, force=args.force)
    except OutputFileError as exc:
        print(f"bmoe-run make-profile: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001
        print(f"bmoe-run make-profile: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        eng.close()
    print(f"wrote {args.out}: {prof.n_ranked} ranked experts of {prof.n_layers} layers x {prof.n_expert} "
          f"({n} tokens traced, slots {slots}, {nbytes} bytes)", file=sys.stderr)
    return 0
