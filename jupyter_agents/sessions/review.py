"""WorktreeReview: what a session started in a git worktree did, and its finish.

A worktree session's record names its worktree (:mod:`.worktrees`); the review lists
its branch's commits and changed files, shows one file before and now
(:func:`~.filediff.file_diff`, notebooks through nbdime), and finishes it: merge into
its base or discard, the worktree and branch removed, the record saying how it ended.
Blocking (git).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from jupyter_agents.core.errors import Conflict, InvalidRequest
from jupyter_agents.core.events import Changer
from jupyter_agents.core.records import Session
from jupyter_agents.core.store import SessionStore
from jupyter_agents.sessions.filediff import file_diff
from jupyter_agents.sessions.worktrees import Finish, Review, Worktree, Worktrees, worktree_of


class WorktreeReview:
    """The worktree sessions of ``store``, their worktrees through ``worktrees``;
    records change through ``change``; a running session is ended with ``terminate``
    (``SessionService.terminate``) before its worktree is finished."""

    def __init__(
        self,
        store: SessionStore,
        worktrees: Worktrees,
        change: Changer,
        terminate: Callable[..., Session],
        log: logging.Logger,
    ) -> None:
        self._store = store
        self._worktrees = worktrees
        self._change = change
        self._terminate = terminate
        self._log = log

    def _worktree(self, session_id: str) -> Worktree:
        worktree = worktree_of(self._store.get(session_id).worktree)
        if worktree is None:
            raise Conflict(f"session {session_id} was not started in a worktree")
        if worktree.ended is not None:
            raise Conflict(f"session {session_id}'s worktree is finished: {worktree.ended}")
        return worktree

    def changes(self, session_id: str) -> Review:
        """What a worktree session did so far (:meth:`~.worktrees.Worktrees.review`)."""
        return self._worktrees.review(self._worktree(session_id))

    def file(self, session_id: str, path: str) -> dict[str, Any]:
        """One file a worktree session changed, before and now, as the review's diff view
        shows it (:func:`~.filediff.file_diff`); :class:`NotFound` for a path its review
        does not list."""
        return file_diff(self._worktrees.versions(self._worktree(session_id), path))

    def finish(self, session_id: str, how: object, confirm: bool = False) -> Session:
        """Merge a worktree session's branch into its base, or discard it; either way its
        worktree and branch go, and the record says how it ended (the conversation and
        transcript stay). A session still running is ended first only with ``confirm``
        (:class:`Conflict` otherwise), as are uncommitted changes dropped; a merge that
        conflicts changes nothing and names the files."""
        if how not in ("merge", "discard"):
            raise InvalidRequest("finish a worktree with action 'merge' or 'discard'")
        action: Finish = "merge" if how == "merge" else "discard"
        worktree = self._worktree(session_id)
        session = self._store.get(session_id)
        if session.status in ("running", "orphaned"):
            if not confirm:
                raise Conflict(
                    f"session {session_id} is still {session.status}: end it first, or "
                    "confirm to end it and finish its worktree"
                )
            if action == "merge":  # nothing ends before the merge can be known to work
                self._worktrees.check_merge(worktree)
            self._terminate(session_id, reason=f"ended to {action} its worktree")
        if action == "merge":
            commit = self._worktrees.merge(worktree, confirm)
            ended = f"merged into {worktree.base} at {commit[:12]}"
        else:
            self._worktrees.discard(worktree, confirm)
            ended = "discarded"
        finished = dataclasses.replace(worktree, ended=ended)
        self._log.info(
            "jupyter_agents: session %s: worktree %s %s", session_id, worktree.path, ended
        )
        changed = self._change(session_id, "updated", worktree=finished.to_record())
        return changed or self._store.get(session_id)
