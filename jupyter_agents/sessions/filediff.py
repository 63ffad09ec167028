"""One changed file of a worktree session, as the review's diff view shows it.

:func:`file_diff` turns a file's two versions (:class:`~.worktrees.Versions`) into the
REST model of ``GET /api/agents/sessions/<id>/worktree/file?path=...``, by ``kind``:

- ``notebook``: nbdime's diff (``{base, diff}``, what nbdime's own ``/nbdime/api/diff``
  answers, so nbdime's JavaScript renders it: inputs, outputs, metadata); a notebook added
  or deleted is diffed against an empty one. Without nbdime installed, or for a version
  that is not a notebook, a notebook is shown as ``text``.
- ``image`` (by the file's extension): ``before`` and ``after`` in base64, with ``mime``.
- ``text``: ``before`` and ``after`` as text (UTF-8).
- ``binary``: neither is text; only sizes.
- ``large``: a version over :data:`~.worktrees.MAX_SHOWN` bytes; only sizes.

Every model has ``path``, ``status``, ``committed``, ``old_path``, ``before_size`` and
``after_size`` (None for a version that does not exist). Blocking (nbdime's diff is CPU
work): callers run it off the IO loop.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from jupyter_agents.sessions.worktrees import Versions

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
    if suffix == ".ipynb":
        notebook = _notebook_diff(before, after)
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
    return {**model, "kind": "text", "before": texts[0], "after": texts[1]}


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


def _notebook_diff(before: bytes | None, after: bytes | None) -> dict[str, Any] | None:
    """nbdime's ``{base, diff}`` of two notebook versions (None: an empty notebook); None
    when nbdime is not installed or a version is not a notebook."""
    try:
        import nbformat
        from nbdime import diff_notebooks
    except ImportError:
        return None
    try:
        base, remote = (
            nbformat.reads(v.decode("utf-8"), as_version=4)  # type: ignore[no-untyped-call]
            if v is not None
            else nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
            for v in (before, after)
        )
        for notebook in (base, remote):
            nbformat.validate(notebook, version=4, relax_add_props=True)
        return {"base": base, "diff": diff_notebooks(base, remote)}
    except (ValueError, nbformat.ValidationError, AssertionError, AttributeError, TypeError):
        return None  # not a notebook nbdime can read: shown as text
