"""What names an embedding model in a cache: its settings, and its answer to one probe text."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

__all__ = ["json_like", "key_prefix", "model_identity", "probe_digest"]

_PROBE_COMPONENTS = 8  # the probe's largest components, by place and sign, name the model

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_SECRET = re.compile(r"key|token|secret|passw|credential|auth|header|cookie", re.IGNORECASE)


def key_prefix(namespace: str) -> str:
    """A store-safe key prefix: a sanitised start of ``namespace`` plus a hash of all of it."""
    readable = _UNSAFE.sub("_", namespace)[:48].strip("._-") or "ns"
    digest = hashlib.sha256(namespace.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}.{digest}"


def json_like(value: Any) -> bool:
    """True for what JSON gives back equal: scalars, and lists or str-keyed dicts of them.

    A tuple counts as a list; ``bytes``, sets, other mappings and objects do not count.

    Example:
        >>> json_like({"a": [1, 2.5, None, "x"]}), json_like({"a": b"raw"}), json_like({1: "a"})
        (True, False, False)
    """
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(json_like(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and json_like(v) for k, v in value.items())
    return False


def model_identity(embeddings: Embeddings) -> str:
    """A string that names an embedding model well enough to key a cache.

    ``embeddings.cache_identity`` when defined, else the class path and the plain-data settings
    (pydantic fields or public scalars), leaving out unset ones and names suggesting a secret.

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> model_identity(DeterministicFakeEmbedding(size=8))
        'langchain_core.embeddings.fake.DeterministicFakeEmbedding:size=8'
    """
    own = getattr(embeddings, "cache_identity", None)
    if isinstance(own, str) and own:
        return own
    cls = type(embeddings)
    declared = getattr(cls, "model_fields", None)
    pydantic = isinstance(declared, dict)
    # Not pydantic: public scalar attributes only (containers may be run-time state).
    names = list(declared or ()) if pydantic else [n for n in vars(embeddings) if n[:1] != "_"]
    parts = [f"{cls.__module__}.{cls.__qualname__}"]
    for name in sorted(names):
        value = getattr(embeddings, name, None)
        if value is None or _SECRET.search(name):
            continue
        if not (json_like(value) if pydantic else isinstance(value, (str, int, float, bool))):
            continue
        shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        parts.append(f"{name}={shown}")
    return ":".join(parts)


def probe_digest(vector: Any) -> tuple[int, str]:
    """A model's vector for a probe text as ``(size, digest)``, noise in the last digits aside.

    The digest is of its size and the places and signs of its largest components.

    Raises:
        ValueError: For a vector that is not one-dimensional, empty or not finite.

    Example:
        >>> probe_digest([0.1, -0.9, 0.3])[0]
        3
    """
    v = np.asarray(vector, dtype=np.float64)
    if v.ndim != 1 or not v.size or not np.isfinite(v).all():
        raise ValueError("embedding model returned no finite vector for the cache's probe")
    top = np.sort(np.argsort(-np.abs(v), kind="stable")[:_PROBE_COMPONENTS])
    mark = f"{v.size}:" + ",".join(f"{'-' if v[i] < 0 else '+'}{i}" for i in top)
    return int(v.size), hashlib.sha256(mark.encode()).hexdigest()[:16]
