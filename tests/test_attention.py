"""Attention (issue 15): the fake CLIs (tests/fakes/fake_agent.py) run the hooks they are
given, exactly like the real ones; every state they report reaches the REST model, the
events stream and the CLI, also when it happened while no server ran."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jupyter_agents.agents.attention import NEEDS_YOU
from jupyter_agents.clients.cli import main
from jupyter_agents.pytest_plugin import (
    EventClient,
    ServerProcess,
    TermClient,
    poll,
    power_loss,
)

SECRET = "tell-nobody-7f3a"  # typed as a prompt: must never reach the spool or the store


def reaches(
    server: ServerProcess, session_id: str, attention: str | None, timeout: float = 20
) -> dict[str, Any]:
    """The session's model once its attention is ``attention``."""
    found: dict[str, Any] = {}

    def check() -> bool:
        found.update(server.model(session_id))
        return bool(found["attention"] == attention)

    try:
        poll(check, timeout=timeout, what=f"attention {attention}")
    except AssertionError:
        raise AssertionError(f"attention never became {attention!r}: {found}") from None
    return found


def hooks_fired(fake_agents: Any, name: str, pid: int | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in fake_agents.records("hook")
        if r["name"] == name and (pid is None or r["pid"] == pid)
    ]


def iso(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "proj"
    path.mkdir()
    return path


@pytest.mark.parametrize("agents_backend", ["tmux", "broker"], indirect=True)
def test_each_transition_reaches_the_model_and_the_events(agents_server, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    events = EventClient(server)
    try:
        shell = server.new("shell", project)
        agent = server.new("claude", project)
        sid = agent["id"]
        # the CLI gets our private hooks file, after the other flags
        run = poll(lambda: fake_agents.records("start"), what="claude start")[0]
        assert run["argv"][-2] == "--settings", run["argv"]
        settings = json.loads(Path(run["argv"][-1]).read_text())
        assert set(settings["hooks"]) >= {"SessionStart", "Stop", "StopFailure", "Notification"}

        start = reaches(server, sid, "ready")  # SessionStart: started, asked nothing
        assert start["attention_source"] == "hooks"
        assert start["attention_reason"] is None
        assert server.model(shell["id"])["attention"] is None  # shells report nothing
        client: TermClient = server.ws(agent["name"])
        client.wait_for("FAKE CLAUDE conversation")

        def typed(line: str, expect: str | None = None) -> None:
            client.stdin(line + "\r")
            if expect:
                client.wait_for(expect)

        # a whole turn: working, then waiting (each change is an event, even when the
        # REST model only ever shows the last)
        typed(SECRET, f"claude heard: {SECRET}")
        poll(lambda: len(events.of(sid, "attention")) >= 3, what="turn events")
        # every state held until the next line, so the model shows each one
        seen = [reaches(server, sid, "waiting")]
        steps = [
            ("/hold", "working"),
            ("ok", "waiting"),
            ("/hold", "working"),
            ("/perm", "permission"),
            ("/hold", "working"),  # no hook fires for the answer itself: the tool's does
            ("/fail", "error"),
        ]
        for line, state in steps:
            typed(line)
            seen.append(reaches(server, sid, state))
        assert seen[-1]["attention_reason"] == "authentication_failed"
        assert all(m["attention_reason"] is None for m in seen[:-1])
        assert all(m["attention_source"] == "hooks" for m in seen)
        times = [iso(m["attention_since"]) for m in seen]
        assert times == sorted(times) and len(set(times)) == len(times), times

        expected = ["ready", "working", "waiting", *(state for _, state in steps)]
        got = poll(
            lambda: (
                len(events.of(sid, "attention")) >= len(expected) and events.of(sid, "attention")
            ),
            what="every attention event",
        )
        assert [e["attention"] for e in got] == expected
        last = got[-1]
        assert last["attention_reason"] == "authentication_failed"
        assert last["attention_since"] == seen[-1]["attention_since"]
        assert last["status"] == "running" and last["kind"] == "claude"
        assert events.of(shell["id"], "attention") == []

        # an idle notification closes the error; /clear: the conversation follows
        # SessionStart's exact id (after SessionEnd of the old one)
        typed("/idle")
        idle = reaches(server, sid, "waiting")
        assert idle["attention_reason"] is None
        typed("/clear", "cleared; conversation")
        cleared = [r["id"] for r in fake_agents.records("clear") if r["pid"] == agent["pid"]]
        started = hooks_fired(fake_agents, "SessionStart", agent["pid"])
        assert started[-1]["payload"]["source"] == "clear"
        assert started[-1]["payload"]["session_id"] == cleared[0]
        poll(lambda: server.model(sid)["conversation_id"] == cleared[0], what="id after /clear")
        conversation = poll(lambda: events.of(sid, "conversation"), what="conversation event")
        assert conversation[-1]["conversation_id"] == cleared[0]
        reaches(server, sid, "ready")  # a new conversation, asked nothing yet

        # the spool keeps status, never what was typed
        spool = server.state_dir / "spool" / f"{sid}.jsonl"
        assert spool.exists()
        assert SECRET not in spool.read_text()
        _, listed = server.request("GET", "/api/agents/sessions")
        assert SECRET not in json.dumps(listed)

        # /exit: SessionEnd says nothing is known any more
        typed("/exit")
        poll(lambda: server.model(sid)["status"] == "exited", what="exit")
        reaches(server, sid, "unknown")
        client.close()
    finally:
        events.close()


def test_events_spooled_while_no_server_runs_are_applied_at_start(
    agents_server, fake_agents, project
):
    server = agents_server(env=fake_agents.env)
    agent = server.new("claude", project)
    sid = agent["id"]
    reaches(server, sid, "ready")
    server.stop(signal.SIGKILL)  # tmux keeps the agent running, nobody reads the spool

    socket = server.state_dir / "tmux" / "socket"

    def send(line: str) -> None:
        subprocess.run(
            ["tmux", "-S", str(socket), "send-keys", "-t", f"={sid}:", line, "Enter"],
            check=True,
        )

    send("/clear")
    cleared = poll(
        lambda: [r["id"] for r in fake_agents.records("clear") if r["pid"] == agent["pid"]],
        what="/clear while the server is down",
    )
    send("/hold")
    send("/perm")
    # its PermissionRequest hook waits for an answer (none comes: no server); the
    # notification the dialog brings is fired meanwhile
    poll(
        lambda: [
            r
            for r in hooks_fired(fake_agents, "Notification", agent["pid"])
            if r["payload"].get("notification_type") == "permission_prompt"
        ],
        what="permission hooks while the server is down",
    )

    server = agents_server(env=fake_agents.env)
    events = EventClient(server)
    try:
        # applied while the server started, before it served anything
        after = server.model(sid)
        assert after["status"] == "running"
        assert after["attention"] == "permission", after
        assert after["conversation_id"] == cleared[0]
        # and live again from here on
        send("/fail")
        failed = reaches(server, sid, "error")
        assert failed["attention_reason"] == "authentication_failed"
        got = poll(lambda: events.of(sid, "attention"), what="attention event")
        assert [e["attention"] for e in got] == ["working", "error"]
    finally:
        events.close()


def test_a_restored_agent_needs_nothing_until_its_new_process_says_so(
    agents_server, fake_agents, project
):
    """A power loss (no SessionEnd) leaves a waiting agent; restored, it is not
    needs-you in the reply nor in any event, and its start hook makes it ready."""
    server = agents_server(env=fake_agents.env)
    agent = server.new("claude", project)
    sid = agent["id"]
    reaches(server, sid, "ready")
    server.type_line(agent["name"], "hello", "claude heard: hello")
    reaches(server, sid, "waiting")
    power_loss(server)

    server = agents_server(env=fake_agents.env)
    assert server.model(sid)["status"] == "interrupted"
    events = EventClient(server)
    try:
        status, after = server.request("POST", f"/api/agents/sessions/{sid}/restore")
        assert status == 200 and "--resume" in after["argv"], after
        assert after["attention"] not in NEEDS_YOU, after
        reaches(server, sid, "ready")
        poll(lambda: events.of(sid, "attention"), what="the event of its start")
        told = [(e["action"], e["attention"]) for e in events.of(sid) if e["status"] == "running"]
        assert told[0] == ("status", None), told
        assert not [t for t in told if t[1] in NEEDS_YOU], told
    finally:
        events.close()


def test_codex_turns_report_through_notify(agents_server, fake_agents, project):
    # FAKE_CODEX_DAEMON: the fake behaves like the real TUI (a detached app-server daemon
    # holding the thread lock) unless launched with --no-daemon, as we launch it
    server = agents_server(env={**fake_agents.env, "FAKE_CODEX_DAEMON": "1"})
    coder = server.new("codex", project)
    sid = coder["id"]
    run = poll(lambda: fake_agents.records("start"), what="codex start")[0]
    notify = run["argv"][run["argv"].index("-c") + 1]
    assert notify.startswith("notify=[")
    assert "--no-daemon" in run["argv"]
    # the exact id from the first second: the thread lock is in the session's own tree
    poll(lambda: server.model(sid)["conversation_id"] == run["id"], what="codex id")
    assert not fake_agents.records("daemon")

    server.type_line(coder["name"], "hello", "codex heard: hello")
    turned = reaches(server, sid, "waiting")
    assert turned["attention_source"] == "notify"
    # the fake logs its notify run once the hook has returned, maybe after the change
    fired = poll(lambda: hooks_fired(fake_agents, "notify"), what="the notify record")
    assert len(fired) == 1 and fired[0]["returncode"] == 0
    assert fired[0]["payload"]["thread-id"] == turned["conversation_id"] == run["id"]

    # /new: the next turn's thread-id is the new exact conversation id
    server.type_line(coder["name"], "/new", "new thread")
    server.type_line(coder["name"], "again", "codex heard: again")
    renewed = fake_agents.records("new")[0]["id"]
    poll(lambda: server.model(sid)["conversation_id"] == renewed, what="id after /new")


def cli(state: Path, *args: str) -> tuple[int, str, str]:
    """``jupyter agents ARGS --state-dir STATE`` in this process: exit code, out, err."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([*args, "--state-dir", str(state)])
        except SystemExit as e:  # argparse's usage errors
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_cli_wait_and_the_attention_column(agents_server, agents_state_dir, fake_agents, project):
    server = agents_server(env=fake_agents.env)
    agent = server.new("claude", project)
    sid = agent["id"]
    shell = server.new("shell", project)
    reaches(server, sid, "ready")  # asked nothing yet: not a session that needs you
    client = server.ws(agent["name"])
    client.wait_for("FAKE CLAUDE conversation")
    code, out, _ = cli(agents_state_dir, "wait", sid, "--timeout", "1")
    assert code == 7 and out == ""
    client.stdin("hello\r")  # a turn ends: now it waits for its user
    reaches(server, sid, "waiting")

    # exit codes: 0 waiting for input, 5 permission, 6 error, 7 timed out
    code, out, _ = cli(agents_state_dir, "wait", sid, "--timeout", "10")
    assert code == 0
    assert out.split() == [sid, agent["name"], "waiting"]
    code, out, _ = cli(agents_state_dir, "wait", agent["name"], "--timeout", "10")
    assert code == 0  # by terminal name too

    client.stdin("/hold\r")
    reaches(server, sid, "working")
    began = time.monotonic()
    code, out, _ = cli(agents_state_dir, "wait", sid, "--timeout", "1")
    assert code == 7 and out == ""
    assert 0.9 <= time.monotonic() - began < 10

    # a wait blocks until the session needs its user
    result: list[tuple[int, str, str]] = []
    waiter = threading.Thread(
        target=lambda: result.append(cli(agents_state_dir, "wait", "--any", "--timeout", "30"))
    )
    waiter.start()
    time.sleep(1)
    assert not result  # still working: still waiting
    client.stdin("/perm\r")
    waiter.join(35)
    assert result and result[0][0] == 5, result
    assert result[0][1].split() == [sid, agent["name"], "permission"]

    code, out, _ = cli(agents_state_dir, "list", "--wide")  # whole ids at any width
    header, *rows = out.splitlines()
    assert "ATTENTION" in header.split()
    column = header.index("ATTENTION")
    by_id = {r.split()[0]: r for r in rows if r.strip()}
    assert by_id[sid][column:].split()[0] == "permission"
    assert by_id[shell["id"]][column : column + len("permission")].strip() == ""
    code, out, _ = cli(agents_state_dir, "list", "--json")
    listed = {m["id"]: m for m in json.loads(out)}
    assert listed[sid]["attention"] == "permission"
    assert listed[shell["id"]]["attention"] is None

    client.stdin("/fail\r")
    reaches(server, sid, "error")
    code, out, _ = cli(agents_state_dir, "wait", sid, "--timeout", "10")
    assert code == 6
    assert out.split() == [sid, agent["name"], "error", "(authentication_failed)"]
    code, out, _ = cli(agents_state_dir, "list", "--wide")
    assert "error (authentication_failed)" in out
    client.close()

    # bad input: unknown id 3, usage 2, a session that does not run 4
    code, _, err = cli(agents_state_dir, "wait", "nope", "--timeout", "1")
    assert code == 3 and "nope" in err and "Traceback" not in err
    code, _, err = cli(agents_state_dir, "wait", "--timeout", "1")
    assert code == 2
    code, _, err = cli(agents_state_dir, "wait", sid, "--any", "--timeout", "1")
    assert code == 2
    code, _, err = cli(agents_state_dir, "wait", sid, "--timeout", "soon")
    assert code == 2
    assert server.request("DELETE", f"/api/agents/sessions/{sid}")[0] == 204
    code, _, err = cli(agents_state_dir, "wait", sid, "--timeout", "1")
    assert code == 4 and "killed" in err


#: a project module named like one the hook imports: it leaves a mark and breaks json
HOSTILE_JSON = """\
import os, pathlib
pathlib.Path(os.environ.get("HOSTILE_MARK", "/tmp/hostile-json-ran")).write_text("ran")
raise ImportError("a project's json.py ran inside the hook")
"""


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_hooks_never_import_from_the_project_folder(
    agents_server, fake_agents, project, tmp_path, kind
):
    # the CLIs run hooks in the session's folder: a cloned repository's top-level
    # json.py (socket.py, uuid.py...) must neither run nor stop attention
    mark = tmp_path / "hostile-mark"
    for module in ("json", "socket", "uuid", "runpy"):
        (project / f"{module}.py").write_text(HOSTILE_JSON)
    server = agents_server(env={**fake_agents.env, "HOSTILE_MARK": str(mark)})
    agent = server.new(kind, project)
    if kind == "claude":
        reaches(server, agent["id"], "ready")  # SessionStart, through the hook
        server.type_line(agent["name"], "hello", "claude heard: hello")
        poll(lambda: hooks_fired(fake_agents, "Stop"), what="the Stop hook")
    else:
        server.type_line(agent["name"], "hello", "codex heard: hello")
        reaches(server, agent["id"], "waiting")  # the turn's notify
        # the fake logs its notify run once the hook has returned
        poll(lambda: hooks_fired(fake_agents, "notify"), what="the notify record")
    fired = [r for r in fake_agents.records("hook")]
    assert fired and all(r["returncode"] == 0 for r in fired), fired
    assert reaches(server, agent["id"], "waiting")["attention_source"] in ("hooks", "notify")
    assert not mark.exists(), "a module of the project folder ran in the hook"


@pytest.mark.parametrize(
    ("event", "payload", "state"),
    [
        # a CLI whose payload names no event (Copilot's agentStop)
        ("Stop", {"sessionId": "c-1", "stopReason": "end_turn"}, "waiting"),
        # a CLI whose event has another name (Gemini's AfterAgent)
        ("Stop", {"hook_event_name": "AfterAgent", "session_id": "c-1"}, "waiting"),
        ("UserPromptSubmit", {"hook_event_name": "BeforeAgent", "prompt": SECRET}, "working"),
    ],
)
def test_the_hook_records_an_event_under_the_name_it_is_given(
    tmp_path: Path, event: str, payload: dict[str, Any], state: str
) -> None:
    from jupyter_agents.agents.attention import state_after
    from jupyter_agents.agents.hooks import hook_command, spool_dir

    spool_dir(tmp_path)
    argv = hook_command(tmp_path, "s1", event=event)
    done = subprocess.run(argv, input=json.dumps(payload), text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0
    (line,) = (tmp_path / "spool" / "s1.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["event"] == event
    assert SECRET not in line
    assert state_after(record) == (state, None)


def test_a_request_spooled_after_a_later_event_still_counts(tmp_path: Path) -> None:
    """Claude Code runs its Notification hook beside its PermissionRequest one, which
    spools only once its request file is written: the request line can follow a newer
    line. It must still announce the request (a ``request`` event), not be skipped as
    applied before."""
    import logging

    from jupyter_agents.agents.attention import AttentionTracker
    from jupyter_agents.agents.kinds import make_kinds
    from jupyter_agents.agents.spool import spool_path
    from jupyter_agents.core.records import Session
    from jupyter_agents.core.store import SessionStore

    store = SessionStore(tmp_path / "sessions.db")
    store.add(Session(id="s1", name="1", status="running", backend="tmux", kind="claude"))
    spool = spool_path(tmp_path, "s1")
    spool.parent.mkdir()
    lines = [
        {"t": 12.0, "event": "Notification", "type": "permission_prompt"},
        {"t": 11.5, "event": "PermissionRequest", "tool": "Bash", "request": "a" * 16},
    ]
    spool.write_text("".join(json.dumps(line) + "\n" for line in lines))
    announced: list[str] = []

    def change(session_id: str, action: Any = None, **fields: Any) -> Session | None:
        store.update(session_id, **fields)
        return store.get(session_id)

    tracker = AttentionTracker(
        tmp_path, store, make_kinds(["bash"], {}), change, logging.getLogger("t"), announced.append
    )
    tracker.apply_spool()
    assert store.get("s1").attention == "permission"
    assert announced == ["s1"]
    store.close()


def age(pid: int) -> float:
    """How long ago process ``pid`` started, in seconds (to its start's clock tick)."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
    return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")


def test_a_permission_hook_slow_to_start_asks_nothing_once_answered(tmp_path: Path) -> None:
    """Claude Code runs its PermissionRequest hook while its dialog shows. On a loaded
    machine a person can answer in the terminal, and the tool run and its PostToolUse
    hook spool, before that hook has got as far as spooling: its line comes after the
    PostToolUse one (quiet run 1 of ad6ee21: the session went back to ``permission``).
    It asks about a tool that ran already: the session stays ``working``, the request
    is closed, and its hook ends with no decision (the CLI's answer stands)."""
    import logging

    from jupyter_agents.agents.attention import AttentionTracker
    from jupyter_agents.agents.hooks import ask_command, hook_command, spool_dir
    from jupyter_agents.agents.kinds import make_kinds
    from jupyter_agents.agents.permissions import ENDED
    from jupyter_agents.agents.spool import read_spool, spool_path
    from jupyter_agents.core.records import Session
    from jupyter_agents.core.store import SessionStore

    store = SessionStore(tmp_path / "sessions.db")
    store.add(Session(id="s1", name="1", status="running", backend="tmux", kind="claude"))
    spool_dir(tmp_path)

    def change(session_id: str, action: Any = None, **fields: Any) -> Session | None:
        store.update(session_id, **fields)
        return store.get(session_id)

    tracker = AttentionTracker(
        tmp_path, store, make_kinds(["bash"], {}), change, logging.getLogger("t")
    )
    tool = {"tool_name": "Bash", "tool_input": {"command": "ls"}, "session_id": "c1"}
    # the dialog shows and its hook starts; its payload is read once the tool has run
    # (as a hook whose Python takes long to start reads it late)
    asking = subprocess.Popen(
        ask_command(tmp_path, "s1", 30, "shown"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        # a person answers once the dialog is drawn: later than the hook's start
        poll(lambda: age(asking.pid) >= 0.05, what="the dialog on screen a moment")
        done = subprocess.run(
            hook_command(tmp_path, "s1"),
            input=json.dumps({"hook_event_name": "PostToolUse", **tool}),
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert done.returncode == 0
        tracker.apply_spool()
        assert store.get("s1").attention == "working"
        assert asking.stdin is not None
        asking.stdin.write(json.dumps({"hook_event_name": "PermissionRequest", **tool}))
        asking.stdin.close()
        path = spool_path(tmp_path, "s1")
        poll(
            lambda: any(r.get("request") for r in read_spool(path, 0)[0]),
            what="the late request spooled",
        )
        tracker.apply_spool()
        assert store.get("s1").attention == "working"
        assert tracker.requests.pending(["s1"]) == []
        assert asking.stdout is not None
        out = asking.stdout.read()  # (until it ends)
        assert asking.wait(timeout=30) == 0 and out == ""  # no decision: the CLI's own stands
        ended = [r for r in read_spool(path, 0)[0] if r["event"] == ENDED]
        assert [(r["decision"], r["reason"]) for r in ended] == [
            ("closed", "answered in the terminal")
        ], ended
    finally:
        if asking.poll() is None:
            asking.kill()
        asking.wait()
        for pipe in (asking.stdin, asking.stdout):
            if pipe is not None:
                pipe.close()
        store.close()


def test_events_spooled_before_their_record_exists_are_applied_once_it_does(
    tmp_path: Path,
) -> None:
    """An agent's hooks run as soon as its process starts, before the launch that started
    it has recorded the session: a wake in that window reads the lines of a session
    that has no record yet. They must stay unread until it has one, not be dropped."""
    import logging

    from jupyter_agents.agents.attention import AttentionTracker
    from jupyter_agents.agents.kinds import make_kinds
    from jupyter_agents.agents.spool import spool_path
    from jupyter_agents.core.records import Session
    from jupyter_agents.core.store import SessionStore

    store = SessionStore(tmp_path / "sessions.db")
    spool = spool_path(tmp_path, "s1")
    spool.parent.mkdir()
    spool.write_text(json.dumps({"t": 10.0, "event": "SessionStart", "source": "startup"}) + "\n")

    def change(session_id: str, action: Any = None, **fields: Any) -> Session | None:
        store.update(session_id, **fields)
        return store.get(session_id)

    tracker = AttentionTracker(
        tmp_path, store, make_kinds(["bash"], {}), change, logging.getLogger("t")
    )
    assert tracker.apply_spool() == 0  # the wake, before the record
    store.add(Session(id="s1", name="1", status="running", backend="tmux", kind="claude"))
    assert tracker.apply_spool() == 1
    assert store.get("s1").attention == "ready"
    store.close()


def test_a_start_hook_applied_while_its_session_is_launched_is_not_lost(
    agents_state_dir: Path, fake_agents: Any, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving a slow machine makes (issue 53): the new process's SessionStart
    is spooled, and a wake applies the spool, after the backend started the process
    and before its launch is recorded (a new session) or while the record still says
    its old process ended (a restore). Both must be ``ready`` when the call returns."""
    from jupyter_agents.agents.spool import read_spool, spool_path
    from jupyter_agents.config import open_sessions
    from jupyter_agents.pytest_plugin import kill_backends

    for key, value in fake_agents.env.items():
        monkeypatch.setenv(key, value)
    service = open_sessions(str(agents_state_dir))
    backend = service.backends.default()
    spawn = backend.spawn
    woken: list[int] = []

    def spawn_then_wake(request: Any) -> Any:
        live = spawn(request)
        path = spool_path(agents_state_dir, request.session_id)
        already = len(read_spool(path, 0)[0])

        def started() -> bool:
            records = read_spool(path, 0)[0][already:]
            return any(r["event"] == "SessionStart" for r in records)

        poll(started, what="the new process's SessionStart spooled")
        woken.append(service.refresh.apply_attention())  # the hook's wake, before the record
        return live

    monkeypatch.setattr(backend, "spawn", spawn_then_wake)
    try:
        session, _ = service.create(cwd=str(project), kind="claude", strict=True)
        assert session.attention == "ready", session
        assert service.get(session.id).attention == "ready"

        kill_backends(agents_state_dir)  # a reboot
        service.reconcile()
        assert service.get(session.id).status == "interrupted"
        restored = service.restorer.restore(session.id)
        assert restored.status == "running"
        assert restored.attention == "ready", restored
        assert service.get(session.id).attention == "ready"
        assert len(woken) == 2
    finally:
        service.close()
        kill_backends(agents_state_dir)
