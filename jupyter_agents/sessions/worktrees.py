"""A git worktree per agent: agents side by side in one repository, each on its own branch.

An agent started "in a worktree" works in ``git worktree add -b <branch> <path> <base>``,
made from the folder's repository before the agent runs: its edits never land in the
person's checkout or in another agent's. What it did is reviewed as the branch's commits
ahead of the base and the files changed (committed or not), then finished: merged into
the base (a fast-forward when possible, else a merge commit) or discarded; either way the
worktree and its branch are removed.

Where worktrees go: ``<root>/<repository name>/<branch>``; ``root`` by default is the
folder beside the repository named ``<repository name>.worktrees`` (a worktree inside the
repository would show its files twice in JupyterLab's file browser). The files the
repository's ``.worktreeinclude`` lists (one glob per line, relative to the repository's
top, ``#`` comments: typically ``.env``) are copied in; an optional set-up command from
the server's configuration (never from the repository) runs in the new worktree.

Every git call gets its arguments as a list (nothing passes through a shell) and runs
with ``LC_ALL=C`` and no prompts. Refusals are :class:`~jupyter_agents.core.errors.Conflict`
(409) saying what to do; a refused or failed start leaves nothing behind (the worktree
and branch it made are removed). Blocking: callers run it off the IO loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from jupyter_agents.core.errors import Conflict, InvalidRequest, NotFound

#: what finishing a worktree session does with its branch
Finish = Literal["merge", "discard"]

#: seconds a git command may take (a checkout of a large repository is the long one)
GIT_TIMEOUT = 300.0
#: seconds the configured set-up command may take
SETUP_TIMEOUT = 600.0
#: the file of the repository listing untracked files to copy into each worktree
INCLUDE_FILE = ".worktreeinclude"
#: branch names of worktree sessions start with this
BRANCH_PREFIX = "agents/"
#: changed files a review lists at most (an agent can make any number)
MAX_LISTED = 1000
#: bytes of one version of one file a review reads at most (a bigger one is only sized)
MAX_SHOWN = 4 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Worktree:
    """Where a session works: ``path`` (a worktree of the repository whose top folder is
    ``repo``) on ``branch``, made from ``base`` at ``base_commit``; the session's folder
    is ``folder`` inside it (``""``: its top), as it was inside ``repo``."""

    repo: str
    path: str
    branch: str
    base: str
    base_commit: str
    folder: str = ""
    #: how it ended (``merged <commit>``, ``discarded``), None while it is in use
    ended: str | None = None

    @property
    def cwd(self) -> str:
        """The folder the agent starts in."""
        return str(Path(self.path, self.folder)) if self.folder else self.path

    def to_record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Worktree:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})


@dataclasses.dataclass(frozen=True)
class ChangedFile:
    """One file the branch or its worktree changed: ``status`` is git's letter
    (``A``dded, ``M``odified, ``D``eleted, ``R``enamed, ``?`` untracked); ``committed``
    False for a change not committed yet; ``old_path`` for a rename."""

    path: str
    status: str
    committed: bool
    old_path: str | None = None


@dataclasses.dataclass(frozen=True)
class Review:
    """What a worktree session did: its branch's commits ``ahead`` of its base and the
    base's commits since (``behind``), and every changed file."""

    worktree: Worktree
    ahead: int
    behind: int
    files: list[ChangedFile]

    @property
    def uncommitted(self) -> list[ChangedFile]:
        return [f for f in self.files if not f.committed]

    def to_model(self, limit: int = MAX_LISTED) -> dict[str, Any]:
        """The REST model: the first ``limit`` files, and how many there are."""
        return {
            "branch": self.worktree.branch,
            "base": self.worktree.base,
            "path": self.worktree.path,
            "ahead": self.ahead,
            "behind": self.behind,
            "files": [dataclasses.asdict(f) for f in self.files[:limit]],
            "files_total": len(self.files),
        }


@dataclasses.dataclass(frozen=True)
class Versions:
    """A changed file's ``before`` and ``after`` bytes (None: it did not exist, or is
    over :data:`MAX_SHOWN` bytes: then only its ``*_size`` is known)."""

    file: ChangedFile
    before: bytes | None
    before_size: int | None
    after: bytes | None
    after_size: int | None


def _git_env() -> dict[str, str]:
    """git's environment: English messages, no prompts, no editor."""
    return {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true"}


class Git:
    """``git`` run in one folder, with its arguments as a list, English messages and no
    prompts; :class:`Conflict` with git's own words when it fails (unless ``check``
    is False)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = str(folder)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            proc = _run(["git", "-C", self.folder, *args], None, GIT_TIMEOUT, _git_env())
        except FileNotFoundError:
            raise Conflict("git is not installed on the server: install git first") from None
        except subprocess.TimeoutExpired:
            raise Conflict(
                f"git {args[0]} took over {GIT_TIMEOUT:.0f} s in {self.folder}"
            ) from None
        if check and proc.returncode:
            said = (proc.stderr or proc.stdout).strip().splitlines()
            raise Conflict(f"git {args[0]} failed in {self.folder}: {' '.join(said[-3:])}")
        return proc

    def out(self, *args: str) -> str:
        return self.run(*args).stdout.strip()

    def ok(self, *args: str) -> bool:
        return self.run(*args, check=False).returncode == 0

    def blob(self, spec: str) -> bytes:
        """The bytes of ``git cat-file blob <spec>`` (not decoded)."""
        proc = subprocess.run(
            ["git", "-C", self.folder, "cat-file", "blob", spec],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=GIT_TIMEOUT,
            env=_git_env(),
            check=False,
        )
        if proc.returncode:
            said = proc.stderr.decode(errors="replace").strip()
            raise Conflict(f"git cat-file failed in {self.folder}: {said}")
        return proc.stdout


class Worktrees:
    """Makes, reviews and finishes the worktrees of worktree sessions (see the module's
    docstring). ``root``: where worktrees go (``""``: beside each repository);
    ``setup``: a command run by ``/bin/sh -c`` in each new worktree (``""``: none)."""

    def __init__(self, root: str = "", setup: str = "", log: logging.Logger | None = None) -> None:
        self.root = root
        self.setup = setup
        self.log = log or logging.getLogger("jupyter_agents")

    # -- start ----------------------------------------------------------------------------

    def add(self, folder: str, session_id: str, branch: str | None = None) -> Worktree:
        """A new worktree for session ``session_id`` of the repository ``folder`` is in,
        on a new branch (``branch``, else ``agents/<session id>``) from the branch checked
        out there. :class:`Conflict` (nothing made) for a folder outside a repository, a
        repository with no commit, a detached HEAD, uncommitted changes to tracked files,
        submodules, a branch or a worktree folder that exists; :class:`InvalidRequest`
        for a branch name git refuses."""
        git = Git(folder)
        if not git.ok("rev-parse", "--is-inside-work-tree"):
            raise Conflict(
                f"no git repository: {folder} is not inside one; run `git init` there and "
                "commit, or start the agent without a worktree"
            )
        top = git.out("rev-parse", "--show-toplevel")
        repo = Git(top)
        inside = Path(folder).resolve().relative_to(Path(top).resolve())
        if not repo.ok("rev-parse", "--verify", "--quiet", "HEAD^{commit}"):
            raise Conflict(f"the repository {top} has no commit yet: commit something first")
        base = repo.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
        if not base:
            raise Conflict(
                f"the repository {top} has no branch checked out (a detached HEAD): "
                "check out the branch the agent should start from"
            )
        dirty = repo.out("status", "--porcelain", "--untracked-files=no")
        if dirty:
            count = len(dirty.splitlines())
            raise Conflict(
                f"{top} has uncommitted changes to {count} tracked file"
                f"{'' if count == 1 else 's'}: commit or stash them first (a worktree "
                f"starts from the last commit of {base}, without them)"
            )
        if (Path(top) / ".gitmodules").exists():
            raise Conflict(
                f"the repository {top} has submodules, which a new worktree would not check "
                "out: start the agent without a worktree"
            )
        branch = branch or f"{BRANCH_PREFIX}{session_id}"
        checked = repo.run("check-ref-format", "--branch", branch, check=False)
        if checked.returncode or branch.startswith("-"):
            raise InvalidRequest(f"{branch!r} is not a branch name git accepts")
        if repo.ok("show-ref", "--verify", "--quiet", f"refs/heads/{branch}"):
            raise Conflict(
                f"the branch {branch} already exists in {top}: choose another name, or "
                f"delete it (git branch -D {branch})"
            )
        path = self._place(Path(top), branch)
        if path.exists():
            raise Conflict(f"{path} already exists: remove it or choose another branch name")
        base_commit = repo.out("rev-parse", "HEAD")
        path.parent.mkdir(parents=True, exist_ok=True)
        worktree = Worktree(
            top, str(path), branch, base, base_commit, "" if inside == Path() else str(inside)
        )
        try:
            repo.run("worktree", "add", "--quiet", "-b", branch, str(path), base_commit)
            self._include(Path(top), path)
            self._set_up(path)
            if not Path(worktree.cwd).is_dir():  # an untracked folder: not in the worktree
                Path(worktree.cwd).mkdir(parents=True)
        except BaseException:
            self.remove(worktree, force=True)
            with contextlib.suppress(OSError):  # the folder of worktrees, if it was the only one
                path.parent.rmdir()
            raise
        self.log.info(
            "jupyter_agents: worktree %s on branch %s (from %s at %s) for session %s",
            path,
            branch,
            base,
            base_commit[:12],
            session_id,
        )
        return worktree

    def _place(self, top: Path, branch: str) -> Path:
        """Where the worktree of ``branch`` goes: never inside the repository."""
        root = Path(self.root).expanduser() if self.root else top.parent / f"{top.name}.worktrees"
        path = (root / (top.name if self.root else "") / branch.replace("/", "-")).resolve()
        if path == top.resolve() or top.resolve() in path.parents:
            raise Conflict(
                f"worktrees would go inside the repository ({path}): set "
                "c.AgentsApp.worktree_dir to a folder outside it"
            )
        return path

    def _include(self, top: Path, path: Path) -> None:
        """Copy what ``.worktreeinclude`` lists (files and folders under ``top`` that git
        does not track: a tracked file is in the worktree already) into ``path``."""
        listing = top / INCLUDE_FILE
        if not listing.is_file():
            return
        tracked = set(Git(top).out("ls-files", "-z").split("\0"))
        for line in listing.read_text(errors="replace").splitlines():
            pattern = line.strip()
            if not pattern or pattern.startswith("#"):
                continue
            if PurePosixPath(pattern).is_absolute() or ".." in PurePosixPath(pattern).parts:
                self.log.warning("jupyter_agents: %s: %r ignored (outside)", listing, pattern)
                continue
            for found in sorted(top.glob(pattern)):
                relative = found.relative_to(top)
                if relative.parts[:1] == (".git",) or str(relative) in tracked:
                    continue
                target = path / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if found.is_dir() and not found.is_symlink():
                    shutil.copytree(found, target, symlinks=True, dirs_exist_ok=True)
                else:
                    shutil.copy2(found, target, follow_symlinks=False)

    def _set_up(self, path: Path) -> None:
        if not self.setup:
            return
        try:
            proc = _run(["/bin/sh", "-c", self.setup], path, SETUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise Conflict(f"the worktree set-up command took over {SETUP_TIMEOUT:.0f} s") from None
        if proc.returncode:
            said = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
            raise Conflict(
                f"the worktree set-up command (c.AgentsApp.worktree_setup) exited with "
                f"{proc.returncode}: {said}"
            )

    def revive(self, worktree: Worktree) -> bool:
        """Make ``worktree`` again from its branch when its folder was removed outside
        jupyter_agents (what was committed is on the branch; what was not is gone with
        the folder): True if it was made, False if it is there. :class:`Conflict` when
        its branch is gone too. The branch is never removed here."""
        path = Path(worktree.path)
        if path.is_dir():
            return False
        repo = Git(worktree.repo)
        if not repo.ok("show-ref", "--verify", "--quiet", f"refs/heads/{worktree.branch}"):
            raise Conflict(
                f"its worktree {path} and its branch {worktree.branch} are gone: start a "
                "fresh session instead"
            )
        repo.run("worktree", "prune")
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.run("worktree", "add", "--quiet", str(path), worktree.branch)
        try:
            self._include(Path(worktree.repo), path)
            self._set_up(path)
            Path(worktree.cwd).mkdir(parents=True, exist_ok=True)
        except BaseException:
            repo.run("worktree", "remove", "--force", str(path), check=False)
            raise
        return True

    # -- review ---------------------------------------------------------------------------

    def review(self, worktree: Worktree) -> Review:
        """The branch's commits ahead of its base and behind it, and every file changed:
        committed on the branch since it left the base, or not committed in the worktree
        (untracked ones too). :class:`Conflict` once the worktree is gone."""
        if not Path(worktree.path).is_dir():
            raise Conflict(f"the worktree {worktree.path} is gone (removed outside jupyter_agents)")
        repo = Git(worktree.repo)
        between = f"{worktree.base}...{worktree.branch}"
        behind, ahead = (
            int(n) for n in repo.out("rev-list", "--left-right", "--count", between).split()
        )
        files = _name_status(repo.out("diff", "--name-status", "-z", between), True)
        status = Git(worktree.path).run("status", "--porcelain=v1", "-z", "--untracked-files=all")
        files += _porcelain(status.stdout)
        return Review(worktree, ahead, behind, files)

    def versions(self, worktree: Worktree, path: str) -> Versions:
        """One changed file of :meth:`review` before (at the commit where the branch left
        its base) and now (in the worktree, committed or not): :class:`NotFound` for a
        path the review does not list (nothing else is read: no path leaves the
        repository). A version over :data:`MAX_SHOWN` bytes is only sized; a symbolic
        link is its target's name, never followed."""
        review = self.review(worktree)
        changed = next((f for f in review.files if f.path == path), None)
        if changed is None:
            raise NotFound(f"{path!r} is not a file the worktree of {worktree.branch} changed")
        repo = Git(worktree.repo)
        fork = repo.out("merge-base", worktree.base, worktree.branch)
        before: bytes | None = None
        before_size: int | None = None
        old = changed.old_path or changed.path
        if changed.status not in "A?":
            spec = f"{fork}:{old}"
            listed = repo.run("cat-file", "-s", spec, check=False)
            if listed.returncode == 0:
                before_size = int(listed.stdout)
                if before_size <= MAX_SHOWN:
                    before = repo.blob(spec)
        after: bytes | None = None
        after_size: int | None = None
        file = Path(worktree.path, changed.path)
        if os.path.lexists(file):
            if file.is_symlink():
                after = os.fsencode(os.readlink(file))
                after_size = len(after)
            elif file.is_file():
                after_size = file.stat().st_size
                if after_size <= MAX_SHOWN:
                    with open(file, "rb") as f:
                        after = f.read(MAX_SHOWN + 1)[:MAX_SHOWN]
        return Versions(changed, before, before_size, after, after_size)

    # -- finish ---------------------------------------------------------------------------

    def merge(self, worktree: Worktree, confirm: bool = False) -> str:
        """Merge the branch into its base in the repository's own checkout (a fast-forward
        when possible, else a merge commit), then remove the worktree and the branch;
        the merged commit. :class:`Conflict` (nothing changed) while the worktree has
        uncommitted changes (unless ``confirm``: they are dropped), when the repository
        has another branch checked out or uncommitted changes of its own, or when the
        merge conflicts (which files)."""
        review = self.review(worktree)
        if review.uncommitted and not confirm:
            raise Conflict(
                f"{worktree.path} has {len(review.uncommitted)} uncommitted change(s) "
                f"({', '.join(f.path for f in review.uncommitted[:5])}): commit them in "
                "the worktree first, or confirm to merge only what is committed"
            )
        self.check_merge(worktree)
        repo = Git(worktree.repo)
        merged = repo.run("merge", "--no-edit", worktree.branch, check=False)
        if merged.returncode:
            conflicted = repo.out("diff", "--name-only", "--diff-filter=U").splitlines()
            repo.run("merge", "--abort", check=False)
            if not conflicted:
                said = " ".join((merged.stderr or merged.stdout).strip().splitlines()[-3:])
                raise Conflict(f"git merge of {worktree.branch} failed: {said}")
            raise Conflict(_conflict_message(worktree, conflicted))
        commit = repo.out("rev-parse", "HEAD")
        self.remove(worktree, force=True)
        return commit

    def check_merge(self, worktree: Worktree) -> None:
        """:class:`Conflict` if merging the branch now could not work: the repository has
        another branch checked out or uncommitted changes, or the merge would conflict
        (told by ``git merge-tree``, git 2.38 or later, without touching anything)."""
        repo = Git(worktree.repo)
        current = repo.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False).stdout.strip()
        if current != worktree.base:
            raise Conflict(
                f"{worktree.repo} has {current or 'a detached HEAD'} checked out: check out "
                f"{worktree.base} there to merge {worktree.branch} into it"
            )
        if repo.out("status", "--porcelain", "--untracked-files=no"):
            raise Conflict(
                f"{worktree.repo} has uncommitted changes: commit or stash them, then merge"
            )
        trial = repo.run(
            "merge-tree", "--write-tree", "--name-only", "--no-messages",
            worktree.base, worktree.branch, check=False,
        )  # fmt: skip
        if trial.returncode == 1:  # 0: it merges cleanly; above 1: an older git
            conflicted = trial.stdout.strip().splitlines()[1:]
            raise Conflict(_conflict_message(worktree, conflicted))

    def discard(self, worktree: Worktree, confirm: bool = False) -> None:
        """Remove the worktree and its branch, unmerged. :class:`Conflict` (nothing
        removed) while the worktree has uncommitted changes, unless ``confirm``."""
        if Path(worktree.path).is_dir():
            review = self.review(worktree)
            if review.uncommitted and not confirm:
                raise Conflict(
                    f"{worktree.path} has {len(review.uncommitted)} uncommitted change(s): "
                    "confirm to discard them with the branch"
                )
        self.remove(worktree, force=True)

    def remove(self, worktree: Worktree, force: bool = False) -> None:
        """Remove the worktree (its folder, and git's note of it) and its branch, as far
        as they exist."""
        repo = Git(worktree.repo)
        if Path(worktree.path).exists():
            args = ["worktree", "remove", *(["--force"] if force else []), worktree.path]
            if not repo.ok(*args):
                shutil.rmtree(worktree.path, ignore_errors=True)
        repo.run("worktree", "prune", check=False)
        repo.run("branch", "-D" if force else "-d", worktree.branch, check=False)


def _run(
    argv: list[str], cwd: Path | None, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``argv`` run with its output captured as text, no input, at most ``timeout``."""
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def _conflict_message(worktree: Worktree, files: Sequence[str]) -> str:
    return (
        f"merging {worktree.branch} into {worktree.base} conflicts in "
        f"{', '.join(files) or 'some files'}: nothing was merged. Bring {worktree.base} into "
        f"the worktree (git merge {worktree.base} there), resolve, commit, and merge again"
    )


def _name_status(text: str, committed: bool) -> list[ChangedFile]:
    """``git diff --name-status -z``: status, path (two paths for renames and copies)."""
    fields = text.split("\0")
    files: list[ChangedFile] = []
    i = 0
    while i < len(fields) and fields[i]:
        status = fields[i][0]
        if status in "RC":
            files.append(ChangedFile(fields[i + 2], status, committed, fields[i + 1]))
            i += 3
        else:
            files.append(ChangedFile(fields[i + 1], status, committed))
            i += 2
    return files


def _porcelain(text: str) -> list[ChangedFile]:
    """``git status --porcelain=v1 -z``: ``XY path`` (and the old path after a rename)."""
    fields = text.split("\0")
    files: list[ChangedFile] = []
    i = 0
    while i < len(fields) and fields[i]:
        entry = fields[i]
        xy, path = entry[:2], entry[3:]
        if "R" in xy:
            files.append(ChangedFile(path, "R", False, fields[i + 1]))
            i += 2
            continue
        status = "?" if xy == "??" else next((c for c in xy if c != " "), "M")
        files.append(ChangedFile(path, status, False))
        i += 1
    return files


def worktree_of(record: Mapping[str, Any] | None) -> Worktree | None:
    """The worktree of a session's record field, if it has one."""
    return None if not record else Worktree.from_record(record)
