"""A fake ACP agent on the ``agent-client-protocol`` SDK (a test dependency only): what
a real one does on stdio, scripted by the prompt's text.

Each prompt ``TEXT``: an ``agent_message_chunk`` "fake acp heard: TEXT", a plan of two
entries, an ``execute`` tool call (``echo fake``), a permission request for it (allow
once / reject once), then the tool call completed (output ``fake``) or failed, and the
reply "done: TEXT"; the turn ends with ``end_turn``. A prompt ``stream N`` sends N
chunks ``part-<i>`` a tenth of a second apart before all that; ``/write PATH`` asks the
client to write PATH (``fs/write_text_file``) and ``/run`` to run ``echo x``
(``terminal/create``), and says what came back. ``session/cancel`` ends a turn with
``cancelled``. It offers ``session/resume`` (not with ``FAKE_ACP_RESUME=0``), no
``session/load``.

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
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionResumeCapabilities,
    ToolCallUpdate,
)


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
        if text.startswith("/write "):
            try:
                await self.conn.write_text_file(session_id=session_id, path=text[7:], content="x")
                log(event="write", result="written")
            except RequestError as e:
                log(event="write", error=e.code, message=str(e))
            return PromptResponse(stop_reason="end_turn")
        if text == "/run":
            try:
                await self.conn.create_terminal(session_id=session_id, command="echo", args=["x"])
                log(event="run", result="ran")
            except RequestError as e:
                log(event="run", error=e.code, message=str(e))
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


async def main() -> None:
    log(event="start", argv=sys.argv[1:])
    await run_agent(FakeAgent(), use_unstable_protocol=True)  # (session/resume)


if __name__ == "__main__":
    asyncio.run(main())
