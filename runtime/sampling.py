"""Token selection from one logits row: greedy, or seeded sampling (temperature, top-k, top-p,
repetition penalty), with llama.cpp's flag names and meanings.

Sampling depends only on the logits and the seed, so a streamed run and a fully resident run of
the same model pick the same tokens (the byte-identity property holds with sampling too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The largest magnitude a penalised logit keeps (the largest double).
_BIG = float(np.finfo(np.float64).max)


@dataclass(frozen=True)
class Sampling:
    """``temperature`` 0 = greedy (argmax; the other fields are then ignored).

    ``top_k`` 0 = off; ``top_p`` 1.0 = off; ``repeat_penalty`` 1.0 = off, applied as llama.cpp
    does (positive logits divided, negative multiplied) to tokens among the last
    ``repeat_last_n`` of the context; ``seed`` makes a generation reproducible.
    Raises ValueError for out-of-range values.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.top_k < 0:
            raise ValueError("top-k must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top-p must be in (0, 1]")
        if self.repeat_penalty <= 0:
            raise ValueError("repeat-penalty must be > 0")
        if self.repeat_last_n < 0:
            raise ValueError("repeat-last-n must be >= 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 and self.repeat_penalty == 1.0

    def rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)

    def pick(self, logits: np.ndarray, recent: list[int] | None, rng: np.random.Generator) -> int:
        """The next token id from ``logits`` (float ``[n_vocab]``, not modified)."""
        if self.greedy:
            return int(np.argmax(logits))
        x = np.array(logits, dtype=np.float64)
        if self.repeat_penalty != 1.0 and recent and self.repeat_last_n:
            ids = np.unique(np.asarray(recent[-self.repeat_last_n:], dtype=np.int64))
            ids = ids[(ids >= 0) & (ids < x.size)]
            v = x[ids]
            with np.errstate(over="ignore"):  # a penalty of 1e-300 takes a logit past the doubles: the largest
                x[ids] = np.clip(np.where(v > 0, v / self.repeat_penalty, v * self.repeat_penalty), -_BIG, _BIG)
        if self.temperature == 0.0:
            return int(np.argmax(x))
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = x / self.temperature
            if np.isfinite(scaled).all():
                x = scaled
            else:  # a temperature so small (1e-320) that the logits overflow: shift first, then only the top stays
                x = (x - np.max(x)) / self.temperature
        if self.top_k and self.top_k < x.size:
            kth = np.partition(x, -self.top_k)[-self.top_k]
            x[x < kth] = -np.inf
        x -= np.max(x)
        p = np.exp(x)
        p /= p.sum()
        if self.top_p < 1.0:
            order = np.argsort(-p, kind="stable")
            cum = np.cumsum(p[order])
            keep = order[: int(np.searchsorted(cum, self.top_p)) + 1]
            q = np.zeros_like(p)
            q[keep] = p[keep]
            p = q / q.sum()
        return int(rng.choice(p.size, p=p))


GREEDY = Sampling()


def add_sampling_args(ap) -> None:
    """``--temp --top-k --top-p --repeat-penalty --repeat-last-n --seed`` (llama.cpp's names)."""
    g = ap.add_argument_group("sampling (default: greedy)")
    g.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0, help="keep the K most likely tokens (0 = off)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (1.0 = off)")
    g.add_argument("--repeat-penalty", type=float, default=1.0, help="penalise recent tokens (1.0 = off)")
    g.add_argument("--repeat-last-n", type=int, default=64, help="tokens the repeat penalty looks back (64)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")


def sampling_from_args(args) -> Sampling:
    """The :class:`Sampling` the flags ask for (ValueError with a one-line reason when out of range)."""
    return Sampling(temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                    repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n, seed=args.seed)
