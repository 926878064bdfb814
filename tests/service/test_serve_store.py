"""`remat serve` with a job store it cannot use stops at once with one line that says what is wrong and what to do."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from processes import free_port

from remat.service import SqliteStore


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A current store file that cannot be written, even by root (made immutable with chattr then)."""
    path = tmp_path / "data" / "jobs.sqlite3"
    SqliteStore(path).close()
    as_root = os.geteuid() == 0
    if as_root:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode != 0:
            pytest.skip("as root, a read-only file needs chattr +i, which this file system does not take")
    else:
        path.chmod(stat.S_IRUSR | stat.S_IRGRP)
    try:
        yield path
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        else:
            path.chmod(stat.S_IRUSR | stat.S_IWUSR)


@pytest.fixture
def corrupt(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "jobs.sqlite3"
    path.parent.mkdir()
    path.write_bytes(b"this is not a database " * 200)
    return path


@pytest.mark.parametrize("store", ["corrupt", "read_only"])
def test_an_unusable_store_stops_serve_with_one_line_saying_what_to_do(store: str, request: pytest.FixtureRequest):
    path: Path = request.getfixturevalue(store)
    done = subprocess.run([sys.executable, "-m", "remat.clients.cli", "serve", "--port", str(free_port())],
                          env={**os.environ, "REMAT_DATA_DIR": str(path.parent)}, capture_output=True, text=True,
                          timeout=60)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stdout + done.stderr
    line = lines[0]
    assert line.startswith("remat: error: The job store") and str(path) in line, line
    assert "move it aside" in line and "writable" in line and "REMAT_DATA_DIR" in line
