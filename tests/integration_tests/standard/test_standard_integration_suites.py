"""LangChain's standard integration suites on every Embeddings, tool and ByteStore the package
ships, each with the checks the suite lacks (see ``standard_subjects``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_tests.integration_tests import (
    BaseStoreAsyncTests,
    BaseStoreSyncTests,
    EmbeddingsIntegrationTests,
    ToolsIntegrationTests,
)
from langgraph.store.memory import InMemoryStore
from standard_subjects import (
    OBJECT_ID,
    THREE_VALUES,
    ByteStoreChecks,
    CachedInByteStoreSubject,
    CachedSubject,
    EmbeddingsChecks,
    HashedTfidfSubject,
    PrefixedSubject,
    RecoverToolChecks,
    RecoverToolDefaultThreadSubject,
    RecoverToolSubject,
    local_byte_store,
    tool_call,
)

from langchain_pacms.embeddings.filestore import LocalByteStore
from langchain_pacms.lifecycle import make_recover_tool


class TestHashedTfidfEmbeddings(HashedTfidfSubject, EmbeddingsChecks, EmbeddingsIntegrationTests):
    pass


class TestPrefixedEmbeddings(PrefixedSubject, EmbeddingsChecks, EmbeddingsIntegrationTests):
    pass


class TestCachedEmbeddings(CachedSubject, EmbeddingsChecks, EmbeddingsIntegrationTests):
    pass


class TestCachedEmbeddingsInByteStore(
    CachedInByteStoreSubject, EmbeddingsChecks, EmbeddingsIntegrationTests
):
    pass


class TestRecoverTool(RecoverToolSubject, RecoverToolChecks, ToolsIntegrationTests):
    pass


class TestRecoverToolDefaultThread(
    RecoverToolDefaultThreadSubject, RecoverToolChecks, ToolsIntegrationTests
):
    pass


def test_a_tool_without_a_thread_passes_the_suite_but_not_the_checks() -> None:
    tool = make_recover_tool(InMemoryStore())  # no thread id, no default: every call errs
    message = tool.invoke(tool_call({"object_id": OBJECT_ID}))
    assert isinstance(message.content, str)  # all the tool suite asks of a result
    assert message.status == "error" and "has no thread id" in message.content


class TestLocalByteStore(ByteStoreChecks, BaseStoreSyncTests[bytes]):
    @pytest.fixture
    def kv_store(self, tmp_path: Path) -> LocalByteStore:
        return local_byte_store(tmp_path)

    @pytest.fixture
    def three_values(self) -> tuple[bytes, bytes, bytes]:
        return THREE_VALUES


class TestLocalByteStoreAsync(BaseStoreAsyncTests[bytes]):
    @pytest.fixture
    async def kv_store(self, tmp_path: Path) -> LocalByteStore:
        return LocalByteStore(tmp_path / "store", fsync=True)

    @pytest.fixture
    def three_values(self) -> tuple[bytes, bytes, bytes]:
        return THREE_VALUES
