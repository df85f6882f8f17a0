"""The live screen: the shared views over a live session, plus a status line, a prompt box, a
cancel key and a Turns tab.

``LiveScreen(source)`` takes any live source (``ChildSession``, ``SessionSocketClient``, or
``RecordingSource``: a recording at its pace, without the prompt box; with ``turn_by_turn`` it stops
before each turn, the first too, and Enter plays it), binds it to a fresh bounded run model with
:func:`bmoe_top.tui.feed.bind.bind` (the same wiring as the headless ``--once`` paths), starts it
when the screen mounts; :func:`run_live` closes it when the app exits (for a child: ``close``
request, wait, SIGTERM, SIGKILL of its group). The terminal is restored on every exit path:
quit key, SIGTERM, SIGHUP and SIGINT all go through ``App.exit`` (the app's
:meth:`~bmoe_top.tui.app.BmoeTopApp.end_by_signal`, as on every screen).

Keys (besides the replay keys): Enter in the prompt box sends ``generate`` (n_predict from the
small box beside it; "new chat" or "continue" = ``clear_kv`` true/false, toggled with ctrl+n)
and follows the new turn live; escape, ctrl+c or ctrl+x sends ``cancel`` (escape when nothing is
generating leaves the prompt box, so q, ?, space and the arrows work again; Enter or a click goes
back into it); End in the empty prompt box goes to the newest token in real time; ctrl+t shows
the turns table; ctrl+q quits from anywhere, q outside the prompt box.
"""

from __future__ import annotations

import itertools
import signal
import time
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Input, Label, Static, TabPane

from bmoe_top.parsers.limits import int_within
from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.feed.bind import bind
from bmoe_top.tui.model import LIVE, RunModel
from bmoe_top.tui.model.quantities import q
from bmoe_top.tui.playback import SPEEDS
from bmoe_top.tui.present.numbers import MISSING, fmt, mib
from bmoe_top.tui.present.numbers import sig as sig3
from bmoe_top.tui.present.tables import Column, text_table
from bmoe_top.tui.screens.base import RunScreen
from bmoe_top.tui.sources.child_session import ChildSession
from bmoe_top.tui.sources.events import LiveState
from bmoe_top.tui.sources.live import LiveBase, LiveStatus
from bmoe_top.tui.sources.replay import RecordingSource
from bmoe_top.tui.widgets.base import look_of
from bmoe_top.tui.widgets.inputs import SteadyInput
from bmoe_top.tui.widgets.keymap import Key, bindings, footer_first, merged
from bmoe_top.tui.widgets.live_whatif import LiveWhatIfPanel
from bmoe_top.tui.widgets.palette import Look
from bmoe_top.tui.widgets.panels import safe_text
from bmoe_top.tui.widgets.tables import SortTable

__all__ = ["LiveScreen", "PROMPT_PLACEHOLDER", "PromptInput", "QUIET_STATES", "TURN_COLUMNS", "live_app",
           "needs_attention", "run_live"]

#: The Turns table's columns: one row per turn; each number is the catalogue's ``turn.*``
#: quantity (``bmoe_top.tui.model.quantities``), headed by its label and unit. On a narrow screen
#: the short headings come first, then n_past, n_prompt, prefill and the id go, in that order.
TURN_TABLE = (
    Column("turn", "turn"), Column("id", "id", drop=1), Column("tokens", q("turn.tokens").label, short="tok"),
    Column("tok_s", q("turn.tok_s").label),
    Column("prefill_s", f"{q('turn.prefill_s').label} s", short="pf s", drop=2),
    Column("n_prompt", "n_prompt", short="prompt", drop=3), Column("n_past", "n_past", short="past", drop=4),
    Column("ctx", f"{q('turn.ctx_pct').label} %"), Column("hit", f"{q('turn.hit_pct').label} %"),
    Column("resident", "resident/budget MiB", short="res/bud MiB"), Column("end", "end", numeric=False))
#: Their headings.
TURN_COLUMNS = tuple(c.label for c in TURN_TABLE)

#: What the empty prompt box says: both things Escape does there.
PROMPT_PLACEHOLDER = "Enter generates · Escape cancels it, else leaves the box"


#: Tokens a runtime may add to a prompt besides its text (BOS, a chat template's markers): the
#: margin the prompt box keeps when it fits a turn into the context.
CONTEXT_MARGIN = 16
#: The largest context a source's n_ctx or n_past is read as (tokens).
MAX_CONTEXT = 1 << 30

#: States of a live source in which nothing needs explaining: the status line may stay hidden in
#: the compact layout (every other state says why on it: failed, aborted, connecting, ...).
QUIET_STATES = frozenset({LiveState.READY, LiveState.GENERATING})


def needs_attention(st: LiveStatus) -> bool:
    """Whether the status line says something a person must see whatever the terminal's size:
    a state other than ready or generating (the reason it failed, why it is still connecting or
    loading, how it ended), a stall, a READY timeout or a rejected request."""
    return st.state not in QUIET_STATES or st.stalled or st.ready_timeout or bool(st.last_error)


def _request_id(value: object) -> str:
    """A request id as the runtime sent it: an identifier, not a quantity (no thousands separator)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return MISSING if value is None else safe_text(str(value), multiline=False).plain
    return str(int(value)) if float(value).is_integer() else str(value)


class PromptInput(SteadyInput):
    """The prompt box: End in the empty box is the view's End (the newest token, in real time: a
    slow-motion view trails the turn just sent); with text in the box it moves the text cursor."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("end", "end_or_live", "end", show=False)]

    def action_end_or_live(self) -> None:
        if self.value:
            self.action_end()
        elif isinstance(self.screen, RunScreen):
            self.screen.action_jump_end()


class LiveScreen(RunScreen):
    """The views over a live source (see the module docstring).

    Args:
        source: a live source, not started (the screen binds and starts it).
        title: what the title bar names (e.g. "launch bmoe-run", "attach /tmp/s.sock").
        n_predict: initial value of the n_predict box.
        fps: repaint bound (default 10 per second).
        run: the run model to feed (default a new bounded one).
        prompt: text already in the prompt box (Enter sends it).
        speed: the starting pace, one of :data:`~bmoe_top.tui.playback.SPEEDS`; under 1x the view
            trails the live run in slow motion (End goes real-time).
    """

    DEFAULT_CSS = """
    #live-status { height: 1; padding: 0 1; background: $panel; }
    #live-status.-problem { height: auto; max-height: 3; }
    #prompt-bar { height: 3; }
    #prompt-bar Label { width: auto; padding: 1 1 0 1; }
    #prompt { width: 1fr; }
    #n-predict { width: 12; }
    #turns-table { height: 1fr; }
    LiveScreen.-compact #prompt-bar { height: 1; }
    LiveScreen.-compact #prompt-bar Label { padding: 0 1; }
    LiveScreen.-compact #prompt-bar Input { border: none; height: 1; padding: 0 1; }
    /* without a border, the box with the focus says so by its background (reversed under NO_COLOR) */
    LiveScreen.-compact #prompt-bar Input:focus { background: $accent-darken-2; }
    """

    KEYS: ClassVar[tuple[Key, ...]] = merged((
        Key("escape", "escape", "leave the box or map (in the prompt box while a turn generates: cancel it)",
            scope="anywhere", palette=False),
        Key("ctrl+x,ctrl+c", "cancel_generation", "cancel the generation", scope="anywhere",
            title="Cancel the generation"),
        Key("ctrl+n", "toggle_chat", "new chat / continue the chat", scope="anywhere", footer="new chat/continue",
            title="New chat / continue"),
        Key("ctrl+t", "goto_tab('turns')", "the Turns tab", scope="anywhere", footer="turns", title="Tab: Turns"),
        Key("ctrl+o", "goto_tab('whatif')", "the What-if tab", scope="anywhere", footer="what-if",
            title="Tab: What-if"),
        Key("ctrl+l", "goto_tab('log')", "the Log tab (the runtime's stderr)", scope="anywhere",
            title="Tab: Log (stderr)"),
        Key("ctrl+q", "quit", "quit (from a text box too)", scope="anywhere", palette=False),
        Key("enter,i", "focus_prompt", "the prompt box (a recording: play the next turn)", title="Prompt box"),
    ), RunScreen.KEYS)
    BINDINGS: ClassVar[list[BindingType]] = bindings(footer_first(KEYS, 8))

    def __init__(self, source: LiveBase, *, title: str = "", n_predict: int = 64, fps: float = 10.0,
                 run: RunModel | None = None, prompt: str = "", speed: float = 1.0) -> None:
        self.binding = bind(source, run if run is not None else RunModel(LIVE))
        super().__init__(self.binding.run, title=title or source.kind, fps=fps, follow=True)
        if speed < 1.0:
            self.playback.speed_index = SPEEDS.index(speed)
        self.initial_prompt = prompt
        self.run_model = self.binding.run
        self.source = source
        self.n_predict = n_predict
        self.new_chat = True
        self._turns_seen = 0
        self._turnless_seen = 0  # requests refused so far (their rows are in the table)
        self._status_key: tuple[Any, ...] | None = None
        self._turn_rows: list[tuple[str, ...]] = []
        self._live_at = 0.0  # monotonic time the status line was last looked at
        self._live_line: Static | None = None  # the status line, looked up once
        #: (turns done when it was sent, text, n_predict, clear_kv) of the prompt sent last, until
        #: it is answered: a prompt the runtime rejects goes back into an empty box instead of
        #: being lost (or, rejected for the context while continuing a chat, goes again as a new one)
        self._unanswered: tuple[int, str, int, bool] | None = None

    @property
    def is_replay(self) -> bool:
        return isinstance(self.source, RecordingSource)

    def event_log_path(self) -> str | None:
        """A recording played at its pace writes no events (they happened when it was recorded)."""
        return None if self.is_replay else super().event_log_path()

    # ---------------------------------------------------------------------------------- layout
    def compose_status(self) -> ComposeResult:
        yield Static(id="live-status")

    def compose_tabs(self) -> ComposeResult:
        yield TabPane("Turns", SortTable(text_table("turns", TURN_TABLE, ()), id="turns-table"), id="turns")
        # the live LRU replay runs as often as the views repaint (at most 4 times a second)
        yield TabPane("What-if", LiveWhatIfPanel(self.run_model, interval=max(0.25, self.refresh_s), id="live-whatif"),
                      id="whatif")

    def compose_bottom(self) -> ComposeResult:
        if self.is_replay:
            return  # a recording cannot be driven: Enter releases the next turn instead
        yield Horizontal(
            Label(self._chat_label(), id="chat-mode"),
            PromptInput(self.initial_prompt, id="prompt",
                        placeholder=PROMPT_PLACEHOLDER),
            SteadyInput(value=str(self.n_predict), placeholder="n_predict", id="n-predict", type="integer"),
            id="prompt-bar",
        )

    def on_mount(self) -> None:
        if not self.source.started:
            self.source.start()
        if not self.is_replay:
            self.query_one("#prompt", Input).focus()

    def after_mount(self) -> None:
        self.update_live()

    def _chat_label(self) -> str:
        return "new chat" if self.new_chat else "continue"

    # --------------------------------------------------------------------------------- repaint
    def tick(self) -> None:
        """The shared tick, then the status line when anything changed (and once a second, for
        its "no telemetry for N s")."""
        seen = self.clock.seen
        super().tick()
        now = time.monotonic()
        if self.clock.seen is not seen or now - self._live_at >= 1.0:
            self._live_at = now
            self.update_live()

    def refresh_views(self, force: bool = False) -> None:
        super().refresh_views(force)
        if force:
            self.update_live()
        if self._ready():
            self.update_turns()

    def status_word(self) -> str:
        return str(self.source.state)

    def following_word(self, look: Look) -> str:
        """``bmoe-top play``: the newest token is the recording's, played at its pace, not a run's."""
        return f"{look.g.playing} playing a recording" if self.is_replay else super().following_word(look)

    def _status_text(self) -> Text:
        look = look_of(self)
        dim, alert = look.dim, look.alert
        st = self.source.status()
        t = Text()
        t.append(f" {st.state} ", style=look.status_style(str(st.state)))
        if st.message and st.message != st.state:
            style = alert if (st.stalled or st.ready_timeout) else ""
            t.append_text(safe_text(" " + st.message, style, multiline=False))
        r = st.ready
        if r is not None:
            t.append_text(safe_text(f"   load {fmt(r.load_s, 2)} s · {r.arch or MISSING} · n_ctx {fmt(r.n_ctx, 0)}",
                                    dim))
        elif st.state in (LiveState.STARTING, LiveState.LOADING):
            t.append("   loading the model: the prompt box below works once it is ready", style=dim)
        t.append(f"   turns {st.turns_done}", style=dim)
        if st.state == LiveState.READY and not st.turns_done and not self.is_replay:
            hint = "press Enter to send the prompt below, or type your own" if self.initial_prompt else \
                "type a prompt below and press Enter"
            t.append("   " + hint, style=look.accent)
        if st.last_error and st.last_error not in (st.message or ""):  # a rejection is its message already
            t.append(" · last error: ", style=dim)
            t.append_text(safe_text(st.last_error[:80], alert, multiline=False))
        if st.stderr_lines:
            t.append(f" · stderr {st.stderr_lines} lines (ctrl+l)", style=dim)
        if st.kind == "socket":
            t.append(f" · connects {st.connects}", style=dim)
        if isinstance(self.source, RecordingSource):
            player = self.source.player
            t.append(f"   replay {player.position}/{len(self.source.recording.entries)} lines", style=dim)
            if player.paused_at_turn.is_set():
                t.append(f"  paused before turn {player.turn + 1}: Enter plays it", style=look.warn)
        return t

    def update_live(self) -> None:
        if self._live_line is None:
            if not self.is_attached or not self.query("#live-status"):
                return  # before compose finished, or during teardown
            self._live_line = self.query_one("#live-status", Static)
        if not self.is_attached:
            return
        st = self.source.status()
        if self._unanswered is not None:
            self._restore_rejected(st)
        player = self.source.player if isinstance(self.source, RecordingSource) else None
        key = (st.state, st.message, int(st.quiet_s or 0) if st.stalled else 0, st.turns_done,
               st.stderr_lines, st.connects, self.new_chat, st.last_error,
               player.position if player else 0, player.paused_at_turn.is_set() if player else False)
        if key != self._status_key:
            self._status_key = key
            problem = needs_attention(st)
            shown = self._live_line.has_class("-problem")
            self._live_line.set_class(problem, "-problem")
            # one line: no reflow, unless it holds a reason (it may wrap) or just stopped holding one
            self._live_line.update(self._status_text(), layout=problem or shown)
            if not self.is_replay:
                self.query_one("#chat-mode", Label).update(self._chat_label())

    def update_turns(self) -> None:
        """Append a row per newly finished turn (a finished turn never changes; only the newest
        can still be running) and per request the runtime refused (no turn: ``-`` and its reason),
        in the order the session took them."""
        run = self.run_model
        with run.lock:
            turns = list(run.turns)
            upto = len(turns) - 1 if turns and turns[-1].done is None else len(turns)
            new: list[tuple[tuple[int, int], tuple[str, ...]]] = [
                ((t.index, 1), self._turn_row(t.index, dict(t.done), t.cancelled, run))
                for t in turns[:upto] if t.index >= self._turns_seen and t.done is not None]
            if upto:
                self._turns_seen = max(self._turns_seen, turns[upto - 1].index + 1)
            kept = run.turnless
            unseen = kept[max(0, len(kept) - (run.turnless_count - self._turnless_seen)):]
            # a request refused while a turn runs waits for that turn's row (it came after it)
            refused = list(itertools.takewhile(lambda r: r.after <= self._turns_seen, unseen))
            self._turnless_seen += len(refused)
            new += [((r.after, 0), ("-", _request_id(r.id), *["-"] * 8, f"{r.status}: {r.reason}" if r.reason
                                    else r.status)) for r in refused]
        if not new:
            return
        self._turn_rows.extend(row for _where, row in sorted(new, key=lambda x: x[0]))
        self.query_one("#turns-table", SortTable).set_table(text_table("turns", TURN_TABLE, self._turn_rows))

    @staticmethod
    def _turn_row(index: int, d: dict[str, Any], cancelled: bool, run: RunModel) -> tuple[str, ...]:
        n_ctx = run.ready.get("n_ctx") if run.ready else None
        fill = (100.0 * d["n_past"] / n_ctx) if (d.get("n_past") is not None and n_ctx) else None
        hit = d.get("cache_hit_pct")
        return (
            str(index + 1), _request_id(d.get("id")), fmt(d.get("tokens"), 0), sig3(d.get("tok_s"), 3),
            fmt(d.get("prefill_s"), 3), fmt(d.get("n_prompt"), 0), fmt(d.get("n_past"), 0), fmt(fill, 1),
            "no cache" if hit == -1 else fmt(hit, 1),
            f"{mib(d.get('cache_resident_mib'))}/{mib(d.get('cache_budget_mib'))}",
            "cancelled" if cancelled else "done",
        )

    # --------------------------------------------------------------------------------- actions
    @on(Input.Submitted, "#prompt")
    def send_prompt(self, event: Input.Submitted) -> None:
        prompt = event.value
        if not prompt.strip():
            self.notify("the prompt box is empty: type a prompt, then Enter", severity="information", timeout=4)
            return
        st = self.source.state
        if st == LiveState.GENERATING:
            self.notify("a generation is in flight: cancel it first (escape)", severity="warning")
            return
        if st != LiveState.READY:
            self.notify(f"cannot send now: {st}", severity="warning")
            return
        try:
            n = int(self.query_one("#n-predict", Input).value or self.n_predict)
        except ValueError:
            n = self.n_predict
        if n <= 0:
            self.notify("n_predict must be > 0", severity="warning")
            return
        fitted = self._fit_context(prompt, n)
        if fitted is None:
            return
        n, clear_kv = fitted
        if self.source.generate(prompt, n, clear_kv=clear_kv) is None:
            self.notify("not sent: the runtime is not reachable", severity="error")
            return
        self._unanswered = (self.source.status().turns_done, prompt, n, clear_kv)
        event.input.value = ""
        self.new_chat = False  # the next prompt continues this chat unless toggled
        self.playback.go_live()  # the user asked for this turn: show it
        self.refresh_views()
        self.update_live()

    def _context_held(self) -> tuple[int | None, int | None]:
        """(n_ctx from READY, the context the conversation holds after its last turn: that turn's
        ``n_past``), each None when the source did not say."""
        run = self.run_model
        with run.lock:
            n_ctx = run.ready.get("n_ctx") if run.ready else None
            last = next((t.done for t in reversed(run.turns) if t.done is not None), None)
            used = last.get("n_past") if last is not None else None
        return int_within(n_ctx, MAX_CONTEXT, 1), int_within(used, MAX_CONTEXT)

    def _fit_context(self, prompt: str, n: int) -> tuple[int, bool] | None:
        """(n_predict, clear_kv) for ``prompt``: a conversation that would not fit the context
        with it (its last ``n_past`` + the prompt + ``n``) starts a new chat, and an ``n`` that
        does not fit even a new chat is cut to what does; each said once. A prompt counts as its
        bytes (a token is at least one) + :data:`CONTEXT_MARGIN`. None (said) when the prompt
        alone fills the context. A source that does not say its n_ctx is sent as asked (a
        rejection for the context is retried as a new chat)."""
        clear_kv = self.new_chat
        n_ctx, used = self._context_held()
        if n_ctx is None:
            return n, clear_kv
        size = len(prompt.encode("utf-8")) + CONTEXT_MARGIN  # tokens <= bytes, + what the runtime adds
        if not clear_kv and used is not None and used + size + n > n_ctx:
            clear_kv = True
            self.notify(f"the conversation ({used:,} tokens) and this turn would not fit the context (n_ctx "
                        f"{n_ctx:,}): this prompt starts a new chat", timeout=6)
        if size + n > n_ctx:
            fit = n_ctx - size
            if fit <= 0:
                self.notify(f"the prompt alone fills the context (n_ctx {n_ctx:,}): not sent", severity="warning")
                return None
            self.notify(f"n_predict {n:,} does not fit the context (n_ctx {n_ctx:,}) with this prompt: "
                        f"{fit:,} tokens this turn", timeout=6)
            n = fit
        return n, clear_kv

    def _restore_rejected(self, st: Any) -> None:
        """The prompt sent last comes back into the box (when the box is empty) if the runtime
        rejected it, unless the rejection was for the context and the prompt continued a chat:
        then it is sent again as a new chat (said once). Any answer, or the source going away,
        forgets it."""
        assert self._unanswered is not None
        done_before, text, n, clear_kv = self._unanswered
        if st.turns_done > done_before or st.state not in (LiveState.READY, LiveState.GENERATING):
            self._unanswered = None
        elif st.state == LiveState.READY and st.message.startswith("request rejected"):
            self._unanswered = None
            if "n_ctx" in st.message and not clear_kv and self.source.generate(text, n, clear_kv=True) is not None:
                self._unanswered = (done_before, text, n, True)
                self.notify("the conversation did not fit the context: the prompt was sent again as a new chat",
                            timeout=6)
                return
            box = self.query_one("#prompt", Input)
            if not box.value:
                box.value = text
                box.cursor_position = len(text)

    @on(Input.Submitted, "#n-predict")
    def n_predict_done(self, event: Input.Submitted) -> None:
        self.query_one("#prompt", Input).focus()

    def _cancel(self) -> bool:
        if not self.is_replay and self.source.state == LiveState.GENERATING:
            if self.source.cancel():
                self.notify("cancel sent")
            return True
        return False

    def action_cancel_generation(self) -> None:
        """ctrl+c / ctrl+x: cancel the generation in flight (never quits: q or ctrl+q do)."""
        if not self._cancel():
            self.notify("nothing is generating: q (outside the prompt box) or ctrl+q quits", timeout=3)

    def action_escape(self) -> None:
        """Escape: in the prompt box while a turn generates, cancel it; anywhere else leave what
        has the focus (the prompt box, a map, a table: q, ?, space and the arrows work again),
        never cancelling work (ctrl+c / ctrl+x cancel from anywhere)."""
        focused = self.focused
        if isinstance(focused, PromptInput) and self._cancel():
            return
        if focused is not None:
            self.set_focus(None)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "escape" and self.search_bar.editing and self.focused is self.search_bar.box:
            return False  # Escape in the search box clears the search (the box's own key)
        if action in ("toggle_chat", "cancel_generation") and self.is_replay:
            return False  # a recording plays back its turns: no chat to start, nothing to cancel
        return super().check_action(action, parameters)

    def action_focus_prompt(self) -> None:
        if isinstance(self.source, RecordingSource):
            self.source.next_turn()
            return
        self.query_one("#prompt", Input).focus()

    def action_toggle_chat(self) -> None:
        self.new_chat = not self.new_chat
        self.update_live()


def live_app(source: LiveBase, *, title: str = "", n_predict: int = 64, fps: float = 10.0, prompt: str = "",
             speed: float = 1.0) -> BmoeTopApp:
    """The app over a :class:`LiveScreen` of ``source`` (``prompt``, ``speed``: as the screen's)."""
    return BmoeTopApp(LiveScreen(source, title=title, n_predict=n_predict, fps=fps, prompt=prompt, speed=speed))


def run_live(source: LiveBase, *, title: str = "", n_predict: int = 64, fps: float = 10.0,
             close_timeout: float = 3.0, prompt: str = "", speed: float = 1.0) -> int:
    """Run the live screen on ``source``; always close the source afterwards (even on an
    exception). Returns 0, or 128 + signal number when a signal ended the app. ``prompt`` and
    ``speed``: as :class:`LiveScreen`."""
    app = live_app(source, title=title, n_predict=n_predict, fps=fps, prompt=prompt, speed=speed)
    try:
        app.run()
    finally:
        # the app (and its signal handlers) are gone; a signal while we wait for the child must
        # not kill bmoe-top before the child: kill the child's group at once instead
        def urgent(sig: int, frame: Any) -> None:
            app.exit_signal = app.exit_signal or sig
            if isinstance(source, ChildSession):  # a child is killed; a socket or recording only let go
                source.kill()

        old = {}
        for sig in BmoeTopApp.EXIT_SIGNALS:
            try:
                old[sig] = signal.signal(sig, urgent)
            except (ValueError, OSError):
                pass
        try:
            source.close(close_timeout)
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
    if app.exit_signal is not None:
        return 128 + int(app.exit_signal)
    return app.return_code or 0
