"""The ipywidgets views: ``Dashboard``, the sessions of a state dir, live; and
``TurnsWatch`` (``%agent watch``), an agent session's turns as it writes them.

Dashboard: one row per session (status, kind, name, conversation) with the actions its status
allows (kill, restore, adopt), and the tail of a selected session's transcript. It
redraws on every event of its session service (changes made from this kernel), and a
background thread reconciles every ``interval`` seconds, so a change made elsewhere
(JupyterLab, the CLI, another kernel) or a process ending shows within that time.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from traitlets import Float, List

from jupyter_agents.clients.display import current_attention, html_table, turn_line
from jupyter_agents.config import open_sessions
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.events import SessionEvent
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.sessions.turnreader import TurnReader
from jupyter_agents.sessions.turns import TurnPage
from jupyter_agents.terminal.render import html_lines


class Dashboard(widgets.VBox):  # type: ignore[misc]
    """Live table of sessions with buttons; see the module docstring.

    ``sessions`` holds the REST models as last read (oldest first).
    """

    sessions: List[dict[str, Any]] = List(help="The session models shown, as of the last refresh.")
    interval = Float(1.0, help="Seconds between refreshes.")

    def __init__(
        self,
        service: SessionService | None = None,
        state_dir: str | None = None,
        interval: float = 1.0,
        tail_bytes: int = 8192,
    ) -> None:
        self.service = service if service is not None else open_sessions(state_dir)
        self.tail_bytes = tail_bytes
        self.table = widgets.HTML()
        self.rows = widgets.VBox()
        self.status = widgets.HTML()
        self.selected = widgets.Dropdown(description="transcript", options=[("-", "")])
        self.tail = widgets.HTML()
        super().__init__(
            [self.table, self.rows, self.status, self.selected, self.tail], interval=interval
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.selected.observe(lambda _: self.refresh(), names="value")
        self.refresh()
        self._unsubscribe = self.service.events.subscribe(self._on_event)
        self._thread = threading.Thread(target=self._poll, name="agents-dashboard", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except AgentsError as e:
                self.status.value = f"<b>refresh failed:</b> {html.escape(str(e))}"

    def _on_event(self, event: SessionEvent) -> None:
        if event.action != "activity":
            self._redraw()

    def refresh(self) -> None:
        """Reconcile and read the agents' usage, then redraw what changed."""
        self.service.reconcile()
        self.service.refresh.read_usage()
        self._redraw()

    def _redraw(self) -> None:
        with self._lock:
            current = self.service.list()
            usage = self.service.models.usage(current)
            models = [{**s.to_model(), "usage": usage.get(s.id)} for s in current]
            if models != self.sessions:
                self.sessions = models
                self.table.value = html_table(current, usage)
                self.rows.children = [self._row(s) for s in current]
                options = [("-", ""), *((f"{s.name} ({s.kind}, {s.id})", s.id) for s in current)]
                if options != list(self.selected.options):
                    value = self.selected.value
                    self.selected.options = options
                    self.selected.value = value if value in {v for _, v in options} else ""
            self.tail.value = self._tail_html()

    def _tail_html(self) -> str:
        sid = self.selected.value
        if not sid:
            return ""
        data = self.service.transcript(sid).tail(self.tail_bytes)
        if not data:
            return "<i>no transcript</i>"
        return f"<pre>{''.join(html_lines([data]))}</pre>"

    def _row(self, session: Session) -> widgets.HBox:
        label = widgets.HTML(
            f"<code>{html.escape(session.name)}</code> {html.escape(session.kind)} "
            f"<b>{html.escape(session.status)}</b> {html.escape(current_attention(session))} "
            f"{html.escape(session.conversation_id or '')}"
        )
        buttons = []
        actions: dict[str, Callable[[str], Any]] = {}
        if session.status in ("running", "orphaned"):
            actions["kill"] = self.service.terminate
        if session.status == "orphaned":
            actions["adopt"] = self.service.adopt
        if session.status in ("interrupted", "exited", "killed"):
            actions["restore"] = self._restore
        for name, action in actions.items():
            button = widgets.Button(description=name, layout=widgets.Layout(width="auto"))
            button.on_click(self._handler(name, action, session.id))
            buttons.append(button)
        return widgets.HBox([label, *buttons])

    def _restore(self, session_id: str) -> Session:
        """Restore and watch it; :class:`AgentsError` with the reason when it did not
        come up (the record stays ``interrupted``, with that reason)."""
        session = self.service.restorer.restore_checked(session_id)
        if session.status != "running":
            raise AgentsError(f"{session_id}: {session.reason or session.status}")
        return session

    def _handler(
        self, name: str, action: Callable[[str], Any], session_id: str
    ) -> Callable[[Any], None]:
        def run() -> None:
            self.status.value = self.act(name, action, session_id)
            self.refresh()

        # off the kernel's thread: a restore watches the new process for a few seconds
        return lambda _button: threading.Thread(target=run, daemon=True).start()

    def act(self, name: str, action: Callable[[str], Any], session_id: str) -> str:
        """Run a button's ``action`` on ``session_id`` (blocking); the status line it
        leaves as HTML: ``done`` only when it did, else the reason it failed."""
        try:
            action(session_id)
        except AgentsError as e:
            return f"<b>{name} failed:</b> {html.escape(str(e))}"
        return f"{name}: {html.escape(session_id)} done"

    def close(self) -> None:
        """Stop refreshing and close the widgets."""
        self._stop.set()
        self._unsubscribe()
        super().close()


class TurnsWatch(widgets.VBox):  # type: ignore[misc]
    """``%agent watch``: an agent session's turns, one line each as ``jupyter agents
    turns`` prints them (:func:`~jupyter_agents.clients.display.turn_line`), in an
    Output widget that grows as the agent writes. A
    :class:`~jupyter_agents.sessions.turnreader.TurnReader` reads them in a thread of its
    own, woken by the writes (the kernel stays free meanwhile). It stops when the session
    stops running (the line above says how it ended), at its stop button, or when the
    widget is closed (:meth:`close`, or by the front end). It shows the last
    ``max_lines`` lines; the earlier ones are counted.

    :class:`~jupyter_agents.core.errors.AgentsError` at once for an unknown session or one
    whose kind keeps no conversation files (a shell)."""

    lines: List[str] = List(help="The lines shown, oldest first.")

    def __init__(
        self, service: SessionService, session_id: str, width: int = 120, max_lines: int = 1000
    ) -> None:
        self._reader = TurnReader(service, session_id, self._show)
        session = self._reader.session
        self._width = width
        self._max_lines = max_lines
        self._dropped = 0
        self._lock = threading.Lock()
        self._what = f"{session.name} ({session.kind}, {session.id})"
        self.header = widgets.HTML(f"watching <code>{html.escape(self._what)}</code>")
        self.stop_button = widgets.Button(description="stop", layout=widgets.Layout(width="auto"))
        self.stop_button.on_click(lambda _button: self._reader.stop())
        self.output = widgets.Output(
            layout=widgets.Layout(max_height="30em", overflow="auto", border="1px solid #ddd")
        )
        super().__init__([widgets.HBox([self.header, self.stop_button]), self.output])
        if self.comm is not None:  # the front end closed it: stop too
            self.comm.on_close(lambda _msg: self._reader.stop())
        self._thread = threading.Thread(
            target=self._run, name=f"agents-watch-{session.id}", daemon=True
        )
        self._thread.start()

    @property
    def watching(self) -> bool:
        """Whether it still reads the session's turns as they come."""
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            session = self._reader.run()
        except AgentsError as e:
            said = f"stopped: {html.escape(str(e))}"
        else:
            if session.status != "running":
                why = session.reason or session.status
                said = f"ended: {html.escape(why)}"
            else:
                said = "stopped"
        self.header.value = f"<code>{html.escape(self._what)}</code> {said}"
        self.stop_button.disabled = True

    def _show(self, page: TurnPage) -> None:
        """Add a page's lines (draw them again from the start for a page that starts
        over), and show the last ``max_lines``."""
        with self._lock:
            lines = [] if page.reset else list(self.lines)
            if page.reset:
                self._dropped = 0
            lines += [line for e in page.events if (line := turn_line(e, self._width))]
            if len(lines) > self._max_lines:
                self._dropped += len(lines) - self._max_lines
                lines = lines[-self._max_lines :]
            self.lines = lines
            head = f"({self._dropped} earlier lines not shown)\n" if self._dropped else ""
            text = head + "".join(f"{line}\n" for line in lines)
            self.output.outputs = ({"output_type": "stream", "name": "stdout", "text": text},)

    def close(self) -> None:
        """Stop reading and close the widgets."""
        self._reader.stop()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        for child in (self.header, self.stop_button, self.output):
            child.close()
        super().close()
