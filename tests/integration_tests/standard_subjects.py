"""What LangChain's standard suites (``tests/*/standard/``) run on, and the checks they lack.

Every ``Embeddings``, tool and ``ByteStore`` the package ships has a subject here: a mixin that
gives the suite its class and parameters. The suites check shapes and types; the ``...Checks``
mixins add what they cannot tell (a recovery tool that answers every call with an error result,
an embedder whose query vectors do not match its document vectors or that returns one constant
vector, a "persistent" store that forgets its values on reopening).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.stores import InMemoryByteStore
from langchain_core.tools import BaseTool
from langgraph.store.memory import InMemoryStore

from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings, PrefixedEmbeddings
from langchain_pacms.embeddings.filestore import LocalByteStore
from langchain_pacms.lifecycle import SidecarRecord, SidecarStore, make_recover_tool

DIM = 256
THREAD = "standard-thread"
OBJECT_ID = "function:tool:1"
PAYLOAD = "total 3\n-rw-r--r-- a.py\n-rw-r--r-- b.py\nnaïve — ünïcode\n"


# -- embeddings -------------------------------------------------------------------------------
class EmbeddingsSubject:
    """Gives the suite :attr:`embeddings` and, fresh for each test, the parameters :meth:`params`
    returns."""

    embeddings: type[Embeddings]

    @property
    def embeddings_class(self) -> type[Embeddings]:
        return self.embeddings

    @property
    def embedding_model_params(self) -> dict[str, Any]:
        return self.params()

    def params(self) -> dict[str, Any]:
        raise NotImplementedError


class HashedTfidfSubject(EmbeddingsSubject):
    embeddings = HashedTfidfEmbeddings

    def params(self) -> dict[str, Any]:
        return {"dim": DIM}


class PrefixedSubject(EmbeddingsSubject):
    embeddings = PrefixedEmbeddings

    def params(self) -> dict[str, Any]:
        return {
            "embeddings": HashedTfidfEmbeddings(dim=DIM),
            "query_prefix": "search_query: ",
            "document_prefix": "search_document: ",
        }


class CachedSubject(EmbeddingsSubject):
    embeddings = CachedEmbeddings

    def params(self) -> dict[str, Any]:
        return {"embeddings": HashedTfidfEmbeddings(dim=DIM), "batch_size": 2}


class CachedInByteStoreSubject(EmbeddingsSubject):
    embeddings = CachedEmbeddings

    def params(self) -> dict[str, Any]:
        return {"embeddings": HashedTfidfEmbeddings(dim=DIM), "store": InMemoryByteStore()}


def _cosine(a: list[float], b: list[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b)) / norm if norm else 0.0


class EmbeddingsChecks:
    """What the embeddings suite does not check: one space for queries and documents, vectors
    that tell texts apart, async equal to sync."""

    def test_query_and_document_vectors_share_a_space(self, model: Embeddings) -> None:
        docs = model.embed_documents(["the cat purrs on the mat", "stock prices fell sharply"])
        query = model.embed_query("cat on the mat")
        assert len(query) == len(docs[0]) == len(docs[1])
        assert _cosine(query, docs[0]) > 0.3 > _cosine(query, docs[1])

    def test_one_text_one_vector(self, model: Embeddings) -> None:
        first, again, other = model.embed_documents(["port 6543", "port 6543", "lunch"])
        assert first == again != other
        assert model.embed_documents([]) == []

    async def test_async_matches_sync(self, model: Embeddings) -> None:
        texts = ["the cat purrs", "stock prices fell"]
        assert await model.aembed_documents(texts) == model.embed_documents(texts)
        assert await model.aembed_query("cat") == model.embed_query("cat")


# -- the recover_context tool ------------------------------------------------------------------
def sidecar_store() -> InMemoryStore:
    """A store holding one folded payload, ``PAYLOAD`` under ``OBJECT_ID`` in ``THREAD``."""
    store = InMemoryStore()
    SidecarStore(store, THREAD).put(SidecarRecord.of(OBJECT_ID, PAYLOAD, "tool"))
    return store


class RecoverToolSubject:
    """``recover_context`` bound to one thread."""

    bound_thread = True

    @property
    def tool_constructor(self) -> BaseTool:
        return make_recover_tool(sidecar_store(), thread_id=THREAD)

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"object_id": OBJECT_ID}


class RecoverToolDefaultThreadSubject(RecoverToolSubject):
    """``recover_context`` that reads the run's thread, with a default for direct calls."""

    bound_thread = False

    @property
    def tool_constructor(self) -> BaseTool:
        return make_recover_tool(sidecar_store(), default_thread_id=THREAD)


def tool_call(args: dict[str, Any]) -> ToolCall:
    return ToolCall(name="recover_context", args=args, id="call-1", type="tool_call")


class RecoverToolChecks:
    """What the tool suites do not check: an error result passes them as well as the payload."""

    def test_the_example_call_returns_the_payload(self, tool: BaseTool) -> None:
        message = tool.invoke(tool_call(self.tool_invoke_params_example))  # type: ignore[attr-defined]
        assert isinstance(message, ToolMessage)
        assert message.status == "success" and message.content == PAYLOAD
        assert tool.invoke(self.tool_invoke_params_example) == PAYLOAD  # type: ignore[attr-defined]

    async def test_the_async_example_call_returns_the_payload(self, tool: BaseTool) -> None:
        message = await tool.ainvoke(tool_call(self.tool_invoke_params_example))  # type: ignore[attr-defined]
        assert message.status == "success" and message.content == PAYLOAD

    def test_an_unknown_id_is_an_error_result(self, tool: BaseTool) -> None:
        message = tool.invoke(tool_call({"object_id": "function:tool:9"}))
        assert message.status == "error"
        assert "recover_context failed" in message.content and OBJECT_ID in message.content

    def test_the_thread_it_reads(self, tool: BaseTool) -> None:
        other = {"configurable": {"thread_id": "another-thread"}}
        message = tool.invoke(tool_call({"object_id": OBJECT_ID}), other)
        if self.bound_thread:  # type: ignore[attr-defined]
            assert message.content == PAYLOAD
        else:  # the run's thread holds no such sidecar
            assert message.status == "error" and "another-thread" in message.content
        same = tool.invoke(
            tool_call({"object_id": OBJECT_ID}), {"configurable": {"thread_id": THREAD}}
        )
        assert same.content == PAYLOAD


# -- ByteStore ---------------------------------------------------------------------------------
THREE_VALUES = (b"foo", b"\x00bar\xff", b"buzz" * 1000)


def local_byte_store(root: Path) -> LocalByteStore:
    return LocalByteStore(root / "store")


class ByteStoreChecks:
    """What the store suites do not check: the values are on disk, not in the object."""

    def test_values_survive_a_new_instance(self, tmp_path: Path) -> None:
        store = local_byte_store(tmp_path)
        store.mset([("foo", THREE_VALUES[0]), ("a/b", THREE_VALUES[2])])
        reopened = local_byte_store(tmp_path)
        assert reopened.mget(["foo", "a/b", "zz"]) == [THREE_VALUES[0], THREE_VALUES[2], None]
        assert sorted(reopened.yield_keys()) == ["a/b", "foo"]
