"""The key model: one table per screen (and per focusable widget kind) of (keys, action,
description, scope), from which the screen's Textual bindings, its help (F1 / ?), its footer and
its command-palette entries are made, and which the key tests walk (tests/screens/test_keymap.py)
and the user guide's keys section is checked against (docs/user-guide.md "Keys").

Scopes say from which focus a key answers:

- ``screen``: with nothing focused, or a map or a table focused (not in a text box, where the
  key types);
- ``anywhere``: from every focus, a text box too (a Textual priority binding);
- ``map`` / ``table`` / ``fleet-table`` / ``panel``: while a widget of that kind has the focus (it
  answers before the screen's key of the same name; ``panel``: a scrolling column of text, the run
  panel's or compare's notes);
- ``focus``: Textual's own focus keys (Tab, shift+Tab), listed for the help and the tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from textual.binding import Binding, BindingType

__all__ = ["DATA_TABLE_KEYS", "FOCUS_KEYS", "SCOPES", "Key", "bindings", "footer_first", "help_rows", "key_label",
           "markdown", "merged",
           "parse_action"]

#: Every scope a key may have (see the module docstring), in the order the help lists them.
SCOPES = ("anywhere", "screen", "map", "table", "fleet-table", "panel", "focus")

_NAMES = {"question_mark": "?", "equals_sign": "=", "plus": "+", "minus": "-", "slash": "/",
          "left_square_bracket": "[", "right_square_bracket": "]", "less_than_sign": "<",
          "greater_than_sign": ">", "comma": ",", "full_stop": ".", "left_curly_bracket": "{",
          "right_curly_bracket": "}",
          "space": "space", "pageup": "PgUp", "pagedown": "PgDn", "f1": "F1", "escape": "Escape",
          "enter": "Enter", "tab": "Tab", "shift+tab": "shift+Tab", "home": "Home", "end": "End",
          "left": "←", "right": "→", "up": "↑", "down": "↓", "shift+left": "shift+←", "shift+right": "shift+→"}


def key_label(key: str) -> str:
    """How the help, the palette and the guide write Textual's key names (``"f1,question_mark"``
    -> ``"F1 / ?"``)."""
    return " / ".join(_NAMES.get(k, k) for k in key.split(","))


@dataclass(frozen=True)
class Key:
    """One row of a key table.

    ``keys``: Textual key names, comma-separated; ``action``: the action it runs on the screen
    (or the widget of its scope), with arguments as Textual writes them (``"tab('text')"``);
    ``description``: what it does (the help, the palette, the guide); ``scope``: one of
    :data:`SCOPES`; ``footer``: the footer's word for it (None: not in the footer); ``palette``:
    whether the command palette lists it, as ``title`` (default: the description);
    ``priority``: looked up before the key goes to the focused widget (a Textual priority
    binding; scope ``anywhere`` always is), for a key that moves the focus, so that the keys typed
    right after it reach the new focus (the screen's ``check_action`` refuses it where it types)."""

    keys: str
    action: str
    description: str
    scope: str = "screen"
    footer: str | None = None
    palette: bool = True
    title: str | None = None
    priority: bool = False

    @property
    def palette_title(self) -> str:
        """The command palette's name for it (:attr:`title`, else the description capitalised)."""
        return self.title or self.description[:1].upper() + self.description[1:]

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"unknown key scope {self.scope!r}: one of {', '.join(SCOPES)}")

    @property
    def names(self) -> tuple[str, ...]:
        """Each key name of :attr:`keys`."""
        return tuple(self.keys.split(","))

    def binding(self) -> Binding:
        """The Textual binding (a priority one for scope ``anywhere``)."""
        first = self.names[0]
        return Binding(self.keys, self.action, self.footer or self.description, show=self.footer is not None,
                       priority=self.scope == "anywhere" or self.priority,
                       key_display="F1" if first == "f1" else None)


#: Textual's focus keys, as every screen with a focusable widget answers them.
FOCUS_KEYS: tuple[Key, ...] = (
    Key("tab", "app.focus_next", "move the focus to the next map, table or box on screen", "focus", palette=False),
    Key("shift+tab", "app.focus_previous", "move the focus to the previous one", "focus", palette=False),
)


#: A focused table's own keys (Textual's DataTable binds them; listed for the help and the tests).
DATA_TABLE_KEYS: tuple[Key, ...] = (
    Key("up", "cursor_up", "the row above", "table", palette=False),
    Key("down", "cursor_down", "the row below", "table", palette=False),
    Key("left", "cursor_left", "the column to the left", "table", palette=False),
    Key("right", "cursor_right", "the column to the right", "table", palette=False),
    Key("pageup", "page_up", "a page up", "table", palette=False),
    Key("pagedown", "page_down", "a page down", "table", palette=False),
    Key("home", "scroll_home", "the first row", "table", palette=False),
    Key("end", "scroll_end", "the last row", "table", palette=False),
    Key("enter", "select_cursor", "select the row", "table", palette=False),
)


def bindings(table: Iterable[Key], scope: Sequence[str] = ("screen", "anywhere", "focus")) -> list[BindingType]:
    """The Textual bindings of the rows of ``table`` in ``scope``."""
    return [k.binding() for k in table if k.scope in scope]


def footer_first(table: Sequence[Key], own: int) -> tuple[Key, ...]:
    """``table`` (a :func:`merged` one whose first ``own`` rows are the mode's) with the shared
    rows first: the footer lists the shared keys, then the mode's, as on every screen."""
    return (*table[own:], *table[:own])


def merged(own: Iterable[Key], shared: Iterable[Key]) -> tuple[Key, ...]:
    """A screen's table: its ``own`` rows, then the ``shared`` ones (a base screen's) without the
    key names ``own`` answers itself (a row left with no key goes)."""
    own = tuple(own)
    taken = {(name, k.scope in ("screen", "anywhere")) for k in own for name in k.names}
    out = list(own)
    for k in shared:
        left = [n for n in k.names if (n, k.scope in ("screen", "anywhere")) not in taken]
        if left:
            out.append(k if len(left) == len(k.names) else replace(k, keys=",".join(left)))
    return tuple(out)


def help_rows(table: Iterable[Key]) -> list[tuple[str, str]]:
    """(keys, what they do) for a help screen, in the table's order, rows with the same action
    and words in one ("q / ctrl+c"); a row of a widget's scope says where it answers ("on a map:
    ...")."""
    where = {"map": "on a map: ", "table": "in a table: ", "fleet-table": "in the table: ",
             "panel": "on a scrolling panel: "}
    rows: dict[tuple[str, str], list[str]] = {}
    for k in table:
        rows.setdefault((k.action, where.get(k.scope, "") + k.description), []).append(k.keys)
    return [(key_label(",".join(keys)), desc) for (_action, desc), keys in rows.items()]


def markdown(table: Iterable[Key]) -> str:
    """The rows of :func:`help_rows` as a Markdown table (the user guide's keys, checked against
    the tables by tests/screens/test_keymap_docs.py)."""
    lines = ["| key | what | where |", "| --- | --- | --- |"]
    where = {"anywhere": "anywhere, a text box too", "screen": "outside a text box", "map": "a focused map",
             "table": "a focused table", "fleet-table": "the focused table", "panel": "a focused panel",
             "focus": "anywhere"}
    seen: dict[tuple[str, str, str], list[str]] = {}
    for k in table:
        seen.setdefault((k.action, k.description, k.scope), []).append(k.keys)
    for (_a, desc, scope), keys in seen.items():
        label = " / ".join(f"`{part}`" for part in key_label(",".join(keys)).split(" / "))
        lines.append(f"| {label} | {desc.replace('|', '/')} | {where[scope]} |")
    return "\n".join(lines) + "\n"


_ACTION = re.compile(r"^(?:(?P<ns>\w+)\.)?(?P<name>\w+)(?:\((?P<args>.*)\))?$")


def parse_action(action: str) -> tuple[str, str, str]:
    """(namespace or "", name, arguments as written) of an action string."""
    m = _ACTION.match(action)
    if m is None:
        raise ValueError(f"not an action: {action!r}")
    return m.group("ns") or "", m.group("name"), m.group("args") or ""
