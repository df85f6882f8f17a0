"""The model ``bmoe-run`` uses when no ``-m`` is given, and its recommended expert budget.

The trained demo model is committed in the package (``bmoe_top/data``, docs/demo-model.md); when
it is absent the random-weight ``demo`` preset of :mod:`bmoe_top.runtime.models` is written to the
user cache dir on first use.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import platformdirs

from .models import DEFAULT_QTYPE, GENERATOR_VERSION, make_model

__all__ = ["DEFAULT_DEMO_CACHE_MB", "TRAINED_DEMO_FILE", "default_model_path", "synthetic_demo_path",
           "trained_demo_path"]

#: File name of the trained demo model committed in ``bmoe_top/data``.
TRAINED_DEMO_FILE = "demo-moe-pystdlib.q8_0.gguf"
#: Recommended ``--cache-mb`` for the demo model (MiB): 26% of its 19.1 MiB expert bank (196 of
#: 768 slices): bmoe-top's 1024-token demo turn (prompt ``# ``) starts on a cold cache and its
#: cumulative decode hit climbs from 12.5% at token 1 to 75.6% at 128 and 79% at 1024, with
#: about 5,000 evictions and re-reads (docs/demo-model.md "Default demo budget", "The demo run").
DEFAULT_DEMO_CACHE_MB = 5.0


def trained_demo_path() -> Path | None:
    """Path of the trained demo GGUF shipped in ``bmoe_top/data``, or None if absent."""
    p = Path(str(resources.files("bmoe_top") / "data" / TRAINED_DEMO_FILE))
    return p if p.is_file() else None


def synthetic_demo_path(qtype: str = DEFAULT_QTYPE, *, create: bool = True) -> Path:
    """The random-weight ``demo`` preset in the user cache dir (platformdirs), made on first use."""
    cache = platformdirs.user_cache_path("bmoe-top") / "models"
    path = cache / f"demo-v{GENERATOR_VERSION}-seed0-{qtype}.gguf"
    if create and not path.is_file():
        make_model(path, preset="demo", qtype=qtype, seed=0)
    return path


def default_model_path() -> Path:
    """The trained demo model committed in the package when present, otherwise the synthetic
    ``demo`` preset in the user cache dir, created on first use (atomic write)."""
    trained = trained_demo_path()
    if trained is not None:
        return trained
    return synthetic_demo_path()
