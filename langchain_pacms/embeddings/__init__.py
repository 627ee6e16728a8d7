"""Embeddings: the built-in offline embedder and the content-hash cache for any model."""

from langchain_pacms.embeddings.cache import CachedEmbeddings, model_identity
from langchain_pacms.embeddings.lexical import HashedTfidfEmbeddings
from langchain_pacms.embeddings.prefixed import PrefixedEmbeddings, task_prefixes
from langchain_pacms.embeddings.profile import EmbedderProfile, resolve_profile

__all__ = [
    "CachedEmbeddings",
    "EmbedderProfile",
    "HashedTfidfEmbeddings",
    "PrefixedEmbeddings",
    "model_identity",
    "resolve_profile",
    "task_prefixes",
]
