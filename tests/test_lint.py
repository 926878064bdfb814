"""The code passes its linters: ruff (style, imports, bug patterns) and mypy --strict (types of the packages;
the exceptions for engines and torch are listed in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    done = run("ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_finds_nothing_in_the_packages() -> None:
    done = run("mypy", "--strict", "src")
    assert done.returncode == 0, done.stdout + done.stderr
