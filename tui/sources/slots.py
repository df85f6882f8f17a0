"""llama-server's ``/slots`` (started with ``--slots``): what each slot is doing now.

llama-server adds a request's tokens to ``llamacpp:tokens_predicted_total`` only when the request
ends, so between two scrapes of a long request the counters stand still while the slot decodes.
``/slots`` gives each slot's task and the tokens it has decoded so far
(``next_token[0].n_decoded``): :func:`parse_slots` reads that. The tokens generated up to a
scrape are then the counter plus what the processing slots hold (:attr:`SlotsReading.decoding`),
so the difference between two scrapes is the live progress the attach screen shows
(``bmoe_top.tui.feed.metrics``). docs/metrics.md "The poller". No Textual import.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

__all__ = ["SlotInfo", "SlotsReading", "parse_slots"]


@dataclass(frozen=True, slots=True)
class SlotInfo:
    """One slot: ``id``, ``processing`` (a request is in it), ``task`` (its task id, None when idle
    or not sent), ``n_decoded`` (tokens generated so far for that task, None when not sent),
    ``n_prompt`` (the task's prompt tokens, None when not sent)."""

    id: int
    processing: bool
    task: int | None
    n_decoded: int | None
    n_prompt: int | None


@dataclass(frozen=True, slots=True)
class SlotsReading:
    """The slots at ``t`` (``time.monotonic()`` when the answer arrived)."""

    t: float
    slots: tuple[SlotInfo, ...]

    @property
    def processing(self) -> int:
        """Slots with a request in them."""
        return sum(1 for s in self.slots if s.processing)

    @property
    def decoding(self) -> int:
        """Tokens decoded so far by the requests in the slots now (processing slots only)."""
        return sum(s.n_decoded or 0 for s in self.slots if s.processing)


def _int(v: object) -> int | None:
    return v if type(v) is int else None


def parse_slots(body: bytes, t: float) -> SlotsReading | None:
    """A ``/slots`` answer (a JSON list of slot objects), or None when it is not one."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, list):
        return None
    out: list[SlotInfo] = []
    for i, s in enumerate(doc[:4096]):
        if not isinstance(s, dict):
            continue
        nxt = s.get("next_token")
        first = nxt[0] if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict) else {}
        sid = _int(s.get("id"))
        out.append(SlotInfo(id=sid if sid is not None else i, processing=s.get("is_processing") is True,
                            task=_int(s.get("id_task")), n_decoded=_int(first.get("n_decoded")),
                            n_prompt=_int(s.get("n_prompt_tokens"))))
    return SlotsReading(t, tuple(out))
