"""A folder of cached cells per namespace: what the recall sweep and the lifecycle replay share.

A namespace hashes what the cells depend on (the code, and for the recall sweep the embedder
and the tokenizer), so cells of another namespace are never read; each namespace has a folder
of its own under ``<root>/<kind>/``, and the other namespaces' folders can be deleted.

Example:
    >>> import tempfile
    >>> cells = CellFolder(tempfile.mkdtemp(), "v2")
    >>> cells.store.mset([("a", b"1")])
    >>> old = CellFolder(cells.root, "v1")
    >>> old.store.mset([("a", b"0")])
    >>> cells.prune_others()[0], cells.store.mget(["a"]), old.folder.exists()
    (1, [b'1'], False)
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["CellFolder"]


@dataclass(frozen=True)
class CellFolder:
    """The cells of one namespace, in a ``LocalByteStore`` at ``<root>/<KIND>/<namespace>``.

    Attributes:
        root: Cache folder.
        namespace: Hash of what the cells depend on.
    """

    KIND: ClassVar[str] = "cells"
    """The folder under ``root`` that holds one folder per namespace."""

    root: str
    namespace: str

    @property
    def folder(self) -> Path:
        """This namespace's folder, ``<root>/<KIND>/<namespace>``."""
        return Path(self.root) / self.KIND / self.namespace

    @functools.cached_property
    def store(self) -> Any:
        """The underlying ``LocalByteStore`` in :attr:`folder` (created on first use)."""
        from langchain_pacms.embeddings.filestore import LocalByteStore

        return LocalByteStore(self.folder)

    def prune_others(self) -> tuple[int, int]:
        """Delete the cells of every other namespace under ``root``.

        Folders of this namespace are kept, and so is anything outside ``<root>/<KIND>``.

        Returns:
            ``(files removed, bytes freed)``, counting the disk blocks the files held where the
            platform reports them.
        """
        base = self.folder.parent
        files = size = 0
        if not base.is_dir():
            return files, size
        for entry in base.iterdir():
            if entry.name == self.namespace or not entry.is_dir():
                continue
            for path in entry.rglob("*"):
                if path.is_file():
                    stat = path.stat()
                    files += 1
                    size += getattr(stat, "st_blocks", 0) * 512 or stat.st_size
            shutil.rmtree(entry)
        return files, size
