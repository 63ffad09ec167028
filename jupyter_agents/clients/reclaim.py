"""Reclaiming detached sessions, as an admin's policy.

jupyterhub-idle-culler stops idle servers; the sessions they leave (``on_shutdown =
"detach"``) run on until they exit, and nothing of a user the hub deleted ends by itself.
This command lists every user's sessions with their age, activity and cost, and ends
those past the policy. Run it as root, once or as a JupyterHub service (``--every``)::

    python -m jupyter_agents.clients.reclaim --idle-timeout 86400 --end --every 300

Each round reads each user's state dir (``~/.local/share/jupyter/agents``) in a child
process running as that user (a state dir is private to its user), which reconciles the
store with the backend, then decides, per running session (:func:`decide`, pure):

- **a hub user deleted** (seen in an earlier round's ``GET /hub/api/users``, missing
  from the last :data:`MISSING_ROUNDS` answers): every session ends, then the user's
  tmux server or broker;
- **an agent at work past its unattended limit** (``AgentsApp.unattended_limit`` or its
  own: what it spent since the last input with nobody watching, read from its
  conversation files now, :func:`~jupyter_agents.spend.limits.exceeded`): ends; a running
  server would have interrupted it (its attention is then ``error``, not ``working``);
- **an agent at work** (attention ``working``) within ``AgentsApp.agent_keepalive`` of
  the last human input (as for idle culling, :func:`~jupyter_agents.server.activity.
  keepalive_until`): kept;
- **idle**: no output (its transcript), no human input and no viewer for
  ``--idle-timeout`` seconds: ends (0, the default: never);
- else kept.

Every ending is recorded in the session's record (``killed``, with the reason) and logged
with it. Without ``--end`` nothing is ended: the listing says what would be. Users are
those of the hub when ``$JUPYTERHUB_API_URL`` and ``$JUPYTERHUB_API_TOKEN`` are set (as for
a hub service with the scope ``list:users``), else ``--users``, else every user (uid >=
1000) with a state dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import pwd
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from jupyter_agents.core import clock
from jupyter_agents.core.errors import AgentsError
from jupyter_agents.server.activity import keepalive_until
from jupyter_agents.spend.limits import exceeded

log = logging.getLogger("jupyter_agents.clients.reclaim")

#: where a user's sessions are, relative to their home (the default state dir)
STATE_DIR = Path(".local/share/jupyter/agents")
#: the lowest uid of a person's account (login.defs UID_MIN) when no hub names users
UID_MIN = 1000
#: how long one user's round may take (s)
USER_TIMEOUT = 60.0
#: answers of the hub in a row a known user must be missing from to count as deleted
MISSING_ROUNDS = 2


@dataclasses.dataclass(frozen=True)
class Policy:
    """What ends: sessions idle ``idle_timeout`` s (0: none); a deleted user's all."""

    idle_timeout: float = 0.0


@dataclasses.dataclass(frozen=True)
class Facts:
    """What is known of one running session (epoch seconds)."""

    id: str
    name: str
    kind: str
    attention: str | None
    created: float
    started: float
    last_output: float | None
    last_input: float | None
    watched: bool
    cost: float | None
    #: until when an agent at work is kept (:func:`~jupyter_agents.server.activity.
    #: keepalive_until` with the user's ``agent_keepalive``); None: it is not at work
    working_until: float | None = None
    #: why it is past its unattended limit (:func:`~jupyter_agents.spend.limits.exceeded`)
    over_limit: str | None = None


def idle_since(facts: Facts) -> float:
    """Since when nothing happened in the session: the latest of its start, its last
    output and the last human input."""
    return max(facts.started, facts.last_output or 0.0, facts.last_input or 0.0)


def decide(facts: Facts, now: float, policy: Policy, deleted: bool) -> tuple[bool, str]:
    """(end it, why) for one running session.

    >>> f = Facts("a", "1", "shell", None, 0.0, 0.0, 100.0, None, False, None)
    >>> decide(f, 200.0, Policy(idle_timeout=50.0), deleted=False)
    (True, 'idle 100 s (no output, input or viewer; limit 50 s)')
    >>> decide(f, 120.0, Policy(idle_timeout=50.0), deleted=False)
    (False, 'active 20 s ago')
    >>> w = dataclasses.replace(f, kind="aider", attention="working", working_until=250.0)
    >>> decide(w, 200.0, Policy(idle_timeout=50.0), deleted=False)
    (False, 'agent at work, kept 50 s more')
    >>> decide(w, 260.0, Policy(idle_timeout=50.0), deleted=False)[0]
    True
    >>> decide(w, 200.0, Policy(), deleted=True)
    (True, 'user deleted from the hub')
    >>> decide(dataclasses.replace(w, over_limit="unattended limit: $6"), 200.0, Policy(), False)
    (True, 'unattended limit: $6')
    """
    if deleted:
        return True, "user deleted from the hub"
    if facts.over_limit is not None and facts.attention == "working" and not facts.watched:
        return True, facts.over_limit  # still spending: no server interrupted it
    if facts.working_until is not None and now < facts.working_until:
        return False, f"agent at work, kept {facts.working_until - now:.0f} s more"
    if facts.watched:
        return False, "watched"
    idle = now - idle_since(facts)
    if policy.idle_timeout > 0 and idle >= policy.idle_timeout:
        return True, (
            f"idle {idle:.0f} s (no output, input or viewer; limit {policy.idle_timeout:.0f} s)"
        )
    return False, f"active {idle:.0f} s ago"


def _last_output(transcripts: Path) -> float | None:
    try:
        return max(p.stat().st_mtime for p in transcripts.iterdir())
    except (OSError, ValueError):
        return None


def user_round(state_dir: Path, policy: Policy, deleted: bool, end: bool) -> list[dict[str, Any]]:
    """One user's round, run as that user: reconcile, decide for each running session,
    end those due when ``end`` (and, for a deleted user, the backends). One record per
    session: what it is, its facts, the decision."""
    from jupyter_agents.config import load_settings

    settings = load_settings(str(state_dir))
    service = settings.open_sessions(create=False)
    try:
        service.reconcile()
        service.refresh.apply_attention()  # hook events since a server last applied them
        service.refresh.read_usage()  # what agents spent since a server last read it
        running = service.terminals()
        usage = service.usage.usage([s.id for s in running])
        now = time.time()
        records = []
        for session in running:
            used = usage.get(session.id)
            summary = used.total if used is not None else None
            facts = Facts(
                id=session.id,
                name=session.name,
                kind=session.kind,
                attention=session.attention,
                created=clock.epoch(session.created),
                started=session.pid_created or clock.epoch(session.created),
                last_output=_last_output(state_dir / "transcripts" / session.id),
                last_input=used.allowance.since if used and used.allowance else None,
                watched=bool(used and used.watched),
                cost=summary.cost(service.usage.prices) if summary is not None else None,
            )
            limit = service.usage.limit if used is None or used.limit is None else used.limit
            facts = dataclasses.replace(
                facts,
                working_until=keepalive_until(
                    session, facts.last_input, 0.0, settings.agent_keepalive
                ),
                over_limit=exceeded(limit, used.allowance)
                if used is not None and used.allowance is not None and limit
                else None,
            )
            due, why = decide(facts, now, policy, deleted)
            if due and end:
                try:
                    service.terminate(session.id, reason=f"reclaimed: {why}")
                except AgentsError as e:  # it ended meanwhile
                    log.info("reclaim: %s not ended: %s", session.id, e)
                    due = False
            records.append(
                {
                    **dataclasses.asdict(facts),
                    "status": session.status,
                    "age": round(now - facts.created, 1),
                    "idle": round(now - idle_since(facts), 1),
                    "end": due,
                    "ended": due and end,
                    "why": why,
                }
            )
        if deleted and end:
            service.kill_server()  # nothing of theirs runs on
        return records
    finally:
        service.close()


def hub_users() -> set[str] | None:
    """The hub's user names (``GET /users``, every page), None when not run with a hub
    API token."""
    api, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
    if not api or not token:
        return None
    names: set[str] = set()
    offset = 0
    while True:
        url = f"{api.rstrip('/')}/users?offset={offset}&limit=200"
        req = urllib.request.Request(url)  # noqa: S310
        req.add_header("Authorization", f"token {token}")
        req.add_header("Accept", "application/jupyterhub-pagination+json")
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310
            page = json.loads(resp.read())
        items = page["items"] if isinstance(page, dict) else page
        names.update(u["name"] for u in items)
        following = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
        if not following:
            return names
        offset = int(following["offset"])


def candidates(users: Iterable[str] | None) -> list[pwd.struct_passwd]:
    """The accounts to look at: ``users`` (those that exist), else every account with
    uid >= :data:`UID_MIN` whose home has a state dir."""
    if users is not None:
        found = []
        for name in sorted(set(users)):
            try:
                found.append(pwd.getpwnam(name))
            except KeyError:
                continue
        return found
    return [
        p for p in pwd.getpwall() if p.pw_uid >= UID_MIN and (Path(p.pw_dir) / STATE_DIR).is_dir()
    ]


def run_as(account: pwd.struct_passwd, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` as ``account`` (its uid, gid and no other groups), with its home."""
    env = {
        "HOME": account.pw_dir,
        "USER": account.pw_name,
        "LOGNAME": account.pw_name,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    other = account.pw_uid != os.getuid()
    return subprocess.run(
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=USER_TIMEOUT,
        check=False,
        cwd=account.pw_dir if os.path.isdir(account.pw_dir) else "/",
        user=account.pw_uid if other else None,
        group=account.pw_gid if other else None,
        extra_groups=[] if other else None,
    )


class Reclaimer:
    """The rounds of one run: remembers the hub's users between rounds, so a user the
    hub no longer has is known as deleted."""

    def __init__(self, policy: Policy, end: bool, users: Sequence[str] | None = None) -> None:
        self.policy = policy
        self.end = end
        self.users = list(users) if users is not None else None
        #: the hub's users seen so far (and not yet found deleted)
        self.known: set[str] = set()
        #: known users missing from the hub's answers, for how many rounds in a row
        self.missing: dict[str, int] = {}

    def deleted(self, hub: set[str]) -> set[str]:
        """The known users the hub no longer has: missing from :data:`MISSING_ROUNDS`
        of its answers in a row (one answer is not believed alone, and an answer with no
        user at all never is); they are forgotten once found.

        >>> r = Reclaimer(Policy(), end=False)
        >>> r.deleted({"a", "b"}), r.deleted({"a"}), r.deleted(set()), r.deleted({"a"})
        (set(), set(), set(), {'b'})
        >>> r.known, r.deleted({"a"})
        ({'a'}, set())
        """
        if not hub and self.known:
            log.warning("reclaim: the hub lists no user; no user counts as deleted")
            return set()
        for name in self.known - hub:
            self.missing[name] = self.missing.get(name, 0) + 1
        for name in hub:
            self.missing.pop(name, None)
        gone = {name for name, rounds in self.missing.items() if rounds >= MISSING_ROUNDS}
        for name in gone:
            del self.missing[name]
        self.known = (self.known | hub) - gone
        return gone

    def round(self) -> list[dict[str, Any]]:
        """One round over every account: records of every running session, each with
        ``user`` and ``deleted``."""
        deleted: set[str] = set()
        names: Iterable[str] | None = self.users
        try:
            hub = hub_users()
        except (OSError, ValueError, KeyError) as e:
            log.warning("reclaim: the hub did not answer (%s); no user counts as deleted", e)
            names = set(self.known)
        else:
            if hub is not None:
                deleted = self.deleted(hub)
                names = hub | self.known | deleted
        records = []
        for account in candidates(names):
            gone = account.pw_name in deleted
            state_dir = Path(account.pw_dir) / STATE_DIR
            if not state_dir.is_dir():
                continue
            argv = [sys.executable, "-m", "jupyter_agents.clients.reclaim", "--one", str(state_dir)]
            argv += [f"--idle-timeout={self.policy.idle_timeout}"]
            argv += ["--deleted"] if gone else []
            argv += ["--end"] if self.end else []
            try:
                done = run_as(account, argv)
            except subprocess.TimeoutExpired:
                log.error("reclaim: %s: no answer in %.0f s", account.pw_name, USER_TIMEOUT)
                continue
            for line in done.stderr.splitlines():
                log.info("reclaim: %s: %s", account.pw_name, line)
            if done.returncode != 0:
                log.error("reclaim: %s: failed (exit %d)", account.pw_name, done.returncode)
                continue
            for line in done.stdout.splitlines():
                record = {"user": account.pw_name, "deleted": gone, **json.loads(line)}
                if record["ended"]:
                    log.warning(
                        "reclaim: ended %s's session %s (%s, terminal %r): %s",
                        record["user"], record["id"], record["kind"], record["name"],
                        record["why"],
                    )  # fmt: skip
                records.append(record)
        return records


def _table(records: list[dict[str, Any]]) -> str:
    head = ("USER", "ID", "NAME", "KIND", "AGE", "IDLE", "WATCHED", "COST", "DECISION")
    rows = [head]
    for r in records:
        cost = "" if r["cost"] is None else f"${r['cost']:.2f}"
        verdict = ("ended: " if r["ended"] else "end: " if r["end"] else "keep: ") + r["why"]
        rows.append(
            (r["user"], r["id"], r["name"], r["kind"], f"{r['age']:.0f}s", f"{r['idle']:.0f}s",
             "yes" if r["watched"] else "no", cost, verdict)
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jupyter_agents.clients.reclaim``: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_agents.clients.reclaim",
        description="List every user's running sessions with age, activity and cost, and "
        "end those past the policy (idle; users deleted from the hub). Run as root.",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=0.0,
        metavar="S",
        help="end a session with no output, no human input and no viewer for S seconds "
        "(agents at work are kept within their agent_keepalive); 0: never (default)",
    )
    parser.add_argument("--end", action="store_true", help="end them (default: only list)")
    parser.add_argument(
        "--every", type=float, metavar="S", help="a round every S seconds, forever (a service)"
    )
    parser.add_argument("--users", nargs="+", help="only these accounts (without a hub)")
    parser.add_argument("--json", action="store_true", help="one JSON record per session")
    parser.add_argument("--one", metavar="STATE_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--deleted", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    policy = Policy(idle_timeout=args.idle_timeout)
    if args.one:  # one user's round, as that user
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        for record in user_round(Path(args.one), policy, args.deleted, args.end):
            print(json.dumps(record))
        return 0
    logging.basicConfig(level=logging.INFO, format="[%(levelname)1.1s %(asctime)s] %(message)s")
    reclaimer = Reclaimer(policy, args.end, args.users)
    if args.every is not None:
        # a service: the hub stops it with SIGINT, then SIGTERM; either ends it between
        # (or in) rounds, quietly (a user's round in flight ends with it)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            records = reclaimer.round()
            if args.json:
                for record in records:
                    print(json.dumps(record), flush=True)
            elif args.every is None:
                print(_table(records))
            if args.every is None:
                return 0
            time.sleep(args.every)
    except KeyboardInterrupt:
        if args.every is None:
            raise
        log.info("reclaim: stopped")
        return 0


if __name__ == "__main__":
    sys.exit(main())
