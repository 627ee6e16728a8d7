"""Provenance of the recall sweep's cells: code fingerprints, the result cache, the machine."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import langchain_pacms
from langchain_pacms.blas import blas_setup
from pacms_bench.cells import CellFolder
from pacms_bench.longmemeval import Question
from pacms_bench.recall_config import RecallConfig

__all__ = [
    "BENCH_ROOT",
    "LIBRARY_ROOT",
    "ResultCache",
    "code_fingerprint",
    "hash_sources",
    "machine_info",
    "question_digest",
]

# What decides a pick: parts of the library (folders, modules or globs) and the bench's own pool
# builders.
_PICK_CODE = ("core", "embeddings", "_[!_]*.py", "blas.py", "selector", "tokens.py")
_POOL_CODE = ("longmemeval.py", "redundancy.py")
LIBRARY_ROOT = Path(langchain_pacms.__file__).resolve().parent
"""The folder of the installed ``langchain_pacms`` package (whose source the fingerprints read)."""
BENCH_ROOT = Path(__file__).resolve().parent
"""The folder of the ``pacms_bench`` package."""


def hash_sources(digest: Any, root: Path, parts: Iterable[str]) -> None:
    """Feed ``digest`` the path (from ``root``'s parent) and bytes of each file ``parts`` names.

    A part is a folder (its ``*.py`` files, recursively), a file name or a glob under ``root``;
    parts that name nothing are skipped.

    Example:
        >>> a, b = hashlib.sha256(), hashlib.sha256()
        >>> hash_sources(a, BENCH_ROOT, ["redundancy.py"])
        >>> hash_sources(b, BENCH_ROOT, ["redundancy.py", "no-such-file.py"])
        >>> a.hexdigest() == b.hexdigest()
        True
    """
    for part in parts:
        path = root / part
        files = sorted(path.rglob("*.py")) if path.is_dir() else sorted(root.glob(part))
        for f in files:
            if f.is_file():
                name = f.relative_to(root.parent).as_posix()
                digest.update(name.encode() + b"\0" + f.read_bytes())


def code_fingerprint() -> str:
    """Short sha256 over the source of everything that decides a pick.

    Covers the library's ``core/``, ``embeddings/``, ``selector/``, ``tokens.py`` and the helpers
    they run on (``_*.py``: the memo, the step drivers, timeouts; ``blas.py``: BLAS threads), and
    the LongMemEval loader and injection, so two runs with the same fingerprint (and settings)
    select identically, even from an uncommitted tree.

    Example:
        >>> len(code_fingerprint()), code_fingerprint() == code_fingerprint()
        (16, True)
    """
    digest = hashlib.sha256()
    hash_sources(digest, LIBRARY_ROOT, _PICK_CODE)
    hash_sources(digest, BENCH_ROOT, _POOL_CODE)
    return digest.hexdigest()[:16]


# -- result cache ------------------------------------------------------------------------------

_TOKENIZER_PROBES = (
    "a",
    "The staging database listens on port 6543, not 5432.",
    "naïve café, 東京 and 🚀: ok?",
    "def f(x):\n    return x ** 2  # squares\n" * 3,
)
"""Texts whose token counts, with the tokenizer's name, key the result cache's tokenizer."""
_SWEEP_CODE = ("recall.py", "recall_cache.py", "recall_config.py")
"""The sweep's own modules, which compute, shape and key a cell (the report decides none)."""


@dataclass(frozen=True)
class ResultCache(CellFolder):
    """On-disk cache of sweep cells, so reruns and extra columns recompute only what is new.

    One entry per ``(question, R, budget, strategy name + options)`` cell, stored in a
    :class:`~langchain_pacms.embeddings.filestore.LocalByteStore`. Keys include ``namespace``,
    a hash of the selection code (:func:`code_fingerprint` plus the sweep's own modules:
    ``recall.py``, ``recall_config.py`` and this one), the embedder identity and the tokenizer
    (its name and its counts of a few probe texts), and a hash of the question's content, so a
    change to any of them misses instead of returning stale numbers. Column labels are not part
    of the key; the strategy name and the options it runs with, as the selector resolves them,
    are: ``rag:k=4`` and ``rag:k=4,`` share cells, ``rag`` and ``rag:k=4`` do not (strategy
    defaults are not filled in), and ``pacms`` cells carry the embedder's threshold and gain
    floor.

    Cells live in ``<root>/recall-cells/<namespace>/``: cells of another code version,
    embedder or tokenizer are never read, and :meth:`prune` removes them.

    The OpenBLAS kernel and thread count are part of every key too: both change how a matrix
    product splits its sums, so results can differ in the last bits and a near-tie can go the
    other way (measured on the 100-question recap table: 10 of 12,000 rows moved between one
    and two threads on one machine, 6 between two machines with one thread each; all of them
    ``pacms_paper`` filler picks at R = 8). Cells computed another way are kept apart in the
    same namespace.

    Attributes:
        root: Cache folder.
        namespace: Hash of code, embedder and tokenizer (see :meth:`for_selector`).
        blas: The BLAS setup the cells are computed with, as :func:`blas_setup` gives it.
    """

    KIND = "recall-cells"

    blas: str | None = None

    @classmethod
    def for_selector(cls, root: str | os.PathLike[str], selector: Any) -> ResultCache:
        """A cache whose namespace covers the code and ``selector``'s embedder and tokenizer.

        Its :attr:`blas` is the BLAS setup in effect now;
        :func:`~pacms_bench.recall.run_recall` sets the one its sweep runs with.
        """
        from langchain_pacms.embeddings import model_identity

        inner = getattr(selector.embeddings, "embeddings", selector.embeddings)
        counter = selector.token_counter
        parts = [
            code_fingerprint(),
            *(_file_digest(BENCH_ROOT / name) for name in _SWEEP_CODE),
            model_identity(inner),
            getattr(counter, "name", "custom"),
            # A custom counter's name is only its function's: its counts tell counters apart.
            ",".join(str(counter(text)) for text in _TOKENIZER_PROBES),
        ]
        digest = hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:20]
        return cls(str(Path(root).expanduser()), digest, blas_setup())

    def prune(self) -> tuple[int, int]:
        """Delete the cells of every other namespace under ``root``.

        After a change to the selection code, or with another embedder or tokenizer, the old
        cells are never read again; a 100-question table leaves about 12,000 of them. Folders
        of this namespace are kept, and so is anything outside ``recall-cells``. Do not prune
        while another sweep writes to the same root under another namespace: its folder would
        vanish under it (its store recreates it, but the cells written before are gone).

        Returns:
            ``(files removed, bytes freed)``, counting the disk blocks the files held where the
            platform reports them (cells are small, so this is several times their length).

        Example:
            >>> cache = ResultCache.for_selector(".pacms-cache", selector)  # doctest: +SKIP
            >>> cache.prune()                                               # doctest: +SKIP
            (12000, 49152000)
        """
        return self.prune_others()

    def key(
        self,
        qdigest: str,
        config: RecallConfig,
        level: int,
        budget: float,
        name: str,
        options: Mapping[str, Any],
    ) -> str:
        """The key of one cell: strategy ``name`` run with the resolved ``options``."""
        given = json.dumps(dict(options), sort_keys=True, default=str)
        return (
            f"{qdigest}/{config.style}/{config.seed}/{config.budget_base}/"
            f"R{level}/{budget!r}/{name}/{given}/blas={self.blas}"
        )


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def question_digest(question: Question) -> str:
    """Hash of everything about a question that a cell depends on."""
    digest = hashlib.sha256()
    for part in (question.question_id, question.question_type, question.question):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    for r in question.rounds:
        digest.update(
            f"{r.index}\0{r.date}\0{int(r.is_evidence)}\0{r.user}\0{r.assistant}\0".encode(
                "utf-8", "surrogatepass"
            )
        )
    return digest.hexdigest()[:24]


# -- machine -----------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """Where the run happened: OS, CPU, cores, memory, Python, numpy, package version."""
    cpu = platform.processor() or platform.machine()
    mem = None
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/meminfo", encoding="utf-8") as fh,
    ):
        for line in fh:
            if line.startswith("MemTotal"):
                mem = round(int(line.split()[1]) / 1024**2, 1)
                break
    try:
        from langchain_pacms import __version__ as version
    except ImportError:  # pragma: no cover
        version = "unknown"
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gib": mem,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "langchain_pacms": version,
    }
