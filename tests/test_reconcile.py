"""reconcile.plan: the pure decisions, without a server."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyter_agents.backends.base import LiveSession
from jupyter_agents.core.records import Session
from jupyter_agents.sessions.reconcile import KILL_GRACE, plan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def rec(sid: str, status: str = "running", **kw) -> Session:
    return Session(id=sid, name=kw.pop("name", sid), status=status, backend="tmux", pid=100, **kw)


def kinds(actions):
    return {a.session_id: a.kind for a in actions}


def test_live_known_adopted_gone_interrupted():
    actions = plan([rec("a"), rec("b")], [LiveSession("a", 5)], NOW)
    assert kinds(actions) == {"a": "reattach", "b": "interrupt"}
    assert actions[0].pid == 5


def test_unknown_live_is_orphaned_never_killed():
    actions = plan([], [LiveSession("x", 9)], NOW)
    assert [(a.kind, a.was) for a in actions] == [("orphan", None)]


def test_dead_pane_exits_with_code_only_once_known():
    assert kinds(plan([rec("a")], [LiveSession("a", 5, dead=True, exit_code=3)], NOW)) == {
        "a": "exit"
    }
    assert plan([rec("a")], [LiveSession("a", 5, dead=True, exit_code=None)], NOW) == []


def test_ended_record_but_live_becomes_orphan():
    for status in ("exited", "interrupted"):
        actions = plan([rec("a", status)], [LiveSession("a", 5)], NOW)
        assert [(a.kind, a.was) for a in actions] == [("orphan", status)]


def test_killed_record_still_live_waits_for_grace():
    recent = (NOW - timedelta(seconds=5)).isoformat()
    old = (NOW - timedelta(seconds=KILL_GRACE + 1)).isoformat()
    assert plan([rec("a", "killed", last_activity=recent)], [LiveSession("a", 5)], NOW) == []
    assert kinds(plan([rec("a", "killed", last_activity=old)], [LiveSession("a", 5)], NOW)) == {
        "a": "orphan"
    }


def test_orphan_record_keeps_its_status_while_live_and_is_interrupted_when_gone():
    assert plan([rec("o", "orphaned")], [LiveSession("o", 5)], NOW) == []
    assert kinds(plan([rec("o", "orphaned")], [], NOW)) == {"o": "interrupt"}


def test_old_records_untouched():
    assert plan([rec("a", "exited"), rec("b", "killed"), rec("c", "interrupted")], [], NOW) == []


def test_an_ended_record_releases_its_dead_pane():
    killed = rec("a", status="killed")
    actions = plan([killed], [LiveSession("a", 5, dead=True, exit_code=137)], NOW)
    assert [(a.kind, a.was) for a in actions] == [("release", "killed")]
