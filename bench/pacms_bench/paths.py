"""Where the evaluation finds its data: ``../shared/data`` beside the repository checkout.

The repository is the folder that holds ``bench/`` (this package's project folder), found from
this file, so the defaults hold whatever the working directory is, and never point into the
library's installation.

Example:
    >>> shared_data_dir().parts[-2:]
    ('shared', 'data')
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["repo_root", "shared_data_dir"]


def repo_root() -> Path | None:
    """The repository checkout holding ``bench/`` (``None`` for a copy installed elsewhere).

    Example:
        >>> root = repo_root()
        >>> root is None or (root / "bench" / "pyproject.toml").is_file()
        True
    """
    project = Path(__file__).resolve().parents[1]  # bench/, with its pyproject.toml
    return project.parent if (project / "pyproject.toml").is_file() else None


def shared_data_dir() -> Path:
    """``../shared/data`` beside the repository checkout (may not exist).

    A copy installed outside a checkout looks beside the working directory instead.
    """
    root = repo_root()
    return (Path.cwd() if root is None else root).parent / "shared" / "data"
