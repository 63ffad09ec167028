"""A fake ACP agent on the ``agent-client-protocol`` SDK (a test dependency only): what
a real one does on stdio, scripted by the prompt's text.

Each prompt ``TEXT``: an ``agent_message_chunk`` "fake acp heard: TEXT", a plan of two
entries, an ``execute`` tool call (``echo fake``), a permission request for it (allow
once / reject once), then the tool call completed (output ``fake``) or failed, and the
reply "done: TEXT"; the turn ends with ``end_turn``. A prompt ``stream N`` sends N
chunks ``part-<i>`` a tenth of a second apart before all that. Client tools, each
logged with what came back (the result, or the error's code and message):

- ``/write PATH`` asks the client to write :data:`WRITTEN` to PATH (``fs/write_text_file``);
- ``/read PATH [LINE LIMIT]`` to read PATH (``fs/read_text_file``);
- ``/run [JSON]`` to run a command (``terminal/create`` with JSON's fields, default
  ``echo x``), then waits for its exit, reads its output and releases it;
- ``/kill JSON`` runs one, waits for its first output, kills it, waits for its exit,
  reads its output and releases it;
- ``/leave JSON`` runs one and leaves it running.

``/named`` makes a tool call as Claude's ACP adapter does: titled "Terminal" with no
input at first, named ("printf named") and given its input by a later update, then
completed with the output "named"; no permission asked.

``session/cancel`` ends a turn with ``cancelled``. It offers ``session/resume`` (not
with ``FAKE_ACP_RESUME=0``), no ``session/load``.

Every permission answer and client reply is appended to ``$FAKE_ACP_LOG`` (JSON lines
with this process's pid), which the tests read.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    RequestError,
    plan_entry,
    run_agent,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    EnvVariable,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionResumeCapabilities,
    ToolCallUpdate,
)

#: what ``/write`` writes
WRITTEN = "written by the fake ACP agent\n"


def log(**fields: Any) -> None:
    path = os.environ.get("FAKE_ACP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")


class FakeAgent(Agent):
    def __init__(self) -> None:
        self.conn: Any = None
        self.cancelled: set[str] = set()

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        log(event="initialize", client=kwargs.get("client_capabilities") and
            kwargs["client_capabilities"].model_dump(by_alias=True, exclude_none=True))  # fmt: skip
        resume = None if os.environ.get("FAKE_ACP_RESUME") == "0" else SessionResumeCapabilities()
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=False, session_capabilities=SessionCapabilities(resume=resume)
            ),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = str(uuid.uuid4())
        log(event="new", session=session_id, cwd=cwd)
        return NewSessionResponse(session_id=session_id)

    async def resume_session(
        self, session_id: str, cwd: str, **kwargs: Any
    ) -> ResumeSessionResponse:
        log(event="resume", session=session_id, cwd=cwd)
        return ResumeSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.add(session_id)

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        text = " ".join(getattr(block, "text", "") for block in prompt)
        say = self.conn.session_update
        if text.startswith("stream "):
            for i in range(int(text.split()[1])):
                if session_id in self.cancelled:
                    self.cancelled.discard(session_id)
                    return PromptResponse(stop_reason="cancelled")
                await say(session_id, update_agent_message_text(f"part-{i} "))
                await asyncio.sleep(0.1)
        if text == "/named":  # as Claude's adapter: a call named only by its update
            call = f"call-{uuid.uuid4().hex[:8]}"
            await say(session_id, start_tool_call(call, "Terminal", status="pending"))
            await say(
                session_id,
                update_tool_call(call, title="printf named", kind="execute",
                                 status="in_progress", raw_input={"command": "printf named"}),
            )  # fmt: skip
            said = [tool_content(text_block("named"))]
            await say(session_id, update_tool_call(call, status="completed", content=said))
            return PromptResponse(stop_reason="end_turn")
        for verb in ("/write", "/read", "/run", "/kill", "/leave"):
            if text == verb or text.startswith(verb + " "):
                try:
                    result = await self.use_tool(session_id, verb[1:], text[len(verb) + 1 :])
                    log(event=verb[1:], result=result)
                except RequestError as e:
                    log(event=verb[1:], error=e.code, message=str(e))
                return PromptResponse(stop_reason="end_turn")
        await say(session_id, update_agent_message_text(f"fake acp heard: {text}"))
        await say(
            session_id,
            update_plan([plan_entry("Run the command"), plan_entry("Say what it printed")]),
        )
        call = f"call-{uuid.uuid4().hex[:8]}"
        await say(
            session_id,
            start_tool_call(call, "echo fake", kind="execute", status="pending",
                            raw_input={"command": "echo fake"}),
        )  # fmt: skip
        answer = await self.conn.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(tool_call_id=call, title="echo fake", kind="execute"),
            options=[
                PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ],
        )
        outcome = answer.outcome.model_dump(by_alias=True, exclude_none=True)
        log(event="permission", call=call, outcome=outcome)
        allowed = outcome.get("optionId") == "allow"
        await say(
            session_id,
            update_tool_call(
                call,
                status="completed" if allowed else "failed",
                content=[tool_content(text_block("fake" if allowed else "rejected"))],
            ),
        )
        await say(session_id, update_agent_message_text(f"done: {text}"))
        return PromptResponse(stop_reason="end_turn")

    async def use_tool(self, session_id: str, verb: str, rest: str) -> Any:
        """Ask the client for a file or a command (module docstring); what came back."""
        conn = self.conn
        if verb == "write":
            await conn.write_text_file(session_id=session_id, path=rest, content=WRITTEN)
            return "written"
        if verb == "read":
            path, *window = rest.split()
            line, limit = (int(window[0]), int(window[1])) if window else (None, None)
            read = await conn.read_text_file(
                session_id=session_id, path=path, line=line, limit=limit
            )
            return read.model_dump(by_alias=True, exclude_none=True)
        asked = json.loads(rest) if rest else {"command": "echo", "args": ["x"]}
        asked["env"] = [EnvVariable(name=k, value=v) for k, v in asked.get("env", {}).items()]
        made = await conn.create_terminal(session_id=session_id, **asked)
        terminal = {"session_id": session_id, "terminal_id": made.terminal_id}
        if verb == "leave":
            return made.terminal_id
        if verb == "kill":
            for _ in range(200):
                if (await conn.terminal_output(**terminal)).output:
                    break
                await asyncio.sleep(0.05)
            await conn.kill_terminal(**terminal)
        status = await conn.wait_for_terminal_exit(**terminal)
        output = await conn.terminal_output(**terminal)
        await conn.release_terminal(**terminal)
        return {
            "exit": status.model_dump(by_alias=True, exclude_none=True),
            **output.model_dump(by_alias=True, exclude_none=True),
        }


async def main() -> None:
    log(event="start", argv=sys.argv[1:])
    await run_agent(FakeAgent(), use_unstable_protocol=True)  # (session/resume)


if __name__ == "__main__":
    asyncio.run(main())
