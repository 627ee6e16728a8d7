"""Task prefixes for embedding models trained with them (``nomic-embed-text``, ...)."""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_pacms.embeddings.cache import model_identity

__all__ = ["TASK_PREFIXES", "PrefixedEmbeddings", "task_prefixes"]

_PASSED_THROUGH = frozenset({"pacms_profile", "reweight_pool"})  # read from the wrapped model
TASK_PREFIXES: dict[str, tuple[str, str]] = {
    "nomic-embed-text": ("search_query: ", "search_document: "),
    "mxbai-embed-large": ("Represent this sentence for searching relevant passages: ", ""),
}


def task_prefixes(model: str) -> tuple[str, str] | None:
    """The ``(query, document)`` prefixes a model expects, or None if it needs none we know.

    Args:
        model: A model name; a tag (``:latest``) and a namespace (``library/``) are ignored.

    Example:
        >>> task_prefixes("nomic-embed-text:latest")
        ('search_query: ', 'search_document: ')
    """
    base = model.strip().rsplit("/", 1)[-1].split(":", 1)[0].lower()
    return TASK_PREFIXES.get(base)


class PrefixedEmbeddings(Embeddings):
    """Wraps an ``Embeddings`` and puts a task prefix in front of every query and document.

    Only the wrapped model's ``pacms_profile`` and ``reweight_pool`` are read through it.

    Args:
        embeddings: The model to wrap.
        query_prefix: Put before every query text.
        document_prefix: Put before every document text.

    Raises:
        ValueError: If both prefixes are empty.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> m = DeterministicFakeEmbedding(size=4)
        >>> PrefixedEmbeddings(m, query_prefix="q: ").embed_query("a") == m.embed_query("q: a")
        True
    """

    def __init__(
        self, embeddings: Embeddings, *, query_prefix: str = "", document_prefix: str = ""
    ) -> None:
        if not query_prefix and not document_prefix:
            raise ValueError("give a query_prefix, a document_prefix or both")
        self.embeddings = embeddings
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("embeddings")
        if name in _PASSED_THROUGH and inner is not None:
            return getattr(inner, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def cache_identity(self) -> str:
        """The wrapped model's identity plus both prefixes: prefixed vectors differ."""
        return (
            f"{model_identity(self.embeddings)}|query_prefix={self.query_prefix!r}"
            f"|document_prefix={self.document_prefix!r}"
        )

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents, each behind the document prefix."""
        return self.embeddings.embed_documents([self.document_prefix + t for t in texts])

    def embed_query(self, text: str) -> list[float]:
        """Embed a query behind the query prefix."""
        return self.embeddings.embed_query(self.query_prefix + text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async twin of :meth:`embed_documents`."""
        return await self.embeddings.aembed_documents([self.document_prefix + t for t in texts])

    async def aembed_query(self, text: str) -> list[float]:
        """Async twin of :meth:`embed_query`."""
        return await self.embeddings.aembed_query(self.query_prefix + text)

    def __repr__(self) -> str:
        return (
            f"PrefixedEmbeddings({self.embeddings!r}, query_prefix={self.query_prefix!r}, "
            f"document_prefix={self.document_prefix!r})"
        )
