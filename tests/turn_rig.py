"""What the real-turn tests share (``tests/test_real_*turns.py``,
``tests/test_real_*_acp.py``): a module's server whose sessions run a real agent CLI
against the scripted endpoint on 127.0.0.1 (:mod:`model_endpoint`), and the questions
each test asks it. A module subclasses
:class:`TurnRig` with what only its CLI needs (its HOME, how a session starts)."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from model_endpoint import ModelEndpoint, Usage
from test_attention import cli

from jupyter_agents.acp import journal_folder
from jupyter_agents.acp.journal import Journal
from jupyter_agents.pytest_plugin import ServerProcess, kill_backends, poll, power_loss


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
