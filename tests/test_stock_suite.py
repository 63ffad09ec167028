"""jupyter_server_terminals' own test suite (0.5.4, from its sdist) passes with our
extension serving the terminals, on both backends: the stock manager API, culling
and configuration behave as stock's do, in an in-process server too."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from jupyter_agents.pytest_plugin import path_without

VERSION = "0.5.4"
SDIST = f"jupyter_server_terminals-{VERSION}.tar.gz"
#: where .ci/run (or the first run of this test) keeps the sdist
CACHE = Path(
    os.environ.get("JUPYTER_AGENTS_STOCK_CACHE", Path.home() / ".cache" / "jupyter-agents")
)
OVERLAY = Path(__file__).parent / "stock_suite"


def stock_suite(into: Path) -> Path:
    """The sdist's source tree, unpacked into ``into`` (downloaded once, pinned)."""
    archive = CACHE / SDIST
    if not archive.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        subprocess.run([*pip, "-d", str(CACHE), f"jupyter_server_terminals=={VERSION}"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / SDIST.removesuffix(".tar.gz")


@pytest.mark.parametrize("backend", ["tmux", "broker"])
def test_jupyter_server_terminals_suite_passes_with_our_terminals(tmp_path, backend):
    source = stock_suite(tmp_path)
    # a run of its own: not a worker of this run's pytest-xdist (nor its plugins' idea of one)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        "PYTHONPATH": os.pathsep.join([str(OVERLAY), os.environ.get("PYTHONPATH", "")]),
        "JUPYTER_AGENTS_TEST_BACKEND": backend,
    }
    if backend == "broker":  # backend=auto takes the broker where tmux is not found
        env["PATH"] = path_without("tmux", tmp_path / "no-tmux")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "agents_overlay",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-o",
            "addopts=",
            "--timeout=120",
            "tests",
        ],
        cwd=source,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert "18 passed" in done.stdout, tail
