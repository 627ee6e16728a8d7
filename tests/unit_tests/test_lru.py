"""The shared bounded memo: its caps, its byte count, its use order, copies and threads."""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_pacms._lru import LruMemo
from langchain_pacms.lifecycle.variants import FoldMemo


def _length(key: str, value: int) -> int:
    return len(key) + value


OPS = st.lists(
    st.tuples(st.sampled_from(["get", "put"]), st.sampled_from("abcdefgh"), st.integers(0, 9)),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, max_entries=st.one_of(st.none(), st.integers(0, 5)), max_bytes=st.integers(0, 30))
def test_the_memo_acts_like_a_reference_lru(
    ops: list[tuple[str, str, int]], max_entries: int | None, max_bytes: int
) -> None:
    memo: LruMemo[str, int] = LruMemo(max_entries, max_bytes=max_bytes, weigh=_length)
    model: OrderedDict[str, int] = OrderedDict()
    for op, key, value in ops:
        if op == "get":
            assert memo.get(key) == model.get(key)
            if key in model:
                model.move_to_end(key)
            continue
        memo.put(key, value)
        model[key] = value
        model.move_to_end(key)
        while model and (
            len(model) > (max_entries if max_entries is not None else len(model))
            or sum(_length(k, v) for k, v in model.items()) > max_bytes
        ):
            model.popitem(last=False)
        assert memo.items() == list(model.items())
        assert memo.nbytes == sum(_length(k, v) for k, v in model.items()) <= max_bytes


def test_get_many_touches_what_it_finds_and_answers_none_for_the_rest() -> None:
    memo: LruMemo[str, int] = LruMemo(2)
    memo.put_many([("a", 1), ("b", 2)])
    assert memo.get_many(["a", "z"]) == [1, None]
    memo.put("c", 3)  # "a" was used after "b": "b" goes
    assert "b" not in memo and memo.items() == [("a", 1), ("c", 3)]


def test_a_default_marks_a_miss_when_none_is_a_value() -> None:
    memo: LruMemo[str, None] = LruMemo(4)
    missing = object()
    memo.put("a", None)
    assert memo.get("a", missing) is None and memo.get("b", missing) is missing


def test_copies_and_pickles_keep_the_caps_and_the_class_and_start_empty() -> None:
    memo: LruMemo[str, int] = LruMemo(3, max_bytes=40, weigh=_length)
    memo.put("a", 1)
    fold = FoldMemo(7)
    for twin in (copy.copy(memo), copy.deepcopy(memo), pickle.loads(pickle.dumps(memo))):
        assert (twin.max_entries, twin.max_bytes, twin.weigh) == (3, 40, _length)
        assert len(twin) == 0 and twin.nbytes == 0
    twin_fold = pickle.loads(pickle.dumps(fold))
    assert type(twin_fold) is FoldMemo and twin_fold.max_entries == 7


def test_clear_forgets_entries_and_bytes() -> None:
    memo: LruMemo[str, int] = LruMemo(max_bytes=100, weigh=_length)
    memo.put_many([("a", 1), ("bb", 2)])
    memo.clear()
    assert len(memo) == 0 and memo.nbytes == 0 and memo.get("a") is None


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_caps_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        LruMemo(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes"):
        LruMemo(max_bytes=bad)  # type: ignore[arg-type]


def test_threads_sharing_a_memo_keep_its_byte_count_exact() -> None:
    memo: LruMemo[str, int] = LruMemo(50, max_bytes=400, weigh=_length)

    def work(seed: int) -> None:
        for i in range(2_000):
            key = f"k{(seed * 7919 + i) % 97}"
            if memo.get(key) is None:
                memo.put(key, i % 5)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(8)))
    held = memo.items()
    assert len(held) <= 50 and memo.nbytes == sum(_length(k, v) for k, v in held) <= 400
