"""The selector runs its own matrix products under a BLAS thread limit, then restores BLAS."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from langchain_pacms import ContextSelector
from langchain_pacms.blas import blas_setup, blas_threads, set_blas_threads
from langchain_pacms.core import Pick, Problem

if blas_setup() is None:  # pragma: no cover - numpy without a reachable OpenBLAS
    pytest.skip("no OpenBLAS whose threads can be read in this process", allow_module_level=True)


def threads() -> str:
    setup = blas_setup()
    assert setup is not None
    return setup.rsplit("x", 1)[1]


@pytest.fixture
def two_threads():
    before = threads()
    set_blas_threads(2)
    yield
    set_blas_threads(int(before))


def recording(seen: list[str]):
    def strategy(problem: Problem) -> Pick:
        seen.append(threads())
        return Pick(np.arange(problem.n, dtype=np.int64)[:1], np.zeros(problem.n))

    return strategy


def test_the_selector_solves_with_one_blas_thread_and_restores_the_setting(two_threads):
    seen: list[str] = []
    ContextSelector(strategy=recording(seen)).select(["a b", "c d"], "a", budget=5)
    assert seen == ["1"] and threads() == "2"
    ContextSelector(strategy=recording(seen), blas_threads=None).select(
        ["a b", "c d"], "a", budget=5
    )
    assert seen == ["1", "2"]


def test_concurrent_blocks_restore_the_setting_only_when_the_last_one_ends(two_threads):
    first_in, release = threading.Event(), threading.Event()  # overlapping blocks, two threads

    def hold() -> None:
        with blas_threads(1):
            first_in.set()
            release.wait(5)

    worker = threading.Thread(target=hold)
    worker.start()
    assert first_in.wait(5)
    with blas_threads(1):
        release.set()
        worker.join(5)
        assert threads() == "1"  # the other block ended, this one still runs under the limit
    assert threads() == "2"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_a_bad_limit_is_rejected(bad: object):
    with pytest.raises(ValueError, match="blas_threads"):
        ContextSelector(blas_threads=bad)  # type: ignore[arg-type]
