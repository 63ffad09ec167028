"""One changed file of a worktree session, as the review's diff view shows it.

:func:`file_diff` turns a file's two versions (:class:`~.worktrees.Versions`) into the
REST model of ``GET /api/agents/sessions/<id>/worktree/file?path=...``, by ``kind``:

- ``notebook``: nbdime's diff (``{base, diff}``, what nbdime's own ``/nbdime/api/diff``
  answers, so nbdime's JavaScript renders it: inputs, outputs, metadata); a notebook added
  or deleted is diffed against an empty one. Without nbdime installed, for a version
  that is not a notebook, or when nbdime's diff costs over
  :data:`NOTEBOOK_DIFF_SECONDS` of CPU, a notebook is shown as ``text`` (and ``note``
  says why).
- ``image`` (by the file's extension): ``before`` and ``after`` in base64, with ``mime``.
- ``text``: ``before`` and ``after`` as text (UTF-8).
- ``binary``: neither is text; only sizes.
- ``large``: a version over :data:`~.worktrees.MAX_SHOWN` bytes; only sizes.

Every model has ``path``, ``status``, ``committed``, ``old_path``, ``before_size`` and
``after_size`` (None for a version that does not exist). Blocking: callers run it off
the IO loop.

nbdime's diff is quadratic in the cells it cannot pair by id: two 72 KB notebooks of 100
cells, every id and line new, cost it 16 s of CPU (the same cells under the same ids,
0.4 s). So it runs in a child process
(``python -m jupyter_agents.sessions.filediff``), one at a time, with its CPU time
limited (``RLIMIT_CPU``) and a wall-clock timeout: no notebook can hold a core of the
server for longer.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
import threading
from typing import Any

from jupyter_agents.core.launch import python_module_argv
from jupyter_agents.sessions.worktrees import Versions

#: seconds of CPU nbdime may spend on one notebook diff (then it is shown as text)
NOTEBOOK_DIFF_SECONDS = 10
#: one nbdime diff at a time; a request waits at most this long for its turn
_DIFFING = threading.BoundedSemaphore(1)
_TURN_SECONDS = 2 * NOTEBOOK_DIFF_SECONDS

#: image types the diff view shows as pictures, by extension
IMAGES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
}


def file_diff(versions: Versions) -> dict[str, Any]:
    """The REST model of one changed file (see the module's docstring)."""
    model: dict[str, Any] = {
        **dataclasses.asdict(versions.file),
        "before_size": versions.before_size,
        "after_size": versions.after_size,
    }
    before, after = versions.before, versions.after
    too_large = (versions.before_size is not None and before is None) or (
        versions.after_size is not None and after is None
    )
    if too_large:
        return {**model, "kind": "large"}
    path = versions.file.path.lower()
    suffix = path[path.rfind(".") :] if "." in path.rsplit("/", 1)[-1] else ""
    note = None
    if suffix == ".ipynb":
        notebook, note = _notebook_diff(before, after)
        if notebook is not None:
            return {**model, "kind": "notebook", **notebook}
    if suffix in IMAGES:
        return {
            **model,
            "kind": "image",
            "mime": IMAGES[suffix],
            "before": _b64(before),
            "after": _b64(after),
        }
    texts = [_text(before), _text(after)]
    if any(t is False for t in texts):
        return {**model, "kind": "binary"}
    shown = {**model, "kind": "text", "before": texts[0], "after": texts[1]}
    return shown if note is None else {**shown, "note": note}


def _text(data: bytes | None) -> str | bool | None:
    """``data`` as text; None for no version, False when it is not text."""
    if data is None:
        return None
    if b"\0" in data:
        return False
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return False


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _notebook_diff(
    before: bytes | None, after: bytes | None
) -> tuple[dict[str, Any] | None, str | None]:
    """nbdime's ``{base, diff}`` of two notebook versions (None: an empty notebook), and
    None; or None and why not (None when a version is not a notebook nbdime reads: the
    text shows that)."""
    try:
        import nbdime  # noqa: F401  (the child imports it; here: is it installed?)
        import nbformat
    except ImportError:
        return None, "nbdime is not installed on the server (pip install nbdime): shown as text"
    try:
        base, remote = (
            nbformat.reads(v.decode("utf-8"), as_version=4)  # type: ignore[no-untyped-call]
            if v is not None
            else nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
            for v in (before, after)
        )
        for notebook in (base, remote):
            nbformat.validate(notebook, version=4, relax_add_props=True)
    except (ValueError, nbformat.ValidationError, AttributeError, TypeError):
        return None, None  # not a notebook nbdime can read: shown as text
    if not _DIFFING.acquire(timeout=_TURN_SECONDS):
        return None, "another notebook diff is running: shown as text; try again"
    try:
        diff = _diff_in_child({"base": base, "remote": remote})
    finally:
        _DIFFING.release()
    if diff is None:
        return None, (
            f"nbdime needed over {NOTEBOOK_DIFF_SECONDS} s to compare these notebooks: "
            "shown as text"
        )
    return {"base": base, "diff": diff}, None


def _diff_in_child(pair: dict[str, Any]) -> list[Any] | None:
    """nbdime's diff of ``pair["base"]`` to ``pair["remote"]``, computed by a child
    process with its CPU limited; None when it failed or ran out of time."""
    try:
        done = subprocess.run(
            python_module_argv("jupyter_agents.sessions.filediff", str(NOTEBOOK_DIFF_SECONDS)),
            input=json.dumps(pair).encode(),
            capture_output=True,
            timeout=2 * NOTEBOOK_DIFF_SECONDS + 5,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode:
        return None
    diff = json.loads(done.stdout)
    return diff if isinstance(diff, list) else None


def _main() -> None:
    """The child: ``{base, remote}`` notebooks on stdin, nbdime's diff on stdout; killed
    (SIGXCPU) after the seconds of CPU its argument says (where there are rlimits; the
    parent's timeout everywhere)."""
    if sys.platform != "win32":
        import resource

        limit = int(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    import nbformat
    from nbdime import diff_notebooks

    pair = json.load(sys.stdin)
    base, remote = (
        nbformat.from_dict(pair[k])  # type: ignore[no-untyped-call]
        for k in ("base", "remote")
    )
    json.dump(diff_notebooks(base, remote), sys.stdout)


if __name__ == "__main__":
    _main()
