"""The byte-level vocabulary of every synthetic model ``bmoe-run make-model`` writes (the presets of
:mod:`bmoe_top.runtime.models` and the architectures of :mod:`bmoe_top.runtime.arch_models`).

Token id ``b`` (0..255) is byte ``b`` (GPT-2 byte-to-unicode spelling, ``tokenizer.ggml.model =
"gpt2"``, no real merges), id 256 is ``<|endoftext|>`` (EOS, control). No BOS is added. So
``list(text.encode("utf-8"))`` are the token ids llama.cpp produces.
"""

from __future__ import annotations

__all__ = ["EOS_ID", "N_BYTES", "N_VOCAB", "byte_vocab"]

N_BYTES = 256
EOS_ID = 256  # <|endoftext|>
N_VOCAB = 257


def byte_vocab() -> tuple[list[str], list[int], list[str]]:
    """The byte-level vocabulary: ``(tokens, token_types, merges)``.

    ``tokens[b]`` is the GPT-2 byte-to-unicode spelling of byte ``b`` (type NORMAL = 1) and
    ``tokens[256]`` is ``<|endoftext|>`` (type CONTROL = 3). GGUF rejects an empty array, so
    ``merges`` holds one rule whose left side (two characters) can never be formed without
    other merges: it never fires and tokenization stays one token per byte.
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
                 + list(range(ord("\xae"), ord("\xff") + 1)))
    mapping: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(N_BYTES):
        if b not in mapping:
            mapping[b] = chr(N_BYTES + extra)
            extra += 1
    tokens = [mapping[b] for b in range(N_BYTES)] + ["<|endoftext|>"]
    types = [1] * N_BYTES + [3]
    merges = [mapping[0] + mapping[0] + " " + mapping[0]]
    return tokens, types, merges
