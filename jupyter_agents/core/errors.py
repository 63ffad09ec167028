"""The exceptions of jupyter_agents.

Each carries a message a person can act on. HTTP handlers map them to statuses with
:func:`http_status`; nothing else in the package raises bare ``Exception``.
"""

from __future__ import annotations


class AgentsError(Exception):
    """Base class of every error this package raises on purpose."""

    status = 500


class InvalidRequest(AgentsError):
    """The caller sent something we refuse (bad name, bad size, bad cwd...)."""

    status = 400


class Forbidden(AgentsError):
    """The requester may not do this (e.g. a viewer without a live read-only grant)."""

    status = 403


class NotFound(AgentsError):
    """No session or terminal by that name or id."""

    status = 404


class Conflict(AgentsError):
    """The request clashes with the current state (e.g. a live name is taken)."""

    status = 409


class Gone(AgentsError):
    """What was asked for existed and has ended (e.g. the permission request an answer
    token was for)."""

    status = 410


class OutOfRange(AgentsError):
    """A byte range outside a transcript."""

    status = 416


class BackendUnavailable(AgentsError):
    """The terminal backend (tmux, broker) cannot be started or reached."""

    status = 503


class StoreError(AgentsError):
    """The session store cannot be opened or is not ours (corrupt, foreign, too new)."""

    status = 500


class StoreClosed(StoreError):
    """The store was closed (the server is stopping): nothing more is read or written."""

    status = 503


class StoreUnavailable(StoreError):
    """SQLite could not read or write the store just now: another process held its lock
    past the busy timeout (a person's ``sqlite3`` shell in a transaction, a stuck CLI),
    the disk is full, an I/O error. Nothing was changed; the same call may succeed later."""

    status = 503


class UnsafeStateDir(AgentsError):
    """The state directory is not private to the current user."""

    status = 500


def http_error(error: AgentsError) -> Exception:
    """The tornado ``HTTPError`` a handler raises for ``error`` (message kept for the client)."""
    from tornado.web import HTTPError

    return HTTPError(error.status, str(error).replace("%", "%%"))
