"""Run Python in a subprocess the way the tests of scripts, examples and benchmarks need it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_python(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    cwd: Path = REPO,
) -> str:
    """What ``python *args`` prints, run from ``cwd``; fails the test (with its stderr) unless
    it exits 0.

    ``env`` replaces this process's environment; either way the repository comes first on
    ``PYTHONPATH``.
    """
    base = dict(os.environ if env is None else env)
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), base.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=base,
        cwd=cwd,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
