"""Run the ``pacms`` command in a subprocess, as a user would."""

from __future__ import annotations

import subprocess
import sys


def run_pacms(*argv: str) -> subprocess.CompletedProcess[str]:
    """``pacms ARGV...`` run by this interpreter; its exit code and output, never a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "langchain_pacms.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr
    return done
