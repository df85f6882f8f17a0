"""The live screen: the replay screen's views over a live source, plus a prompt box, a cancel
key, a turns table, the runtime's stderr in the log pane and a status line.

``LiveApp(source)`` takes any live source (``ChildSession``, ``SessionSocketClient``, or
``LiveReplaySource``: a recording at its original pace, without the prompt box; with
``turn_by_turn`` Enter or n plays the next turn), wires it to a fresh ``RunModel`` (records -> ``run.ingest``, stderr ->
``run.log``, source problems -> ``run.add_problem``), starts it when the app mounts and closes
it when the app exits (for a child: ``close`` request, wait, SIGTERM, SIGKILL of its group).
The terminal is restored on every exit path: quit key, SIGTERM, SIGHUP and SIGINT all go
through ``App.exit`` so Textual's driver turns mouse reporting and the alternate screen off.

Keys (besides the replay keys): Enter in the prompt box sends ``generate`` (n_predict from the
small box beside it; "new chat" or "continue" = ``clear_kv`` true/false, toggled with ctrl+n);
escape, ctrl+c or ctrl+x sends ``cancel`` (escape when nothing is generating leaves the
prompt box, so q, ?, space and the arrows work again; Enter or a click goes back into it);
ctrl+t shows the turns table; ctrl+q quits from anywhere, q outside the prompt box.
``run_live(source, ...)`` runs the app and guarantees the source is
closed afterwards, and returns the process exit status (128 + signal for a signal).
"""

from __future__ import annotations

import asyncio
import signal

from textual import on
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Input, Label, Static, TabbedContent, TabPane

from bmoe_top.tui.app import BmoeTopApp
from bmoe_top.tui.run import RunModel
from bmoe_top.tui.widgets.panels import safe_text

LIVE_CSS = """
#live-status { height: 1; padding: 0 1; background: $panel; }
#prompt-bar { height: 3; dock: bottom; }
#prompt-bar Label { width: auto; padding: 1 1 0 1; }
#prompt { width: 1fr; }
#n-predict { width: 12; }
#turns-table { height: 1fr; }
"""

_STATE_STYLE = {
    "loading": "bold #e5c07b", "connecting": "bold #e5c07b", "ready": "bold #98c379",
    "generating": "bold #61afef", "closing": "#7f848e", "disconnected": "bold #e06c75",
    "exited": "#7f848e", "aborted": "bold #e06c75", "failed": "bold #e06c75", "closed": "#7f848e",
}

TURN_COLUMNS = ("turn", "id", "tokens", "tok/s", "prefill s", "n_prompt", "n_past", "ctx %",
                "hit %", "resident/budget MiB", "end")


def _f(v, fmt: str = "{:.2f}") -> str:
    if v is None:
        return "missing"
    try:
        if v != v:  # NaN
            return "missing"
        return fmt.format(v)
    except (TypeError, ValueError):
        return str(v)


class LiveApp(BmoeTopApp):
    """bmoe-top over a live source (see the module docstring).

    Args:
        source: a live source (not started; ``LiveApp`` connects its sinks and starts it).
        title: what the title bar names (e.g. "launch bmoe-run", "attach /tmp/s.sock").
        n_predict: initial value of the n_predict box.
        fps: repaint bound (default 10 per second).
        close_timeout: seconds ``close`` waits for a child before SIGTERM.
    """

    CSS = BmoeTopApp.CSS + LIVE_CSS
    BINDINGS = BmoeTopApp.BINDINGS + [
        Binding("escape,ctrl+x,ctrl+c", "cancel_generation", "cancel", priority=True),
        Binding("ctrl+n", "toggle_chat", "new chat/continue", priority=True),
        Binding("ctrl+t", "tab('turns')", "turns", priority=True),
        Binding("ctrl+l", "tab('log')", "log", show=False, priority=True),
        Binding("ctrl+q", "quit", "quit", show=False, priority=True),
        Binding("enter,i", "focus_prompt", "prompt", show=False),
        Binding("n", "next_turn", "next turn", show=False),
    ]

    def __init__(self, source, *, title: str = "", n_predict: int = 64, fps: float = 10.0,
                 close_timeout: float = 3.0, run: RunModel | None = None) -> None:
        self.run_model = run if run is not None else RunModel()
        super().__init__(self.run_model, title=title or source.kind, fps=fps, follow=True)
        self.source = source
        self.n_predict = n_predict
        self.new_chat = True
        self.close_timeout = close_timeout
        self.exit_signal: int | None = None
        self._turns_drawn = -1
        self._turns_seen = 0
        self._status_key = None
        src_name = source.kind
        run_ = self.run_model

        def on_record(rec, t):
            run_.ingest(rec, t, source=src_name)

        def on_stderr(line, t):
            with run_.lock:
                run_.log.append(line)
                run_.touch()

        source.connect(on_record, on_stderr=on_stderr, on_event=self._on_source_event)
        with run_.lock:
            run_.status = "loading"
            run_.sources.append(f"{src_name}: {getattr(source, 'path', None) or ' '.join(getattr(source, 'argv', []))}")

    # ------------------------------------------------------------------ source events (any thread)
    def _on_source_event(self, kind: str, info: dict) -> None:
        run = self.run_model
        if kind == "request":
            run.note_request(info["request"])
        elif kind == "problem":
            p = info["problem"]
            run.add_problem(self.source.kind, p.lineno, p.text, p.reason)
        elif kind in ("exit", "state", "disconnected", "new_session"):
            with run.lock:
                st = self.source.state
                if st in ("aborted", "failed"):
                    run.status, run.status_detail = "aborted", info.get("message", st)
                elif st in ("exited", "closed"):
                    if run.status != "aborted":
                        run.status = "done"
                elif st == "loading" and run.status in ("empty", "done"):
                    run.status = "loading"
                run.touch()

    # ------------------------------------------------------------------ layout
    @property
    def is_replay(self) -> bool:
        return getattr(self.source, "kind", "") == "recording"

    async def on_mount(self) -> None:
        footer = self.query_one(Footer)
        if self.is_replay:
            # a recording cannot be driven: no prompt box; Enter / n releases the next turn
            await self.mount(Static(id="live-status"), after=self.query_one("#title"))
            table = DataTable(id="turns-table", zebra_stripes=True, cursor_type="row")
            await self.query_one("#tabs", TabbedContent).add_pane(TabPane("Turns", table, id="turns"))
            table.add_columns(*TURN_COLUMNS)
            self._install_signals()
            if not self.source.started:
                self.source.start()
            self.update_live()
            return
        bar = Horizontal(
            Label(self._chat_label(), id="chat-mode"),
            Input(placeholder="prompt — Enter sends (generate)", id="prompt"),
            Input(value=str(self.n_predict), placeholder="n_predict", id="n-predict", type="integer"),
            id="prompt-bar",
        )
        await self.mount(bar, before=footer)
        await self.mount(Static(id="live-status"), after=self.query_one("#title"))
        table = DataTable(id="turns-table", zebra_stripes=True, cursor_type="row")
        await self.query_one("#tabs", TabbedContent).add_pane(TabPane("Turns", table, id="turns"))
        table.add_columns(*TURN_COLUMNS)
        self._install_signals()
        if not self.source.started:
            self.source.start()
        self.query_one("#prompt", Input).focus()
        self.update_live()
        # BmoeTopApp.on_mount runs after this one (Textual dispatches on_mount along the MRO)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def _on_signal(self, sig: int) -> None:
        self.exit_signal = sig
        self.exit(return_code=128 + int(sig))

    def _chat_label(self) -> str:
        return "new chat" if self.new_chat else "continue"

    # ------------------------------------------------------------------ repaint
    def tick(self) -> None:
        super().tick()
        self.update_live()

    def update_live(self) -> None:
        st = self.source.status()
        key = (st.state, st.message, int(st.quiet_s or 0) if st.stalled else 0, st.turns_done,
               st.stderr_lines, st.connects, self.new_chat, st.last_error,
               self.source.player.position if self.is_replay else 0,
               self.source.player.paused_at_turn.is_set() if self.is_replay else False)
        if key != self._status_key:
            self._status_key = key
            t = safe_text("")
            t.append(f" {st.state} ", style=_STATE_STYLE.get(st.state, "bold"))
            if st.message and st.message != st.state:
                t.append(" " + st.message, style="bold #e06c75" if (st.stalled or st.ready_timeout) else "")
            r = st.ready
            if r is not None:
                t.append(f"   load {_f(r.load_s)} s · {r.arch or 'missing'} · n_ctx {_f(r.n_ctx, '{}')}",
                         style="#7f848e")
            t.append(f"   turns {st.turns_done}", style="#7f848e")
            if st.last_error:
                t.append(" · last error: ", style="#7f848e")
                t.append(st.last_error[:80], style="#e06c75")
            if st.stderr_lines:
                t.append(f" · stderr {st.stderr_lines} lines", style="#7f848e")
            if st.kind == "socket":
                t.append(f" · connects {st.connects}", style="#7f848e")
            if self.is_replay:
                player = self.source.player
                t.append(f"   replay {player.position}/{len(self.source.recording.entries)} lines", style="#7f848e")
                if player.paused_at_turn.is_set():
                    t.append("  paused at a turn: Enter or n plays the next", style="bold #e5c07b")
            self.query_one("#live-status", Static).update(t)
            if not self.is_replay:
                self.query_one("#chat-mode", Label).update(self._chat_label())
        self.update_turns()

    def update_turns(self) -> None:
        """Append a row per newly finished turn (rows never change once a turn is done)."""
        run = self.run_model
        with run.lock:
            n_turns = len(run.turns)
            if n_turns == self._turns_seen and self._turns_drawn >= 0 and (not n_turns or run.turns[-1].done):
                return
            start = self._turns_seen if self._turns_drawn >= 0 else 0
            # only the last turn can still be running: look at it again next time
            stop = n_turns - 1 if (n_turns and not run.turns[-1].done) else n_turns
            new = [(t.index, dict(t.done), t.cancelled) for t in run.turns[start:stop] if t.done]
            n_ctx = run.ready.get("n_ctx") if run.ready else None
        self._turns_seen = max(stop, start)
        table = self.query_one("#turns-table", DataTable)
        if self._turns_drawn < 0:
            table.clear()
            self._turns_drawn = 0
        for index, d, cancelled in new:
            fill = (100.0 * d["n_past"] / n_ctx) if (d.get("n_past") is not None and n_ctx) else None
            table.add_row(
                str(index + 1), _f(d.get("id"), "{}"), _f(d.get("tokens"), "{}"), _f(d.get("tok_s")),
                _f(d.get("prefill_s"), "{:.3f}"), _f(d.get("n_prompt"), "{}"), _f(d.get("n_past"), "{}"),
                _f(fill, "{:.1f}"),
                "no cache" if d.get("cache_hit_pct") == -1 else _f(d.get("cache_hit_pct"), "{:.1f}"),
                f"{_f(d.get('cache_resident_mib'), '{:.1f}')}/{_f(d.get('cache_budget_mib'), '{:.1f}')}",
                "cancelled" if cancelled else "done",
            )
            self._turns_drawn += 1

    # ------------------------------------------------------------------ actions
    @on(Input.Submitted, "#prompt")
    def send_prompt(self, event: Input.Submitted) -> None:
        prompt = event.value
        if not prompt.strip():
            return
        st = self.source.state
        if st == "generating":
            self.notify("a generation is in flight: cancel it first (escape)", severity="warning")
            return
        if st != "ready":
            self.notify(f"cannot send now: {st}", severity="warning")
            return
        try:
            n = int(self.query_one("#n-predict", Input).value or self.n_predict)
        except ValueError:
            n = self.n_predict
        if n <= 0:
            self.notify("n_predict must be > 0", severity="warning")
            return
        rid = self.source.generate(prompt, n, clear_kv=self.new_chat)
        if rid is None:
            self.notify("not sent: the runtime is not reachable", severity="error")
            return
        event.input.value = ""
        self.new_chat = False  # the next prompt continues this chat unless toggled
        self.update_live()

    @on(Input.Submitted, "#n-predict")
    def n_predict_done(self, event: Input.Submitted) -> None:
        self.query_one("#prompt", Input).focus()

    def action_cancel_generation(self) -> None:
        if self.is_replay:
            return
        if self.source.state == "generating":
            if self.source.cancel():
                self.notify("cancel sent")
        elif isinstance(self.focused, Input):
            self.set_focus(None)  # escape leaves the prompt box (playback keys work again)

    def action_focus_prompt(self) -> None:
        if self.is_replay:
            self.source.next_turn()
            return
        self.query_one("#prompt", Input).focus()

    def action_next_turn(self) -> None:
        if self.is_replay:
            self.source.next_turn()

    def action_toggle_chat(self) -> None:
        self.new_chat = not self.new_chat
        self.update_live()


def run_live(source, *, title: str = "", n_predict: int = 64, fps: float = 10.0,
             close_timeout: float = 3.0) -> int:
    """Run ``LiveApp`` on ``source``; always close the source afterwards (even on an
    exception). Returns 0, or 128 + signal number when a signal ended the app."""
    app = LiveApp(source, title=title, n_predict=n_predict, fps=fps, close_timeout=close_timeout)
    try:
        app.run()
    finally:
        # the app (and its signal handlers) are gone; a signal while we wait for the child
        # must not kill bmoe-top before the child: kill the child's group at once instead
        def urgent(sig, frame):
            app.exit_signal = app.exit_signal or sig
            kill = getattr(source, "kill", None)
            if kill is not None:
                kill()

        old = {}
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                old[sig] = signal.signal(sig, urgent)
            except (ValueError, OSError):
                pass
        try:
            try:
                source.close(close_timeout)
            except TypeError:
                source.close()
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
    if app.exit_signal is not None:
        return 128 + int(app.exit_signal)
    return app.return_code or 0
