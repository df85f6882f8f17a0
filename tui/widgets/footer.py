"""The key footer: Textual's :class:`~textual.widgets.Footer`, showing only the keys that fit whole
beside the command-palette key. Textual lays every key out in one row and lets the ones past the
width run under the palette key, so on a narrow terminal a key showed cut (``^n``) and a stray cell
of it showed right of the palette key (``^p paletten``: the compact style's one-cell margin after
it). Here the keys that do not fit are left out (every key is in the help, F1 or ?), and the
palette key ends at the right edge.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

__all__ = ["FittingFooter", "key_width"]


def key_width(key: FooterKey, compact: bool) -> int:
    """Cells ``key`` takes in a footer row (its key, its description, their padding and margin)."""
    desc = cell_len(key.description)
    if compact:
        return cell_len(key.key_display) + (1 + desc if desc else 0) + 1
    return cell_len(key.key_display) + 2 + (desc + 1 if desc else 0)


class FittingFooter(Footer):
    """A :class:`~textual.widgets.Footer` whose keys fit the width (see the module docstring)."""

    DEFAULT_CSS = """
    FittingFooter.-compact FooterKey.-command-palette { margin-right: 0; }
    """

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._laid_out_width = 0

    def compose(self) -> ComposeResult:
        width = self.size.width or self.app.size.width
        self._laid_out_width = width
        items = list(super().compose())
        palette = [w for w in items if isinstance(w, FooterKey) and w.has_class("-command-palette")]
        room = width - sum(key_width(w, self.compact) + 1 for w in palette)  # + its left rule
        for w in items:
            if w in palette:
                continue
            if isinstance(w, FooterKey):
                need = key_width(w, self.compact)
                if need > room:
                    break  # this key and the ones after it: in the help
                room -= need
            yield w
        yield from palette

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._laid_out_width:
            self.call_after_refresh(self.recompose)
