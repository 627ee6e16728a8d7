"""On-disk cache of lifecycle replay cells, so a rerun (or an interrupted run) resumes.

One cell is one session under one policy: its per-cut outcomes, or its whole-session cost at
one threshold. Cells live in ``<root>/lifecycle-cells/<namespace>/`` where the namespace hashes
the code that decides a cell (the lifecycle, the judge, the replay, the trace loader, the
tokenizer and the selection code), so a code change misses instead of returning stale numbers;
:meth:`ReplayCache.prune` deletes the other namespaces. The key of a cell names its session by
a hash of the session's messages and holds every setting the cell depends on.

Example:
    >>> import tempfile
    >>> cache = ReplayCache.create(tempfile.mkdtemp())
    >>> cache.get("cuts/s1/none") is None
    True
    >>> cache.put("cuts/s1/none", {"strict": [True]})
    >>> cache.get("cuts/s1/none")
    {'strict': [True]}
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from pacms_bench.cells import CellFolder

__all__ = ["ReplayCache", "replay_fingerprint", "session_digest"]

# What decides a replay cell besides the selection code: parts of the library (folders or
# modules) and the bench's replay (its run, policies, cuts, cost replay, settings and token
# counts), selection policies, judge, trace loader and this module.
_LIBRARY_CODE = ("lifecycle", "messages", "integrations", "tokens.py")
_REPLAY_CODE = (
    "lifecycle_replay.py",
    "replay_policies.py",
    "replay_cuts.py",
    "replay_cost.py",
    "replay_settings.py",
    "replay_tokens.py",
    "selection_replay.py",
    "dependency_judge.py",
    "traces.py",
    "replay_cache.py",
)


def replay_fingerprint() -> str:
    """Short sha256 over the source of everything that decides a replay cell.

    Covers the library's ``lifecycle/``, ``messages/`` and ``integrations/`` (message mapping
    and per-call selection) and ``tokens.py``, the replay and its selection policies, judge,
    trace loader and this module, and the selection code that
    :func:`~pacms_bench.recall_cache.code_fingerprint` covers.

    Example:
        >>> len(replay_fingerprint()), replay_fingerprint() == replay_fingerprint()
        (16, True)
    """
    from pacms_bench.recall_cache import BENCH_ROOT, LIBRARY_ROOT, code_fingerprint, hash_sources

    digest = hashlib.sha256(code_fingerprint().encode())
    hash_sources(digest, LIBRARY_ROOT, _LIBRARY_CODE)
    hash_sources(digest, BENCH_ROOT, _REPLAY_CODE)
    return digest.hexdigest()[:16]


def session_digest(messages: tuple[BaseMessage, ...]) -> str:
    """Hash of a session's messages (ids, types, contents, tool calls).

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> a = session_digest((HumanMessage("fix it", id="h"),))
        >>> a == session_digest((HumanMessage("fix it", id="h"),)), a == session_digest(
        ...     (HumanMessage("fix that", id="h"),))
        (True, False)
    """
    digest = hashlib.sha256()
    for m in messages:
        calls = json.dumps(getattr(m, "tool_calls", None) or [], sort_keys=True, default=str)
        part = f"{m.id}\0{m.type}\0{json.dumps(m.content, default=str)}\0{calls}\0"
        digest.update(part.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


class ReplayCache(CellFolder):
    """Replay cells in a :class:`~langchain_pacms.embeddings.filestore.LocalByteStore`.

    Attributes:
        root: Cache folder (the recall sweep's ``.pacms-cache`` by default in the CLI).
        namespace: :func:`replay_fingerprint` of the code the cells come from.
    """

    KIND = "lifecycle-cells"

    @classmethod
    def create(cls, root: str | os.PathLike[str]) -> ReplayCache:
        """A cache under ``root`` for the code as it is now."""
        return cls(str(Path(root).expanduser()), replay_fingerprint())

    def get(self, key: str) -> Any:
        """The cell stored under ``key`` (``None`` when absent)."""
        raw = self.store.mget([key])[0]
        return None if raw is None else json.loads(raw)

    def put(self, key: str, value: Mapping[str, Any] | list[Any]) -> None:
        """Store a JSON-ready cell under ``key``."""
        self.store.mset([(key, json.dumps(value).encode())])

    def prune(self) -> int:
        """Delete the cells of every other namespace; returns the files removed."""
        return self.prune_others()[0]
