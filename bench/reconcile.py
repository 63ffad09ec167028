"""4. Reconcile at scale: a state dir with many historical records (written with
:class:`~jupyter_agents.core.store.SessionStore` before the server starts) plus live
sessions spawned through the REST API; ``POST /api/agents/reconcile`` is timed, and
``GET /api/terminals`` too, since it reconciles on every call and JupyterLab polls it
every 10 s. Only our flavors have a reconcile."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from jupyter_agents.core.paths import ensure_private_dir
from jupyter_agents.core.records import Session, Status
from jupyter_agents.core.store import SessionStore
from jupyter_agents.sessions.reconcile import ActionKind

from .harness import BenchServer, Flavor, Mode, each, median, workdir
from .report import Row

TARGET_S = 1.0
_ENDED: tuple[Status, ...] = ("exited", "killed", "interrupted")
#: the action a live, known session gets (typed: mypy catches a rename)
_REATTACH: ActionKind = "reattach"


def write_history(state_dir: Path, records: int, cwd: str, backend: str) -> float:
    """Insert ``records`` ended sessions; returns the seconds it took."""
    store = SessionStore(ensure_private_dir(state_dir) / "sessions.db")
    try:
        t0 = time.perf_counter()
        for i in range(records):
            status = _ENDED[i % len(_ENDED)]
            store.add(
                Session(
                    id=f"hist{i:07d}",
                    name=str(1000 + i % 500),
                    status=status,
                    backend=backend,
                    cwd=cwd,
                    argv=["/bin/bash", "-l"],
                    pid=100_000 + i,
                    pid_created=1.7e9 + i,
                    exit_code=0 if status == "exited" else None,
                    rows=24,
                    cols=80,
                )
            )
        return time.perf_counter() - t0
    finally:
        store.close()


def measure(flavor: Flavor, mode: Mode) -> tuple[float, float, str]:
    """(median seconds of POST /api/agents/reconcile, of GET /api/terminals, a note)."""
    with workdir(f"rc{flavor.name}") as work:
        insert = write_history(
            work / "st", mode.reconcile_records, str(work), flavor.backend or flavor.name
        )
        srv = BenchServer(flavor, work)
        try:
            srv.start()
            t0 = time.perf_counter()
            for _ in range(mode.reconcile_live):
                srv.create_terminal()
            spawn = (time.perf_counter() - t0) / mode.reconcile_live
            srv.verify_flavor()
            runs = max(3, mode.runs)
            post_s, list_s = [], []
            for _ in range(runs):
                t0 = time.perf_counter()
                report = srv.request("POST", "/api/agents/reconcile")
                post_s.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                listed = srv.request("GET", "/api/terminals")
                list_s.append(time.perf_counter() - t0)
            reattached = sum(a["kind"] == _REATTACH for a in report["actions"])
            if reattached != mode.reconcile_live or len(listed) != mode.reconcile_live:
                raise RuntimeError(
                    f"expected {mode.reconcile_live} live, "
                    f"reattached {reattached}, listed {len(listed)}"
                )
        finally:
            srv.stop(signal.SIGKILL)
    note = (
        f"{flavor.name}: {mode.reconcile_records:,} records inserted in {insert:.1f} s, "
        f"{spawn * 1000:.0f} ms per spawn; median of {runs}"
    )
    return median(post_s), median(list_s), note


def run(flavors: list[Flavor], mode: Mode) -> list[Row]:
    results = each([f for f in flavors if f.ours], lambda f: measure(f, mode), mode.parallel)
    post: dict[str, float | None] = {f: r[0] for f, r in results.items()}
    listing: dict[str, float | None] = {f: r[1] for f, r in results.items()}
    notes = [r[2] for r in results.values()]
    if mode.parallel and len(results) > 1:
        notes.append("our flavors ran at once (quick mode)")
    label = f"{mode.reconcile_records:,} records + {mode.reconcile_live} live"
    return [
        Row("4", f"POST /api/agents/reconcile, {label}", "ms",
            {f: v * 1000 if v is not None else None for f, v in post.items()},
            target=f"<= {TARGET_S * 1000:.0f} ms",
            verdict={f: (v or 0) <= TARGET_S for f, v in post.items()}, ratio=False,
            note="; ".join(notes)),
        Row("4", f"GET /api/terminals, {label}", "ms",
            {f: v * 1000 if v is not None else None for f, v in listing.items()}, ratio=False),
    ]  # fmt: skip
