"""LangChain's standard unit suites on every Embeddings and tool the package ships."""

from __future__ import annotations

from langchain_tests.unit_tests import EmbeddingsUnitTests, ToolsUnitTests
from standard_subjects import (
    CachedInByteStoreSubject,
    CachedSubject,
    HashedTfidfSubject,
    PrefixedSubject,
    RecoverToolDefaultThreadSubject,
    RecoverToolSubject,
)


class TestHashedTfidfEmbeddingsUnit(HashedTfidfSubject, EmbeddingsUnitTests):
    pass


class TestPrefixedEmbeddingsUnit(PrefixedSubject, EmbeddingsUnitTests):
    pass


class TestCachedEmbeddingsUnit(CachedSubject, EmbeddingsUnitTests):
    pass


class TestCachedEmbeddingsInByteStoreUnit(CachedInByteStoreSubject, EmbeddingsUnitTests):
    pass


class TestRecoverToolUnit(RecoverToolSubject, ToolsUnitTests):
    pass


class TestRecoverToolDefaultThreadUnit(RecoverToolDefaultThreadSubject, ToolsUnitTests):
    pass
