"""Embeddings: the built-in offline embedder and the content-hash cache for any model."""

from langchain_pacms.embeddings.cache import CachedEmbeddings, model_identity
from langchain_pacms.embeddings.lexical import HashedTfidfEmbeddings
from langchain_pacms.embeddings.prefixed import PrefixedEmbeddings, task_prefixes

__all__ = [
    "CachedEmbeddings",
    "HashedTfidfEmbeddings",
    "PrefixedEmbeddings",
    "model_identity",
    "task_prefixes",
]
