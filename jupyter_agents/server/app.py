"""AgentsApp: the Jupyter Server extension. It only wires: config traits -> session
service -> reconcile before serving -> terminal manager, streams, handlers, events."""

from __future__ import annotations

import asyncio
import getpass
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from jupyter_server.extension.application import ExtensionApp
from tornado.httpclient import AsyncHTTPClient
from traitlets import Enum, Float, List, TraitError, Type, Unicode, validate

from jupyter_agents.agents.attention import listen_for_hooks
from jupyter_agents.config import AgentsSettings, default_shell
from jupyter_agents.core import paths, provenance
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.core.events import SCHEMA_ID, SCHEMA_PATH, SessionEvent
from jupyter_agents.core.records import Session
from jupyter_agents.notify.notifier import (
    Channel,
    Links,
    Notifier,
    Policy,
    Presence,
    When,
    parse_quiet_hours,
)
from jupyter_agents.notify.ntfy import NtfyChannel
from jupyter_agents.notify.subscriptions import PushSubscriptions
from jupyter_agents.notify.tokens import AnswerTokens
from jupyter_agents.notify.webpush import WebPushChannel, load_or_make_keys
from jupyter_agents.server.activity import Attendance, ServerActivity
from jupyter_agents.server.exits import ExitWatch
from jupyter_agents.server.handlers import handlers
from jupyter_agents.server.streams import Streams
from jupyter_agents.server.terminals import TerminalManager
from jupyter_agents.server.turnwatch import TurnWatch
from jupyter_agents.server.unattended import UnattendedGuard
from jupyter_agents.sessions.service import SessionService
from jupyter_agents.sharing import shares as sharing
from jupyter_agents.sharing.auth import narrow_hub_identity, server_owner, sharing_refused

#: how long stopping waits for the periodic tasks to end (s)
DRAIN_TIMEOUT = 5.0


class AgentsApp(AgentsSettings, ExtensionApp):  # type: ignore[misc]
    """Persistent terminals and agent sessions, owned by tmux or the pty broker."""

    name = "jupyter_agents"
    description = __doc__ or ""
    load_other_extensions = True

    terminal_manager_class = Type(
        TerminalManager,
        klass=TerminalManager,
        config=True,
        help="The TerminalManager class (the stock terminal API over the sessions).",
    )

    share_revalidate_interval = Float(
        sharing.REVALIDATE_S,
        config=True,
        help="Seconds between re-validations of each read-only viewer with JupyterHub: "
        "a share revoked on the hub ends the watch within this.",
    )

    notify_channels = List(
        Enum(["webpush", "ntfy"]),
        default_value=["webpush", "ntfy"],
        config=True,
        help="Where a new permission request is notified (the owner's only): 'webpush' "
        "(the devices the owner turned on in JupyterLab; needs push_subject) and 'ntfy' "
        "(needs ntfy_url and ntfy_topic). [] turns notifications off; answer links still "
        "work.",
    )
    notify_when = Enum(
        ["no_visible_tab", "always"],
        default_value="no_visible_tab",
        config=True,
        help="'no_visible_tab': notify only while no JupyterLab tab of the owner says it "
        "is visible (POST /api/agents/presence); 'always': whatever the tabs say.",
    )
    notify_quiet_hours = Unicode(
        "",
        config=True,
        help="HH:MM-HH:MM in the server's local time (e.g. 22:00-07:00) when nothing is "
        "notified; '' for none.",
    )
    notify_presence_ttl = Float(
        60.0,
        config=True,
        help="Seconds a Lab tab's 'visible' counts for; the page repeats it more often "
        "than that while it is visible.",
    )
    notify_timeout = Float(
        10.0,
        config=True,
        help="Seconds one delivery to a push service or ntfy server may take.",
    )
    notify_public_url = Unicode(
        "",
        config=True,
        help="The server's base URL as the owner's phone reaches it (e.g. "
        "https://hub.example.org/user/alice/), for the links ntfy messages carry. '' : "
        "the URL of the owner's latest presence or subscription call, else the "
        "server's connection URL.",
    )
    push_subject = Unicode(
        "",
        config=True,
        help="The VAPID subject of Web Push: a mailto: address or https: URL where push "
        "services can reach whoever runs this server (e.g. mailto:ops@example.org). "
        "Push services refuse a localhost one (Apple answers 403), so such a subject, or "
        "none, leaves Web Push off and GET /api/agents/push/key says why.",
    )
    ntfy_url = Unicode(
        "",
        config=True,
        help="The ntfy server to publish to (e.g. https://ntfy.sh/); '' for none.",
    )
    ntfy_topic = Unicode(
        "",
        config=True,
        help="The ntfy topic (on a hub, '{username}' is replaced by the server's owner). "
        "Anyone who knows a topic on a public ntfy server can read it: pick a long "
        "random one, or use an access token.",
    )
    ntfy_token = Unicode(
        "",
        config=True,
        help="An ntfy access token (sent as 'Authorization: Bearer'); '' for none.",
    )

    @validate("notify_quiet_hours")
    def _valid_quiet_hours(self, proposal: Any) -> str:
        try:
            parse_quiet_hours(proposal["value"])
        except ValueError as e:
            raise TraitError(str(e)) from None
        return str(proposal["value"])

    service: SessionService | None = None
    manager: TerminalManager | None = None
    streams: Streams | None = None
    shares: sharing.Shares | None = None
    activity: ServerActivity | None = None
    attendance: Attendance | None = None
    guard: UnattendedGuard | None = None
    tokens: AnswerTokens | None = None
    notifier: Notifier | None = None
    _http: AsyncHTTPClient | None = None
    _restored: list[Session]
    _started: asyncio.Future[None] | None = None
    _stopping = False
    _narrowed = False

    def _link_jupyter_server_extension(self, serverapp: Any) -> None:
        """Take the terminal routes over from jupyter_server_terminals.

        Extensions link in alphabetical order, so this runs before the stock extension
        links; disabling it here means its manager is never created and can never spawn.
        An invalid ``c.AgentsApp`` value stops the server (traitlets' message names the
        trait): running on without it would run stock terminals, or no spend limit.
        """
        try:
            super()._link_jupyter_server_extension(serverapp)
        except TraitError as e:
            self.log.critical("jupyter_agents: invalid configuration: %s", e)
            raise SystemExit(1) from None
        stock = serverapp.extension_manager.extensions.get("jupyter_server_terminals")
        if stock is not None and stock.enabled:
            stock.enabled = False
            self.log.info("jupyter_agents: replacing jupyter_server_terminals' terminals")

    def initialize_settings(self) -> None:
        assert self.serverapp is not None
        # jupyterhub-singleuser replaces a configured identity_provider_class
        self._narrowed = narrow_hub_identity(self.serverapp)
        if not self.serverapp.terminals_enabled:
            self.settings["terminals_available"] = False
            return
        try:
            self.service = self.open_sessions(
                root_dir=self.serverapp.root_dir,
                shell=default_shell(self.serverapp.terminado_settings),
                extra_env={
                    "JUPYTER_SERVER_ROOT": self.serverapp.root_dir,
                    "JUPYTER_SERVER_URL": self.serverapp.connection_url,
                },
            )
            backend = self.service.backends.default()
        except (AgentsError, ValueError) as e:
            self.log.error("jupyter_agents: terminals are unavailable: %s", e)
            self.settings["terminals_available"] = False
            return
        try:
            debug = " ".join(backend.debug_attach_command("<session id>"))
        except AgentsError as e:  # its socket is not ours: said again on first use
            debug = str(e)
        where = provenance.source(self.serverapp, provenance.AGENTS_SECTIONS, "backend")
        chosen = "chosen by backend=auto" if self.backend == "auto" else "configured"
        self.log.info(
            "jupyter_agents: backend %s (%s; debug: %s)",
            backend.name,
            chosen if where == provenance.DEFAULT else f"{chosen}, from {where}",
            debug,
        )
        state_dir = self.service.state_dir
        runtime = paths.runtime_dir(state_dir)
        self.log.info(
            "jupyter_agents: state dir %s on %s: store journal %s, sockets in %s",
            state_dir,
            paths.filesystem_type(state_dir) or "an unknown filesystem",
            self.service.journal,
            "the state dir" if runtime is None else f"{runtime} (a network filesystem)",
        )
        for name in provenance.HUB_SETTINGS:
            where = provenance.source(self.serverapp, provenance.AGENTS_SECTIONS, name)
            value = provenance.describe(getattr(self, name), where)
            self.log.info("jupyter_agents: setting %s = %s", name, value)
        assert self.serverapp.event_logger is not None
        self.serverapp.event_logger.register_event_schema(SCHEMA_PATH)
        # before the first request: the first GET /api/terminals must list survivors
        self.service.reconcile(boot=True)
        self.service.refresh.apply_attention()  # hook events of while no server ran
        self.service.usage.unwatch_all(time.time())  # no viewer is connected yet
        self.service.refresh.publish_external()  # the baseline for changes made elsewhere
        self._restored = self._restore_on_start(self.service)
        self.manager = self.terminal_manager_class(
            service=self.service,
            restore_on_open=self.restore_on_open,
            parent=self.serverapp,
            log=self.log,
        )
        # prometheus' terminal_currently_running_total, as stock keeps it
        self.manager.count(self.service.terminals())
        self._uncount = self.service.events.subscribe(self.manager.follow)
        self.settings.update(
            {
                "terminals_available": True,
                "terminal_manager": self.manager,
                "jupyter_agents_start": self.ensure_started,
            }
        )

    def _restore_on_start(self, service: SessionService) -> list[Session]:
        if self.restore_on_start == "none":
            return []
        kinds = None if self.restore_on_start == "all" else set(service.kinds) - {"shell"}
        restored = []
        for session in service.interrupted(kinds):
            try:
                restored.append(service.restorer.restore(session.id))
            except AgentsError as e:
                self.log.warning("jupyter_agents: could not restore %s: %s", session.id, e)
        self.log.info("jupyter_agents: restored %d interrupted sessions at start", len(restored))
        return restored

    def initialize_handlers(self) -> None:
        if self.service is None or self.manager is None:
            return
        settings = self.serverapp.web_app.settings if self.serverapp else {}
        self.activity = ServerActivity(settings, self.agent_keepalive, self.log)
        self.streams = Streams(
            self.service, self.service.backends, self.activity_interval, self.log, self.activity
        )
        self.shares = sharing.Shares(
            self.service,
            lambda: sharing_refused(settings),
            self.share_revalidate_interval,
            self.log,
        )
        self.tokens = AnswerTokens(self.service.permissions)
        self.notifier = self._make_notifier(self.service, self.tokens)
        self.handlers.extend(
            handlers(
                self.service, self.manager, self.streams, self.shares, self.tokens, self.notifier
            )
        )
        # who watches (and types into) each session: the unattended limit's evidence
        self.attendance = self.streams.attendance = Attendance(self.service, self.log)
        self.guard = UnattendedGuard(self.service, self.streams, self.log)

    def _make_notifier(self, service: SessionService, tokens: AnswerTokens) -> Notifier:
        """The notifier and its channels, from the ``notify_*`` and ``ntfy_*`` traits."""
        self._http = AsyncHTTPClient(force_instance=True, max_clients=20)
        assert self.serverapp is not None
        owner = server_owner() or getpass.getuser()
        links = Links(self.notify_public_url, self.serverapp.connection_url)
        channels: list[Channel] = []
        if "webpush" in self.notify_channels:
            try:
                keys = load_or_make_keys(service.state_dir)
            except (AgentsError, OSError, ValueError) as e:
                self.log.error("jupyter_agents: Web Push is off: no VAPID key pair: %s", e)
            else:
                channels.append(
                    WebPushChannel(
                        PushSubscriptions(service.store, owner),
                        keys,
                        self.push_subject,
                        self._http,
                        self.notify_timeout,
                    )
                )
        if "ntfy" in self.notify_channels:
            topic = self.ntfy_topic.replace("{username}", owner)
            channels.append(
                NtfyChannel(
                    self.ntfy_url,
                    topic,
                    self.ntfy_token,
                    links.agents_url,
                    self._http,
                    self.notify_timeout,
                )
            )
        return Notifier(
            service.permissions,
            tokens,
            channels,
            Policy(cast(When, self.notify_when), parse_quiet_hours(self.notify_quiet_hours)),
            Presence(self.notify_presence_ttl),
            links,
            self.log,
            timeout=self.notify_timeout + 5,
        )

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """The server's start hook: :meth:`ensure_started`."""
        await self.ensure_started()

    async def ensure_started(self) -> None:
        """Start, once, what runs while the server does (on the IO loop): emit session
        events, watch restored sessions and the ends of running sessions' processes,
        refresh (conversations, usage, modes, activity, other processes' changes),
        watch the backend's liveness, listen for hooks, expire shares, cull, keep the
        server active while agents work.

        The server's start hook calls it; so does every request to our routes
        (:meth:`~jupyter_agents.server.handlers.ApiHandler.prepare`), because a host that never
        runs extension start hooks (an in-process server such as pytest-jupyter's
        ``jp_serverapp``) would otherwise never cull, emit or listen. That is where
        stock starts its culler too: with the first terminal it creates.
        """
        if self.service is None or self.manager is None or self._stopping:
            return
        if self._started is None:
            self._started = asyncio.ensure_future(self._start(self.service, self.manager))
        await asyncio.shield(self._started)

    async def _start(self, service: SessionService, manager: TerminalManager) -> None:
        loop = asyncio.get_running_loop()

        def emit_in_loop(event: SessionEvent) -> None:
            loop.call_soon_threadsafe(self._emit, event)

        self._unsubscribe = service.events.subscribe(emit_in_loop)
        if self.notifier is not None:
            self.notifier.start()
            self._unnotify = service.events.subscribe(self.notifier.offer)
        # a dead or hung backend owner is replaced; reconcile then marks its sessions
        self._unmonitor = service.backends.default().monitor(
            lambda: loop.run_in_executor(None, service.reconcile)
        )
        self._exits = ExitWatch(service, self.log)
        await self._exits.start()
        self._turns = TurnWatch(service, self.log)
        await self._turns.start()
        manager.start_culling()
        self._hooks = await listen_for_hooks(
            service.state_dir, lambda: loop.run_in_executor(None, service.refresh.apply_attention)
        )
        if self.refresh_interval > 0:
            self._refresher = asyncio.ensure_future(self._refresh(service))
        if self.activity is not None and self.agent_keepalive > 0:
            self._keepalive = asyncio.ensure_future(
                self.activity.run(service.terminals, self.activity_interval)
            )
        if self.shares is not None:
            assert self.serverapp is not None
            reason = sharing_refused(self.serverapp.web_app.settings)
            where = provenance.source(self.serverapp, ("ServerApp",), "authorizer_class")
            how = f"authorizer_class {where if where == provenance.DEFAULT else 'from ' + where}"
            if self._narrowed:
                how += "; jupyterhub-singleuser's identity provider narrowed to ours"
            self.log.info("jupyter_agents: %s (%s)", reason or "read-only sharing available", how)
            self._sharing = asyncio.ensure_future(self.shares.run())
        for session in self._restored:
            loop.run_in_executor(None, service.restorer.check_resumed, session)

    def _emit(self, event: SessionEvent) -> None:
        """A session event, in the IO loop: to jupyter_events (browsers). Not server
        activity: that is terminal input and output and working agents
        (:mod:`jupyter_agents.server.activity`)."""
        assert self.serverapp is not None and self.serverapp.event_logger is not None
        self.serverapp.event_logger.emit(schema_id=SCHEMA_ID, data=event.data())

    async def _refresh(self, service: SessionService) -> None:
        """Every ``refresh_interval`` s, off the loop: one :meth:`~jupyter_agents.
        sessions.refresh.Refresh.tick` (sessions that ended unwatched, conversation ids
        and files, usage, modes and titles, activity, attention, other processes'
        changes, transcript gaps), then the unattended limit on what it read of usage.
        A tick that fails is logged and the next one runs: nothing ends this loop but
        the server's stop (a store locked by another process for a while, or a fault of
        ours, must not end what the panel relies on for good).

        The ticks run on one thread of their own: a tick can read megabytes (the usage
        ledger's first read of a long conversation, 4 MB a tick), and glibc keeps what a
        thread freed in that thread's arena, so ticks spread over the default
        executor's threads left up to one such arena per thread (a 100 MB
        conversation's first read: 39 MB of server RSS on 2 cores, more with more
        cores); one thread keeps one."""
        loop = asyncio.get_running_loop()
        ticker = ThreadPoolExecutor(1, thread_name_prefix="jupyter-agents-refresh")
        try:
            while True:
                await asyncio.sleep(self.refresh_interval)
                await self._tick(service, loop, ticker)
        finally:
            ticker.shutdown(wait=False)

    async def _tick(
        self,
        service: SessionService,
        loop: asyncio.AbstractEventLoop,
        ticker: ThreadPoolExecutor,
    ) -> None:
        """One refresh tick on ``ticker``, then the unattended limit; what fails is
        logged."""
        try:
            changes = await loop.run_in_executor(ticker, service.refresh.tick)
            if self.guard is not None:
                await self.guard.interrupt(await asyncio.to_thread(self.guard.check, changes))
        except AgentsError as e:
            self.log.warning("jupyter_agents: refresh failed: %s", e)
        except Exception:
            self.log.exception("jupyter_agents: refresh failed")

    def current_activity(self) -> dict[str, Any] | None:
        """The sessions keeping the server active (agents at work within
        ``agent_keepalive``), by terminal name; None when none does, so
        ``ServerApp.shutdown_no_activity_timeout`` is not held off by idle sessions."""
        return None if self.activity is None else self.activity.current_activity()

    async def stop_extension(self) -> None:
        """Stop taking work, then drain it, then close the store: the periodic tasks are
        cancelled and awaited (at most :data:`DRAIN_TIMEOUT` s), the streams and the
        attendance writer finish, and the store closes once the statement in flight
        ends (off the loop). Work still running after that gets
        :class:`~jupyter_agents.core.errors.StoreClosed` (503) instead of touching a closed
        connection, so a server stopped under load exits cleanly and goes on to shut
        its kernels down."""
        self._stopping = True
        if self._started is not None and not self._started.done():
            await asyncio.gather(self._started, return_exceptions=True)
        for stop in ("_unsubscribe", "_unmonitor", "_uncount", "_unnotify"):
            if hasattr(self, stop):
                getattr(self, stop)()
        periodic = ("_refresher", "_sharing", "_keepalive")
        tasks = [getattr(self, name) for name in periodic if hasattr(self, name)]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=DRAIN_TIMEOUT)
        hooks = getattr(self, "_hooks", None)
        if hooks is not None:
            hooks.close()
        exits = getattr(self, "_exits", None)
        if exits is not None:
            exits.stop()
        turns = getattr(self, "_turns", None)
        if turns is not None:
            turns.stop()
        if self.manager is not None:
            self.manager.stop_culling()
            if self.on_shutdown == "kill":
                self.log.info("jupyter_agents: shutting down (killing sessions)")
                await self.manager.terminate_all()
            else:
                self.log.info("jupyter_agents: shutting down (detaching from sessions)")
        if self.notifier is not None:
            await self.notifier.stop()
        if self._http is not None:
            self._http.close()
        if self.streams is not None:
            await self.streams.shutdown()
        if self.attendance is not None:
            await asyncio.to_thread(self.attendance.close)  # its last writes
        if self.service is not None:
            await asyncio.to_thread(self.service.close)  # warns if it had to leave it open
