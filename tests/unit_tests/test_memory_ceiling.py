"""The selector's caches stay under its memory ceiling."""

from __future__ import annotations

import sys

import pytest

from langchain_pacms import ContextSelector, TokenCounter
from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.embeddings.cache import ENTRY_OVERHEAD_BYTES
from langchain_pacms.embeddings.lexical import SPARSE_ROWS_BYTES
from langchain_pacms.selector import DEFAULT_MEMORY_CEILING, EMBEDDING_SHARE, SPARSE_ROWS_SHARE
from langchain_pacms.tokens import MEMO_OVERHEAD_BYTES


def test_a_one_mib_ceiling_bounds_the_vectors_and_the_token_memo():
    ceiling = 2**20
    selector = ContextSelector(memory_ceiling_bytes=ceiling)
    texts = [f"note {i}: the build {i * 7} failed on step {i % 13}" for i in range(400)]
    for start in range(0, len(texts), 50):
        selector.select(texts[start : start + 50], "which build failed?", budget=100)
    dim = 4096
    most = int(ceiling * EMBEDDING_SHARE) // (4 * dim + ENTRY_OVERHEAD_BYTES)
    assert most == 46
    assert selector.embeddings.capacity(dim) == most
    held = len(selector.embeddings._memory)
    assert 0 < held <= most
    assert selector.embeddings.nbytes <= ceiling * EMBEDDING_SHARE
    # The most recently embedded texts are the ones kept.
    assert selector.embeddings.embed_matrix(texts[-10:]).shape == (10, dim)
    assert selector.embeddings.misses == 400 + 8  # 400 texts, 8 queries; the last 10 were hits
    memo = selector.token_counter
    assert memo.nbytes <= ceiling - int(ceiling * EMBEDDING_SHARE)
    assert len(memo) == 400  # all fit: each is about 100 bytes + overhead
    assert memo.nbytes == sum(sys.getsizeof(t) + MEMO_OVERHEAD_BYTES for t in texts)


def test_the_default_ceiling_is_well_under_a_gigabyte():
    selector = ContextSelector()
    assert selector.memory_ceiling_bytes == DEFAULT_MEMORY_CEILING == 256 * 2**20
    assert selector.embeddings.max_bytes == 192 * 2**20
    assert selector.embeddings.capacity(4096) == 11_995
    # the built-in embedder's sparse rows take an eighth, out of the token memo's quarter
    assert selector.embeddings.embeddings._rows.max_bytes == 32 * 2**20
    assert selector.token_counter.max_bytes == 32 * 2**20


def test_token_memo_forgets_the_oldest_texts_beyond_its_bytes():
    counter = TokenCounter(len, max_bytes=10 * (sys.getsizeof("x" * 50) + MEMO_OVERHEAD_BYTES))
    for i in range(30):
        counter(f"{i:02d}" + "x" * 48)
    assert len(counter) == 10 and "29" + "x" * 48 in counter._memo
    assert "00" + "x" * 48 not in counter._memo


def test_cache_bytes_stay_exact_when_a_key_is_saved_twice():
    cached = CachedEmbeddings(HashedTfidfEmbeddings(dim=16), max_bytes=10**6)
    cached.embed_matrix(["a", "b"])
    cached._save([(cached._key("a", "document"), cached._memory.get(cached._key("a", "document")))])
    assert cached.nbytes == 2 * (16 * 4 + ENTRY_OVERHEAD_BYTES)
    cached.clear()
    assert cached.nbytes == 0


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, None])
def test_a_bad_ceiling_is_rejected(bad: object):
    with pytest.raises(ValueError, match="memory_ceiling_bytes"):
        ContextSelector(memory_ceiling_bytes=bad)  # type: ignore[arg-type]


def test_the_hook_and_the_middleware_pass_their_ceiling_to_the_selector_they_build():
    from langchain_pacms.integrations import SelectionConfig, create_pacms_hook
    from langchain_pacms.integrations.middleware import PACMSMiddleware

    hook = create_pacms_hook(config=SelectionConfig(budget=100, memory_ceiling_bytes=2**20))
    assert hook.selector.memory_ceiling_bytes == 2**20
    mw = PACMSMiddleware(config=SelectionConfig(budget=100, memory_ceiling_bytes=3 * 2**20))
    assert mw.selector.memory_ceiling_bytes == 3 * 2**20


def test_the_built_in_embedders_sparse_rows_count_inside_the_ceiling():
    ceiling = 2**20
    selector = ContextSelector(memory_ceiling_bytes=ceiling)
    rows = selector.embeddings.embeddings._rows
    assert rows.max_bytes == ceiling * SPARSE_ROWS_SHARE
    texts = [
        f"note {i}: the build {i * 7} failed on step {i % 13} of stage {i}" for i in range(900)
    ]
    for start in range(0, len(texts), 100):
        selector.select(texts[start : start + 100], "which build failed?", budget=100)
    assert 0 < rows.nbytes <= rows.max_bytes and 0 < len(rows) < len(texts)  # some forgotten
    held = selector.embeddings.nbytes + rows.nbytes + selector.token_counter.nbytes
    assert held <= ceiling
    assert (
        selector.token_counter.max_bytes
        == ceiling - int(ceiling * EMBEDDING_SHARE) - rows.max_bytes
    )
    # An embedder passed in keeps its own cap, and the token memo gets the rest of the ceiling.
    own = ContextSelector(HashedTfidfEmbeddings(), memory_ceiling_bytes=ceiling)
    assert own.embeddings.embeddings._rows.max_bytes == SPARSE_ROWS_BYTES
    assert own.token_counter.max_bytes == ceiling - int(ceiling * EMBEDDING_SHARE)
