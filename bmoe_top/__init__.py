"""bmoe-top: a terminal observatory for Mixture-of-Experts expert streaming.

The distribution ships one import namespace: ``bmoe_top.parsers`` (``parsers/``),
``bmoe_top.runtime`` (``runtime/``) and ``bmoe_top.tui`` (``tui/``).
"""

__version__ = "0.1.0"
