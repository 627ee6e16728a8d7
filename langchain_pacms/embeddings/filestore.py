"""A LangChain ``ByteStore`` on the local filesystem, for embedding caches that outlive a run."""

from __future__ import annotations

import hashlib
import os
import struct
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from langchain_core.stores import ByteStore

__all__ = ["LocalByteStore"]

_MAGIC = b"PBS1"
_HEADER = struct.Struct(">4sI")  # magic, key length in bytes
_TMP_SUFFIX = ".tmp"


class LocalByteStore(ByteStore):
    """Bytes values on disk, one atomically written file per key; ``fsync`` survives power loss."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.root = Path(root).expanduser()
        self.root.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"LocalByteStore({str(self.root)!r})"

    @staticmethod
    def _encode_key(key: str) -> bytes:
        if not isinstance(key, str):
            raise TypeError(f"keys must be str, got {type(key).__name__}")
        return key.encode("utf-8", "surrogatepass")

    def _path(self, raw_key: bytes) -> Path:
        digest = hashlib.sha256(raw_key).hexdigest()
        return self.root / digest[:2] / digest[2:]

    @staticmethod
    def _read_key(fh: BinaryIO) -> bytes | None:
        header = fh.read(_HEADER.size)
        if len(header) != _HEADER.size:
            return None
        magic, size = _HEADER.unpack(header)
        if magic != _MAGIC:
            return None
        raw = fh.read(size)
        return raw if len(raw) == size else None

    def _read(self, raw_key: bytes) -> bytes | None:
        try:
            with open(self._path(raw_key), "rb") as fh:
                if self._read_key(fh) != raw_key:
                    return None
                return fh.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def _write(self, raw_key: bytes, value: bytes) -> None:
        path = self._path(raw_key)
        path.parent.mkdir(parents=True, exist_ok=True)  # the root may have been pruned
        tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}{_TMP_SUFFIX}"
        try:
            with open(tmp, "wb") as fh:
                fh.write(_HEADER.pack(_MAGIC, len(raw_key)))
                fh.write(raw_key)
                fh.write(value)
                if self.fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values of ``keys`` (``None`` for a missing key), in order."""
        return [self._read(self._encode_key(k)) for k in keys]

    def mset(self, key_value_pairs: Sequence[tuple[str, bytes]]) -> None:
        """Store values (each file is replaced atomically)."""
        for key, value in key_value_pairs:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise TypeError(f"values must be bytes, got {type(value).__name__}")
            self._write(self._encode_key(key), bytes(value))

    def mdelete(self, keys: Sequence[str]) -> None:
        """Delete keys; missing keys are ignored."""
        for key in keys:
            self._path(self._encode_key(key)).unlink(missing_ok=True)

    def yield_keys(self, *, prefix: str | None = None) -> Iterator[str]:
        """Yield every stored key (or those starting with ``prefix``), in no set order."""
        if not self.root.is_dir():
            return
        for sub in sorted(self.root.iterdir()):
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            for path in sorted(sub.iterdir()):
                if path.name.startswith(".") or not path.is_file():
                    continue
                try:
                    with open(path, "rb") as fh:
                        raw = self._read_key(fh)
                except OSError:
                    continue
                if raw is None:
                    continue
                key = raw.decode("utf-8", "surrogatepass")
                if prefix is None or key.startswith(prefix):
                    yield key
