from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from langchain_core.stores import BaseStore

from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.embeddings.filestore import LocalByteStore

ODD_KEYS = [
    "",
    "plain",
    "with/slashes/../../etc/passwd",
    "pacms-hashed-tfidf-v1:dim=4096|document|abc",
    "ünïcødé ☃ key",
    "x" * 5000,
    ".hidden",
    "nul\x00byte",
]


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_is_a_bytestore(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path / "nested" / "cache")
    assert isinstance(store, BaseStore)
    assert (tmp_path / "nested" / "cache").is_dir()
    assert "cache" in repr(store)


def test_round_trip_missing_and_overwrite(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    store.mset([("a", b"1"), ("b", b""), ("c", bytes(range(256)))])
    assert store.mget(["a", "missing", "b", "c"]) == [b"1", None, b"", bytes(range(256))]
    store.mset([("a", b"two")])
    assert store.mget(["a"]) == [b"two"]
    assert store.mget([]) == []


def test_odd_keys_are_safe(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    store.mset([(k, k.encode("utf-8") + b"!") for k in ODD_KEYS])
    assert store.mget(ODD_KEYS) == [k.encode("utf-8") + b"!" for k in ODD_KEYS]
    files = _files(tmp_path)
    assert len(files) == len(ODD_KEYS)
    for f in files:
        assert f.resolve().is_relative_to(tmp_path.resolve())
        assert len(f.name) == 62 and all(c in "0123456789abcdef" for c in f.name)
        assert len(f.parent.name) == 2
    assert sorted(store.yield_keys()) == sorted(ODD_KEYS)


def test_mdelete_and_yield_keys_with_prefix(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    store.mset([("ns1/a", b"1"), ("ns1/b", b"2"), ("ns2/a", b"3")])
    assert sorted(store.yield_keys(prefix="ns1/")) == ["ns1/a", "ns1/b"]
    assert sorted(store.yield_keys(prefix="zzz")) == []
    store.mdelete(["ns1/a", "never-there"])
    assert store.mget(["ns1/a", "ns1/b"]) == [None, b"2"]
    assert sorted(store.yield_keys()) == ["ns1/b", "ns2/a"]


def test_persists_across_instances(tmp_path: Path) -> None:
    LocalByteStore(tmp_path).mset([("k", b"v")])
    assert LocalByteStore(tmp_path).mget(["k"]) == [b"v"]


def test_writes_recreate_a_root_removed_under_the_store(tmp_path: Path) -> None:
    # A cache prune may delete the folder of a store that another process still writes to.
    store = LocalByteStore(tmp_path / "cells" / "ns")
    store.mset([("a", b"1")])
    shutil.rmtree(tmp_path / "cells")
    assert store.mget(["a"]) == [None]
    store.mset([("b", b"2")])
    assert store.mget(["a", "b"]) == [None, b"2"]


def test_type_errors(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    with pytest.raises(TypeError, match="values must be bytes"):
        store.mset([("k", "text")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="keys must be str"):
        store.mget([b"k"])  # type: ignore[list-item]
    store.mset([("mv", memoryview(b"ok")), ("ba", bytearray(b"ok"))])
    assert store.mget(["mv", "ba"]) == [b"ok", b"ok"]


def test_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path, fsync=True)
    store.mset([(f"k{i}", b"x" * 100) for i in range(20)])
    assert not [f for f in _files(tmp_path) if f.name.startswith(".")]


def test_unreadable_files_read_as_missing(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    store.mset([("k", b"value")])
    (path,) = _files(tmp_path)
    path.write_bytes(b"garbage")
    assert store.mget(["k"]) == [None]
    assert list(store.yield_keys()) == []
    (tmp_path / "stray.txt").write_text("not part of the store")
    (tmp_path / "ab").mkdir(exist_ok=True)
    (tmp_path / "ab" / ".tmpfile.tmp").write_bytes(b"half")
    assert list(store.yield_keys()) == []


def test_concurrent_writers_leave_one_complete_value(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    values = [bytes([i]) * 50_000 for i in range(8)]
    errors: list[BaseException] = []

    def write(v: bytes) -> None:
        try:
            for _ in range(10):
                store.mset([("same", v)])
                got = store.mget(["same"])[0]
                assert got in values
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(v,)) for v in values]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.mget(["same"])[0] in values
    assert len(_files(tmp_path)) == 1


async def test_async_methods_work(tmp_path: Path) -> None:
    store = LocalByteStore(tmp_path)
    await store.amset([("a", b"1")])
    assert await store.amget(["a", "b"]) == [b"1", None]
    assert [k async for k in store.ayield_keys()] == ["a"]
    await store.amdelete(["a"])
    assert await store.amget(["a"]) == [None]


def test_backs_an_embedding_cache(tmp_path: Path) -> None:
    texts = ["the staging database port", "lunch was great", "the staging database port"]
    first = CachedEmbeddings(HashedTfidfEmbeddings(dim=64), store=LocalByteStore(tmp_path))
    a = first.embed_matrix(texts)
    assert (first.hits, first.misses) == (0, 2)
    second = CachedEmbeddings(HashedTfidfEmbeddings(dim=64), store=LocalByteStore(tmp_path))
    b = second.embed_matrix(texts)
    assert (second.hits, second.misses) == (3, 0)
    np.testing.assert_array_equal(a, b)
