"""What the real-CLI tests share (``tests/test_real_*turns.py``,
``tests/test_real_*_acp.py``): the CLI a module runs and why it may be missing
(:class:`RealCli`), a module's server whose sessions run it against the scripted
endpoint on 127.0.0.1 (:mod:`model_endpoint`; :func:`serving`), and the questions each
test asks it (:class:`TurnRig`), among them a whole ACP turn
(:meth:`AcpRig.acp_turn_with_a_permission`) and an ACP conversation resumed after a
reboot (:meth:`AcpRig.acp_resumed_after_a_reboot`). A module subclasses
:class:`TurnRig` with what only its CLI needs (its HOME, how a session starts)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nbformat
import pytest
from model_endpoint import ModelEndpoint, Provider, Reply, ToolCall, Usage
from test_attention import cli

from jupyter_agents.acp import journal_folder
from jupyter_agents.acp.journal import Journal
from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll, power_loss

#: the plan the ACP tests script (each CLI's plan tool, in its own words), as the turn
#: events show it: (content, status) per entry
PLANNED = [("Make the file", "in_progress"), ("Say it is made", "pending")]


#: where ``.ci/run`` installs the real CLIs
CLI_BIN = Path("/opt/jupyter-agents-cli/bin")


@dataclass(frozen=True)
class RealCli:
    """A real CLI (or ACP adapter) that ``.ci/run`` installs: where it is, and what its
    version output must hold (``says``: the pinned version, or its name)."""

    #: what it is called in a skip reason
    name: str
    path: Path
    says: str
    #: the argv that prints its version (default: ``path --version``)
    version_argv: Sequence[str] = ()
    #: folders put first on PATH to run it
    path_first: Sequence[Path] = ()

    @classmethod
    def pinned(cls, name: str, command: str, variable: str, says: str, **more: Any) -> RealCli:
        """``command`` in :data:`CLI_BIN`, or where the environment's ``variable``
        says."""
        return cls(name, Path(os.environ.get(variable, str(CLI_BIN / command))), says, **more)

    def missing(self) -> str | None:
        """Why it cannot be used here, or None."""
        if not os.access(self.path, os.X_OK):
            return f"{self.name} is not installed at {self.path} (.ci/run installs it)"
        path = os.pathsep.join([*map(str, self.path_first), os.environ.get("PATH", "")])
        try:
            out = subprocess.run(
                list(self.version_argv) or [str(self.path), "--version"],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "PATH": path},
            ).stdout
        except (OSError, subprocess.SubprocessError) as e:
            return f"the version of {self.path} could not be read: {e}"
        if self.says not in out:
            return f"{self.path} is not {self.name} {self.says}: {out.strip()[:80]!r}"
        return None


def realcli_marks(missing: str | None, group: str | None = None) -> list[pytest.MarkDecorator]:
    """A real-CLI module's ``pytestmark``: skipped, with the reason, where ``missing``
    says why; generous polls (a cold start of a real CLI can be slow); with ``group``,
    one server for the module, its tests in order."""
    marks = [
        pytest.mark.realcli,
        pytest.mark.timeout(300),
        pytest.mark.skipif(missing is not None, reason=missing or ""),
    ]
    return marks + ([pytest.mark.xdist_group(group)] if group else [])


R = TypeVar("R", bound="TurnRig")
#: what a module does to make its CLI's HOME for an endpoint (in ``base``, for the
#: ``project``): the server's environment, and the module's own fields of its rig
Setup = Callable[[ModelEndpoint, Path, Path], tuple[dict[str, str], dict[str, Any]]]


def serving(
    rig: type[R],
    base: Path,
    provider: Provider,
    setup: Setup,
    scrub: Iterable[str] = (),
    path_first: Sequence[Path] = (),
    state: Path | None = None,
    args: Sequence[str] = (),
) -> Iterator[R]:
    """A module's rig in ``base``: a project folder, the scripted endpoint of
    ``provider``, what the machine sets that would change what the CLI does offline
    (``scrub``) unset, the HOME ``setup`` makes, and a server (its state in ``state``,
    default ``base/state``) started with ``args`` and ``setup``'s environment,
    ``path_first`` first on its PATH. Everything the rig started ends with it. A
    generator: a fixture yields from it."""
    project = base / "proj"
    project.mkdir()
    with pytest.MonkeyPatch.context() as env_of_tests, ModelEndpoint(provider) as endpoint:
        for name in scrub:
            env_of_tests.delenv(name, raising=False)
        env, fields = setup(endpoint, base, project)
        rest = env.get("PATH", os.environ["PATH"])
        env["PATH"] = os.pathsep.join([*map(str, path_first), rest])
        server = ServerProcess(state or base / "state", base, env=env, args=list(args)).start()
        made = rig(server=server, endpoint=endpoint, project=project, env=env, base=base, **fields)
        try:
            yield made
        finally:
            made.close()


def rig_fixture(
    rig: type[R],
    folder: str,
    provider: Callable[[], Provider],
    setup: Setup,
    scrub: Iterable[str] = (),
    path_first: Sequence[Path] = (),
) -> Any:
    """A module's fixture ``rig`` (``rig = rig_fixture(...)``), one server for the
    module: :func:`serving` in a new temporary folder named ``folder``, with a
    ``provider()``."""

    @pytest.fixture(scope="module", name="rig")
    def fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[R]:
        base = tmp_path_factory.mktemp(folder)
        yield from serving(rig, base, provider(), setup, scrub, path_first)

    return fixture


@dataclass
class TurnRig:
    """The module's server, endpoint and project folder; ``env``: what its server was
    started with (again after :meth:`reboot`)."""

    server: ServerProcess
    endpoint: ModelEndpoint
    project: Path
    env: dict[str, str]
    base: Path

    @property
    def state(self) -> Path:
        return self.server.state_dir

    def get(self, sid: str) -> dict[str, Any]:
        status, body = self.server.request("GET", f"/api/agents/sessions/{sid}")
        assert status == 200, body
        return dict(body)

    def attention_becomes(self, sid: str, state: str, what: str) -> dict[str, Any]:
        """The session once its attention is ``state`` (a turn can take a minute on a
        loaded machine)."""
        return dict(
            poll(
                lambda: (m := self.get(sid))["attention"] == state and m,
                timeout=120,
                interval=0.5,
                what=f"{what} (attention {state!r})",
            )
        )

    def usage_becomes(self, sid: str, sent: Usage) -> dict[str, Any]:
        """The session's usage once its tokens are what the endpoint ``sent``."""
        return dict(
            poll(
                lambda: (u := self.get(sid)["usage"]) and u["tokens"] == sent.as_tokens() and u,
                timeout=60,
                what=f"usage {sent.as_tokens()}",
            )
        )

    def pending(self, sid: str) -> dict[str, Any]:
        """The session's one pending permission request, once there is one."""
        (request,) = poll(
            lambda: self.server.request("GET", f"/api/agents/requests?session={sid}")[1],
            timeout=120,
            interval=0.5,
            what="a pending permission request",
        )
        return dict(request)

    def none_pending(self, sid: str) -> None:
        poll(
            lambda: self.server.request("GET", f"/api/agents/requests?session={sid}")[1] == [],
            timeout=60,
            what="no pending permission request",
        )

    def send(self, sid: str, text: str) -> None:
        """Type ``text`` and Enter into the session as ``jupyter agents send`` does."""
        code, out, err = cli(self.state, "send", sid, text)
        assert code == 0, (out, err)

    def spooled(self, sid: str) -> list[str]:
        """The events the session's hooks spooled, in order."""
        path = self.state / "spool" / f"{sid}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line)["event"] for line in lines if line.strip()]

    def turn_events(self, sid: str, last: str) -> list[dict[str, Any]]:
        """The session's turn events but ``other`` ones, once the last of them says
        ``last`` (the turn's answer)."""

        def events() -> list[dict[str, Any]] | None:
            status, page = self.server.request("GET", f"/api/agents/sessions/{sid}/turns")
            assert status == 200, page
            shown = [e for e in page["events"] if e["type"] != "other"]
            return shown if shown and shown[-1].get("text") == last else None

        return list(poll(events, timeout=30, what="the answer's event"))

    def prompt(self, sid: str, text: str) -> None:
        """Send ``text`` to ACP session ``sid`` over REST, once its agent is ready."""

        def accepted() -> Any:
            status, sent = self.server.request(
                "POST", f"/api/agents/sessions/{sid}/prompt", {"text": text}
            )
            return sent if status == 202 else None

        poll(accepted, timeout=60, what="the prompt accepted")

    def turn_ended(self, sid: str, last: str) -> list[dict[str, Any]]:
        """The session's turn events but ``other`` ones, once a turn has ended
        (``turn_end``, an ACP session's) after an answer that says ``last``."""

        def ended() -> list[dict[str, Any]] | None:
            status, page = self.server.request("GET", f"/api/agents/sessions/{sid}/turns")
            assert status == 200, page
            shown = [e for e in page["events"] if e["type"] != "other"]
            said = "".join(e["text"] for e in shown if e["type"] == "agent_message")
            done = shown and shown[-1]["type"] == "turn_end" and last in said
            return shown if done else None

        return list(poll(ended, timeout=120, what=f"the turn's end after {last!r}"))

    def readies(self, sid: str) -> list[dict[str, Any]]:
        """The ``ready`` records of ACP session ``sid``'s journal: one per proxy, saying
        how it opened its ACP session (``new``, ``resumed``, ``loaded``)."""
        journal = Journal(journal_folder(self.state, sid))
        return [r for r in map(json.loads, journal.after(0)) if r.get("event") == "ready"]

    def notebook_ran(self, sid: str, printed: str) -> Any:
        """The session's conversation as a notebook (``?format=ipynb``), which must
        validate and hold a code cell whose output holds ``printed``; the notebook."""
        status, raw = self.server.request(
            "GET", f"/api/agents/sessions/{sid}/conversation?format=ipynb"
        )
        assert status == 200, raw
        notebook = nbformat.reads(
            raw if isinstance(raw, (bytes, str)) else json.dumps(raw), as_version=4
        )
        nbformat.validate(notebook)
        outputs = [
            "".join(output.get("text", ""))
            for cell in notebook.cells
            if cell.cell_type == "code"
            for output in cell.outputs
        ]
        assert any(printed in output for output in outputs), outputs
        return notebook

    def allow(self, request: Mapping[str, Any]) -> None:
        """Answer pending ``request`` "allow" over REST."""
        status, answered = self.server.request(
            "POST", f"/api/agents/requests/{request['id']}", {"decision": "allow"}
        )
        assert status == 200, answered

    @property
    def marker(self) -> Path:
        """The file the "turns in order" tests have a shell call write."""
        return self.project / "turn-marker.txt"

    @property
    def marker_command(self) -> str:
        """The shell command those tests script: it prints ``turn-42`` into
        :attr:`marker`."""
        return f"printf 'turn-%s\\n' 42 | tee {self.marker}"

    def marker_printed(
        self,
        sid: str,
        call: Mapping[str, Any],
        output: Mapping[str, Any],
        tool: str,
        printed: str,
        field: str = "command",
    ) -> Any:
        """Turn event ``call`` is the shell call of :attr:`marker_command` (its input's
        ``field``) by ``tool`` (its title ``tool: command``), of kind ``execute``;
        ``output`` ends it, completed, with what the CLI kept of the output
        (``printed``); the marker holds ``turn-42``, and the session's notebook
        validates and holds the output. The notebook."""
        command = self.marker_command
        assert (call["tool_kind"], call["input"][field]) == ("execute", command)
        assert call["title"] == f"{tool}: {command}"
        assert (output["tool_call_id"], output["status"]) == (call["tool_call_id"], "completed")
        assert output["output"] == printed, output
        assert self.marker.read_text() == "turn-42\n"
        return self.notebook_ran(sid, "turn-42")

    def reboot(self) -> None:
        """What a power loss leaves: no tmux, no server, no hook run by a dying CLI; the
        state dir intact. The server starts again with the same settings."""
        power_loss(self.server)
        self.server = ServerProcess(self.state, self.base, env=self.env).start()

    def close(self) -> None:
        """End what the module started: every session its server lists (ended as a
        person would, so their CLIs run their exit), the server, its backends."""
        status, sessions = self.server.request("GET", "/api/agents/sessions")
        for s in sessions if status == 200 else []:
            self.server.request("DELETE", f"/api/agents/sessions/{s['id']}")
        self.server.stop(signal.SIGKILL)
        kill_backends(self.state)


@dataclass
class AcpTurn:
    """What :meth:`AcpRig.acp_turn_with_a_permission` saw: the session as created,
    its conversation id, the pending request answered, the turn's events."""

    agent: dict[str, Any]
    cid: str
    request: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class AcpRig(TurnRig):
    """An ACP module's rig: its CLI's HOME, and the session its tests go on with."""

    home: Path
    sid: str = ""
    cid: str = ""

    def start_acp(self, kind: str) -> tuple[dict[str, Any], str]:
        """A new ACP session of ``kind`` in the project, and its conversation id once
        its agent has opened its ACP session."""
        status, agent = self.server.request(
            "POST", "/api/agents/sessions", {"kind": kind, "cwd": str(self.project), "mode": "acp"}
        )
        assert status == 201, agent
        assert agent["mode"] == "acp"
        cid = poll(
            lambda: self.get(agent["id"])["conversation_id"],
            timeout=120,
            what=f"{kind}'s ACP session id",
        )
        return dict(agent), str(cid)

    def acp_turn_with_a_permission(
        self,
        kind: str,
        made: Path,
        shell: ToolCall,
        plan: ToolCall | None,
        usage: Sequence[Usage],
    ) -> AcpTurn:
        """A new ACP session of ``kind`` (kept as :attr:`sid`, :attr:`cid`) takes the
        prompt "make the file" over REST; the endpoint says "Planning-it" with the CLI's
        ``plan`` call (if any: of :data:`PLANNED`), "Writing-the-file" with the
        ``shell`` call, which touches ``made``, then "Made-it", each with the next
        ``usage``. The call's permission request is pending, with the command as its
        tool, until it is allowed over REST; then the command runs and the turn ends.
        Its events: the prompt first, the answers in order, the plan (if any) before
        the call, the call of kind ``execute`` before its end (``completed``), and last
        the turn's end (``end_turn``); the session waits for its user, told by ACP."""
        spent = iter(usage)
        planning = [Reply("Planning-it", tool=plan, usage=next(spent))] if plan else []
        self.endpoint.add(
            *planning,
            Reply("Writing-the-file", tool=shell, usage=next(spent)),
            Reply("Made-it", usage=next(spent)),
        )
        agent, self.cid = self.start_acp(kind)
        self.sid = sid = agent["id"]
        self.prompt(sid, "make the file")
        request = self.pending(sid)
        assert request["tool"] == f"touch {made}"
        assert not made.exists()
        self.allow(request)
        poll(made.exists, timeout=60, what="the command run")

        events = self.turn_ended(sid, "Made-it")
        kinds = [e["type"] for e in events]
        assert kinds[0] == "user_message" and events[0]["text"] == "make the file"
        text = "".join(e["text"] for e in events if e["type"] == "agent_message")
        said = [r.text for r in planning] + ["Writing-the-file", "Made-it"]
        assert [text.index(s) for s in said] == sorted(text.index(s) for s in said), text
        calls = [e for e in events if e["type"] == "tool_call"]
        assert calls and calls[0]["tool_kind"] == "execute", calls
        assert f"touch {made}" in [c.get("title") for c in calls]
        ends = [e for e in events if e["type"] == "tool_call_update"]
        assert ends and ends[-1]["status"] == "completed"
        assert kinds.index("tool_call") < kinds.index("tool_call_update") < len(kinds) - 1
        plans = [e for e in events if e["type"] == "plan"]
        if plan:
            (shown,) = plans
            assert [(e["content"], e["status"]) for e in shown["entries"]] == PLANNED
            assert kinds.index("plan") < kinds.index("tool_call")
        else:
            assert plans == []
        assert events[-1]["stop_reason"] == "end_turn"
        # the turn's end is in the journal the moment the agent answers; the proxy
        # spools its Stop beside it, which the server applies once woken: waited for
        session = self.attention_becomes(sid, "waiting", "the session waits for its user")
        assert session["conversation_id"] == self.cid and session["mode"] == "acp"
        assert session["attention_source"] == "acp", session
        return AcpTurn(agent, self.cid, request, events)

    def acp_resumed_after_a_reboot(self) -> None:
        """After a reboot the ACP session :attr:`sid` is interrupted; restore starts its
        agent again, which resumes conversation :attr:`cid` (``session/resume``), and a
        prompt's request carries the earlier turn ("make the file", "Made-it"), its
        answer "Again-here" shown."""
        sid, cid = self.sid, self.cid
        assert sid, "a turn before started the session"
        self.reboot()
        assert self.get(sid)["status"] == "interrupted"
        self.endpoint.add(Reply("Again-here"))
        status, restored = self.server.request("POST", f"/api/agents/sessions/{sid}/restore")
        assert status == 200 and restored["status"] == "running", restored
        (resumed,) = poll(lambda: self.readies(sid)[1:], timeout=120, what="the new ready")
        assert resumed["how"] == "resumed" and resumed["sessionId"] == cid

        self.prompt(sid, "say it again")
        events = self.turn_ended(sid, "Again-here")
        assert [e["text"] for e in events if e["type"] == "user_message"][-1] == "say it again"
        last = self.endpoint.turns()[-1]
        assert "make the file" in last.text() and "Made-it" in last.text()  # the earlier turn
        session = self.get(sid)
        assert session["conversation_id"] == cid and session["reason"] is None
