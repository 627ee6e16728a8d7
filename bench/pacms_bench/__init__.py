"""pacms-bench: the evaluation of langchain-pacms (LongMemEval recall and QA, lifecycle replay).

It lives beside the wheel, in the repository, and uses the library through its public names.
The ``pacms-bench`` command (:mod:`pacms_bench.cli`) runs the harnesses.

Example:
    >>> from pacms_bench.redundancy import STYLES
    >>> STYLES
    ('recap', 'full')
"""

from importlib import metadata

try:
    __version__ = metadata.version("pacms-bench")
except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
