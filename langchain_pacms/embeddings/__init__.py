"""Embeddings: the built-in offline embedder and the content-hash cache for any model."""

from langchain_pacms.embeddings.cache import CachedEmbeddings, model_identity
from langchain_pacms.embeddings.lexical import HashedTfidfEmbeddings

__all__ = ["CachedEmbeddings", "HashedTfidfEmbeddings", "model_identity"]
