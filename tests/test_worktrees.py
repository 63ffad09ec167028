"""Agents side by side: a git worktree per agent session (real git, real tmux, a real
server, the fake Claude, which edits a file when told ``/write PATH TEXT``).

Two agents in worktrees of one repository edit the same file and each sees only its
own edit; the first is merged into the base, the second then conflicts and says which
file, and is discarded; every bad request is refused with a 4xx and leaves the
repository's worktrees and branches as they were; after a reboot a worktree session is
restored in its own worktree with its conversation.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_agents.clients.cli import main
from jupyter_agents.core.errors import Conflict
from jupyter_agents.pytest_plugin import poll, power_loss
from jupyter_agents.sessions import filediff
from jupyter_agents.sessions.worktrees import ChangedFile, Versions, Worktrees

IDENTITY = {
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.org",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.org",
}


def git(folder: Path | str, *args: str) -> str:
    env = {**os.environ, **IDENTITY, "LC_ALL": "C"}
    done = subprocess.run(
        ["git", "-C", str(folder), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


def make_repo(path: Path) -> Path:
    """A repository on ``main`` with one commit: ``shared.txt``, ``sub/notes.txt``, an
    ignored ``.env`` that ``.worktreeinclude`` lists."""
    (path / "sub").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "shared.txt").write_text("base\n")
    (path / "sub" / "notes.txt").write_text("notes\n")
    (path / ".gitignore").write_text(".env\n")
    (path / ".env").write_text("SECRET=1\n")
    (path / ".worktreeinclude").write_text("# copied into each worktree\n.env\n../outside\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    return path


def layout(repo: Path) -> tuple[str, str]:
    """What must not change when a request is refused: git's worktrees and branches."""
    return git(repo, "worktree", "list", "--porcelain"), git(repo, "branch", "--list")


def typed(server: Any, name: str, line: str, expect: str) -> None:
    server.type_line(name, line, expect)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    # a space and a non-ASCII letter: every git call gets its path as one argument
    return make_repo(tmp_path / "the repo é")


@pytest.fixture
def server(agents_server: Any, fake_agents: Any) -> Any:
    return agents_server(env={**fake_agents.env, **IDENTITY})


@pytest.fixture
def here(fake_agents: Any, agents_state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a person's shell or kernel: the fake agents on PATH, a git
    identity, the state dir."""
    for key, value in {**fake_agents.env, **IDENTITY}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("JUPYTER_AGENTS_STATE_DIR", str(agents_state_dir))


def test_two_agents_in_worktrees_of_one_repository(
    server: Any, fake_agents: Any, repo: Path
) -> None:
    a, b = (server.new("claude", repo / "sub", worktree=True) for _ in range(2))
    trees = {}
    for model in (a, b):
        tree = model["worktree"]
        assert tree["branch"] == f"agents/{model['id']}"
        assert tree["base"] == "main" and tree["folder"] == "sub" and tree["ended"] is None
        path = Path(tree["path"])
        assert path.parent == repo.parent / "the repo é.worktrees"  # beside, never inside
        assert model["cwd"] == str(path / "sub")
        assert (path / ".env").read_text() == "SECRET=1\n"  # .worktreeinclude
        assert not (path.parent / "outside").exists()
        trees[model["id"]] = path
    started = poll(lambda: len(fake_agents.records("start")) == 2 and fake_agents.records("start"))
    assert {r["cwd"] for r in started} == {a["cwd"], b["cwd"]}
    assert len(git(repo, "worktree", "list").splitlines()) == 3

    # both edit the same file; each sees only its own edit, the base neither
    typed(server, a["name"], "/write ../shared.txt from-a", "wrote ../shared.txt")
    typed(server, b["name"], "/write ../shared.txt from-b", "wrote ../shared.txt")
    assert (trees[a["id"]] / "shared.txt").read_text() == "from-a\n"
    assert (trees[b["id"]] / "shared.txt").read_text() == "from-b\n"
    assert (repo / "shared.txt").read_text() == "base\n"

    status, review = server.request("GET", f"/api/agents/sessions/{a['id']}/worktree")
    assert status == 200, review
    assert (review["ahead"], review["behind"], review["files_total"]) == (0, 0, 1)
    assert review["files"] == [
        {"path": "shared.txt", "status": "M", "committed": False, "old_path": None}
    ]
    for model in (a, b):
        git(trees[model["id"]], "commit", "-q", "-am", f"edit of {model['id']}")
    status, review = server.request("GET", f"/api/agents/sessions/{a['id']}/worktree")
    assert (review["ahead"], review["behind"]) == (1, 0)
    assert review["files"] == [
        {"path": "shared.txt", "status": "M", "committed": True, "old_path": None}
    ]

    # finishing: not while the agent runs, unless confirmed
    finish = f"/api/agents/sessions/{a['id']}/worktree"
    status, body = server.request("POST", finish, {"action": "merge"})
    assert status == 409 and "still running" in body["message"], body
    assert server.model(a["id"])["status"] == "running"
    status, body = server.request("POST", finish, {"action": "merge", "confirm": True})
    assert status == 200, body
    assert body["status"] == "killed"
    assert body["worktree"]["ended"].startswith("merged into main at ")
    assert (repo / "shared.txt").read_text() == "from-a\n"
    assert not trees[a["id"]].exists()
    assert f"agents/{a['id']}" not in git(repo, "branch", "--list")

    # the other now conflicts: nothing changes, it keeps running, the file is named
    finish = f"/api/agents/sessions/{b['id']}/worktree"
    before = layout(repo)
    status, body = server.request("POST", finish, {"action": "merge", "confirm": True})
    assert status == 409, body
    assert "conflicts in shared.txt" in body["message"] and "nothing was merged" in body["message"]
    assert server.model(b["id"])["status"] == "running"
    assert layout(repo) == before and (repo / "shared.txt").read_text() == "from-a\n"
    assert git(repo, "status", "--porcelain") == ""

    status, body = server.request("POST", finish, {"action": "discard", "confirm": True})
    assert status == 200, body
    assert body["worktree"]["ended"] == "discarded"
    assert not trees[b["id"]].exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert git(repo, "branch", "--list").split() == ["*", "main"]
    status, body = server.request("POST", finish, {"action": "discard"})
    assert status == 409 and "is finished: discarded" in body["message"], body


def test_bad_requests_are_refused_and_leave_nothing(
    server: Any, fake_agents: Any, repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "plain folder"
    outside.mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    with_modules = make_repo(tmp_path / "modules")
    (with_modules / ".gitmodules").write_text('[submodule "x"]\n\tpath = x\n\turl = ../x\n')
    git(with_modules, "add", ".gitmodules")
    git(with_modules, "commit", "-q", "-m", "modules")
    git(repo, "branch", "taken")

    def refused(cwd: Path, worktree: object, status: int, words: str) -> None:
        before = layout(repo)
        fields = {"kind": "claude", "cwd": str(cwd), "worktree": worktree}
        got, body = server.request("POST", "/api/agents/sessions", fields)
        assert (got, words in body.get("message", "")) == (status, True), (fields, body)
        assert layout(repo) == before
        assert not (repo.parent / "the repo é.worktrees").exists()

    refused(outside, True, 409, f"no git repository: {outside} is not inside one")
    refused(empty, True, 409, "has no commit yet")
    refused(with_modules, True, 409, "has submodules")
    refused(repo, "taken", 409, "the branch taken already exists")
    refused(repo, "bad..name", 400, "is not a branch name git accepts")
    refused(repo, "-x", 400, "is not a branch name git accepts")
    refused(repo, 5, 400, "worktree must be true or false or a string")
    refused(repo / "missing", True, 400, "")
    (repo / "shared.txt").write_text("a person's unsaved work\n")
    refused(repo, True, 409, "has uncommitted changes to 1 tracked file")
    git(repo, "checkout", "-q", "--", "shared.txt")
    git(repo, "checkout", "-q", "--detach")
    refused(repo, True, 409, "a detached HEAD")
    git(repo, "checkout", "-q", "main")
    assert server.request("GET", "/api/agents/sessions")[1] == []
    assert fake_agents.records("start") == []

    # finishing what has no worktree, or with an action that is neither
    shell = server.new("shell", repo)
    path = f"/api/agents/sessions/{shell['id']}/worktree"
    status, body = server.request("POST", path, {"action": "merge"})
    assert status == 409 and "was not started in a worktree" in body["message"], body
    status, body = server.request("GET", path)
    assert status == 409, body
    agent = server.new("claude", repo, worktree=True)
    path = f"/api/agents/sessions/{agent['id']}/worktree"
    for body in ({"action": "rebase"}, {"action": "merge", "confirm": "yes"}, {"how": 1}):
        status, said = server.request("POST", path, body)
        assert status == 400, (body, said)
    assert Path(agent["worktree"]["path"]).is_dir()


def test_a_worktree_session_is_restored_in_its_worktree_after_a_reboot(
    agents_server: Any, agents_state_dir: Path, fake_agents: Any, repo: Path
) -> None:
    """A reboot: restored in the same worktree and folder, with its conversation; after
    a second one with the worktree's folder removed by hand, the worktree is made again
    from its branch (what was committed is there) and the agent resumes in it."""
    server = agents_server(env={**fake_agents.env, **IDENTITY})
    agent = server.new("claude", repo / "sub", worktree=True)
    tree = Path(agent["worktree"]["path"])
    typed(server, agent["name"], "remember-the-walrus", "claude heard: remember-the-walrus")
    typed(server, agent["name"], "/write kept.txt committed-work", "wrote kept.txt")
    git(tree, "add", "sub/kept.txt")
    git(tree, "commit", "-q", "-m", "the agent's work")
    conversation = poll(lambda: server.model(agent["id"])["conversation_id"])
    for removed_by_hand in (False, True):
        power_loss(server)
        if removed_by_hand:
            shutil.rmtree(tree)
        server = agents_server(env={**fake_agents.env, **IDENTITY})
        model = server.model(agent["id"])
        assert model["status"] == "interrupted"
        lost = f"its worktree {tree} was removed outside jupyter_agents; a restore makes it"
        assert (lost in (model["reason"] or "")) == removed_by_hand, model["reason"]
        status, body = server.request("POST", f"/api/agents/sessions/{agent['id']}/restore")
        assert status == 200 and body["status"] == "running", body
        resumed = fake_agents.records("start")[-1]
        assert resumed["cwd"] == agent["cwd"] == str(tree / "sub")
        assert resumed["argv"][resumed["argv"].index("--resume") + 1] == conversation
        assert body["worktree"] == agent["worktree"]
        assert (tree / "sub" / "kept.txt").read_text() == "committed-work\n"
        assert (tree / ".env").read_text() == "SECRET=1\n"
        assert git(tree, "branch", "--show-current").strip() == agent["worktree"]["branch"]
    log = server.log_path.read_text()
    assert "its worktree was removed outside jupyter_agents; made again from its branch" in log


def test_the_magic_starts_reviews_and_finishes_a_worktree_session(
    here: None, repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(repo)
    shell: Any = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jupyter_agents")
        session = shell.run_line_magic("agent", "new claude --worktree").sessions[0]
        tree = Path(session.worktree["path"])
        assert session.cwd == str(tree)
        (tree / "shared.txt").write_text("changed\n")
        capsys.readouterr()
        shell.run_line_magic("agent", f"diff {session.id}")
        assert "  M shared.txt  (not committed)" in capsys.readouterr().out
        with pytest.raises(UsageError, match="still running"):
            shell.run_line_magic("agent", f"finish {session.id} --discard")
        shell.run_line_magic("agent", f"finish {session.id} --discard --yes")
        assert capsys.readouterr().out.strip() == f"{session.id}: worktree discarded"
        assert not tree.exists()
    finally:
        InteractiveShell.clear_instance()


def test_the_cli_starts_reviews_and_finishes_a_worktree_session(
    here: None,
    agents_state_dir: Path,
    repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # show's lines in full, as in a pipe
    state = ["--state-dir", str(agents_state_dir)]
    assert main(["new", "claude", "--cwd", str(repo), "--branch", "try-it", *state]) == 0
    sid = capsys.readouterr().out.strip()
    tree = repo.parent / "the repo é.worktrees" / "try-it"
    assert main(["show", sid, *state]) == 0
    assert f"worktree: {tree} on branch try-it from main\n" in capsys.readouterr().out
    (tree / "new file.txt").write_text("hello\n")
    assert main(["diff", sid, *state]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"try-it: 0 commits ahead of main, 0 behind; worktree {tree}"
    assert "  ? new file.txt  (not committed)" in out
    assert main(["finish", sid, "--discard", *state]) == 4  # it still runs
    assert "still running" in capsys.readouterr().err
    assert main(["finish", sid, "--discard", "--yes", *state]) == 0
    assert capsys.readouterr().out.strip() == f"{sid}: worktree discarded"
    assert not tree.exists()
    assert main(["show", sid, *state]) == 0
    assert f"worktree: {tree} on branch try-it from main; discarded" in capsys.readouterr().out


def test_set_up_command_and_include_file(repo: Path, tmp_path: Path) -> None:
    """The configured set-up command runs in the new worktree; one that fails removes
    the worktree and its branch and says why; ``.worktreeinclude`` copies only what git
    does not track, never from outside the repository."""
    (tmp_path / "outside").write_text("not ours\n")
    root = tmp_path / "trees"
    made = Worktrees(str(root), "echo set-up ran > ready.txt").add(str(repo), "s1")
    assert Path(made.path) == root / "the repo é" / "agents-s1"
    assert (Path(made.path) / "ready.txt").read_text() == "set-up ran\n"
    assert (Path(made.path) / ".env").read_text() == "SECRET=1\n"
    assert not (Path(made.path).parent / "outside").exists()
    for n in range(3):
        (Path(made.path) / f"new-{n}.txt").write_text("x\n")
    listed = Worktrees().review(made).to_model(limit=2)  # ready.txt and three more
    assert (len(listed["files"]), listed["files_total"]) == (2, 4)
    before = layout(repo)
    with pytest.raises(Conflict, match="exited with 3: no network"):
        Worktrees(str(root), "echo no network >&2; exit 3").add(str(repo), "s2")
    assert layout(repo) == before
    assert sorted(p.name for p in (root / "the repo é").iterdir()) == ["agents-s1"]
    with pytest.raises(Conflict, match="exited with 4"):  # the first worktree of a root
        Worktrees(str(tmp_path / "other"), "exit 4").add(str(repo), "s4")
    assert list((tmp_path / "other").iterdir()) == []  # its repository's folder went too
    with pytest.raises(Conflict, match="inside the repository"):
        Worktrees(str(repo / "trees")).add(str(repo), "s3")
    assert layout(repo) == before


def test_the_review_shows_each_changed_file_before_and_now(server: Any, repo: Path) -> None:
    """A notebook as nbdime's diff (its changed cell source and output), a text file as
    its two texts, an image as its two pictures, a binary file by size; a path the
    review does not list is a 404 and nothing outside it is read."""
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "c1",
                "metadata": {},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["1\n"]}],
                "source": ["print(1)"],
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (repo / "analysis.ipynb").write_text(json.dumps(nb))
    (repo / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\nbefore")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a notebook and a picture")
    agent = server.new("claude", repo, worktree=True)
    tree = Path(agent["worktree"]["path"])
    cell = nb["cells"][0]
    cell["source"], cell["outputs"][0]["text"] = ["print(2)"], ["2\n"]
    (tree / "analysis.ipynb").write_text(json.dumps(nb))
    (tree / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\nafter")
    (tree / "shared.txt").write_text("base\nmore\n")
    (tree / "blob.bin").write_bytes(b"\0\1\2")
    git(tree, "add", "analysis.ipynb")
    git(tree, "commit", "-q", "-m", "print 2")

    def file(path: str) -> dict[str, Any]:
        status, body = server.request("GET", f"{url}?path={urllib.parse.quote(path)}")
        assert status == 200, body
        return body

    url = f"/api/agents/sessions/{agent['id']}/worktree/file"
    notebook = file("analysis.ipynb")
    assert (notebook["kind"], notebook["status"], notebook["committed"]) == (
        "notebook",
        "M",
        True,
    )
    assert notebook["base"]["cells"][0]["source"] == "print(1)"
    (cells,) = notebook["diff"]  # nbdime's: cell 0's source and output changed, no more
    assert (cells["key"], [d["key"] for d in cells["diff"]]) == ("cells", [0])
    changed = {d["key"] for d in cells["diff"][0]["diff"]}
    assert changed == {"source", "outputs"}, cells
    text = file("shared.txt")
    assert (text["kind"], text["before"], text["after"]) == ("text", "base\n", "base\nmore\n")
    image = file("plot.png")
    assert (image["kind"], image["mime"]) == ("image", "image/png")
    assert base64.b64decode(image["after"]).endswith(b"after")
    assert base64.b64decode(image["before"]).endswith(b"before")
    binary = file("blob.bin")
    assert (binary["kind"], binary["status"], binary["before_size"], binary["after_size"]) == (
        "binary",
        "?",
        None,
        3,
    )
    for path in ("../the repo é/.env", "sub/notes.txt", "/etc/passwd"):
        status, body = server.request("GET", f"{url}?path={urllib.parse.quote(path)}")
        assert status == 404 and "is not a file the worktree" in body["message"], body
    status, body = server.request("GET", url)
    assert status == 400 and "say which file" in body["message"], body


def test_a_fresh_start_goes_on_in_the_same_worktree(server: Any, repo: Path) -> None:
    """ "Start fresh here" after a worktree session ended: the new session works in the
    same worktree and folder and owns it (reviews, finishes it); the old one says it was
    handed on, and its review is refused."""
    agent = server.new("claude", repo / "sub", worktree=True)
    tree = Path(agent["worktree"]["path"])
    typed(server, agent["name"], "/write mine.txt before-the-end", "wrote mine.txt")
    client = server.ws(agent["name"])
    try:
        client.wait_for(lambda c: len(c.messages) >= 2)
        client.stdin("/exit\r")
        poll(lambda: server.model(agent["id"])["status"] == "exited", what="the agent to exit")
    finally:
        client.close()
    status, fresh = server.request("POST", f"/api/agents/sessions/{agent['id']}/fresh")
    assert status == 201, fresh
    assert fresh["cwd"] == agent["cwd"] == str(tree / "sub")
    assert fresh["worktree"] == agent["worktree"]
    old = server.model(agent["id"])["worktree"]
    assert old["ended"] == f"handed on to session {fresh['id']}", old
    status, body = server.request("GET", f"/api/agents/sessions/{agent['id']}/worktree")
    assert status == 409 and "handed on to session" in body["message"], body
    status, review = server.request("GET", f"/api/agents/sessions/{fresh['id']}/worktree")
    assert status == 200 and [f["path"] for f in review["files"]] == ["sub/mine.txt"], review
    body = {"action": "discard", "confirm": True}
    status, done = server.request("POST", f"/api/agents/sessions/{fresh['id']}/worktree", body)
    assert status == 200 and done["worktree"]["ended"] == "discarded", done
    assert not tree.exists()


def test_a_notebook_diff_nbdime_cannot_finish_in_time_is_shown_as_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nbdime's diff is quadratic in the cells it cannot pair by id (two 72 KB notebooks
    of 100 cells, every id and line new: 16 s of CPU, where the same cells under the same
    ids take 0.4 s): past its CPU limit the child is killed and the file is shown as
    text, saying why; a small change is still a notebook diff."""
    monkeypatch.setattr(filediff, "NOTEBOOK_DIFF_SECONDS", 1)
    rng = random.Random(7)

    def notebook(cells: int, seed: int) -> bytes:
        rng.seed(seed)
        lines = lambda: [f"x = {rng.random()}\n" for _ in range(10)]  # noqa: E731
        return json.dumps(
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "execution_count": 1,
                        "id": f"c{seed}-{i}",
                        "metadata": {},
                        "outputs": [{"name": "stdout", "output_type": "stream", "text": lines()}],
                        "source": lines(),
                    }
                    for i in range(cells)
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        ).encode()

    def shown(before: bytes, after: bytes) -> dict[str, Any]:
        changed = ChangedFile("big.ipynb", "M", True)
        return filediff.file_diff(Versions(changed, before, len(before), after, len(after)))

    costly = shown(notebook(100, 1), notebook(100, 2))
    assert costly["kind"] == "text", costly["kind"]
    assert costly["note"] == "nbdime needed over 1 s to compare these notebooks: shown as text"
    assert costly["after"] == notebook(100, 2).decode()
    cheap = shown(notebook(3, 1), notebook(3, 1).replace(b"x = ", b"y = ", 1))
    assert cheap["kind"] == "notebook" and "note" not in cheap, cheap.get("note")
