"""What the selector must know about an embedder, declared once: :class:`EmbedderProfile`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from langchain_core.embeddings import Embeddings
from numpy.typing import NDArray

__all__ = [
    "CALIBRATED_PROFILE",
    "DENSE_PROFILE",
    "DENSE_SIMILARITY_THRESHOLD",
    "WRAPPED_MODEL_ATTRIBUTES",
    "EmbedderProfile",
    "idf_reweight",
    "resolve_profile",
    "unwrap_embeddings",
]

logger = logging.getLogger("langchain_pacms.embeddings")

DENSE_SIMILARITY_THRESHOLD = 0.85  # for dense neural embedders (docs/results/longmemeval.md)
WRAPPED_MODEL_ATTRIBUTES = ("embeddings", "underlying_embeddings")  # where wrappers hold a model
CALIBRATIONS = (None, "pool")  # the values of EmbedderProfile.calibration


def _unit(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class EmbedderProfile:
    """How ``pacms`` reads one embedder's vectors (an embeddings class's ``pacms_profile``).

    Attributes:
        name: A short name shown by the selector (``dense``, ``hashed-tfidf``, ...).
        similarity_threshold: Near-duplicate kernel threshold in ``[0, 1)`` on its scale.
        min_gain: Gain floor in ``[0, 1)`` below which the greedy hands over to the fill.
        relevance_feedback: Pseudo-relevance feedback weight in ``[0, 1)`` (0: none).
        idf_reweighting: Reweight each pool's vectors by IDF over the pool (lexical vectors).
        tool_loop_similarity_threshold: Kernel threshold in ``[0, 1)`` within a tool loop;
            ``None``: ``similarity_threshold``.
        calibration: ``None`` (a declared scale) or ``"pool"`` (``pacms``'s ``calibrate``).

    Example:
        >>> EmbedderProfile(name="my-model", similarity_threshold=0.7)
        EmbedderProfile(name='my-model', similarity_threshold=0.7, min_gain=0.0, relevance_feedback=0.0, idf_reweighting=False, tool_loop_similarity_threshold=None, calibration=None)
    """  # noqa: E501

    name: str = "dense"
    similarity_threshold: float = DENSE_SIMILARITY_THRESHOLD
    min_gain: float = 0.0
    relevance_feedback: float = 0.0
    idf_reweighting: bool = False
    tool_loop_similarity_threshold: float | None = None
    calibration: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty str, got {self.name!r}")
        for unit in ("similarity_threshold", "min_gain", "relevance_feedback"):
            object.__setattr__(self, unit, _unit(unit, getattr(self, unit)))
        if not isinstance(self.idf_reweighting, bool):
            raise ValueError(f"idf_reweighting must be a bool, got {self.idf_reweighting!r}")
        if self.tool_loop_similarity_threshold is not None:
            object.__setattr__(
                self,
                "tool_loop_similarity_threshold",
                _unit("tool_loop_similarity_threshold", self.tool_loop_similarity_threshold),
            )
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {self.calibration!r}")


DENSE_PROFILE = EmbedderProfile()  # dense cosines as they come
CALIBRATED_PROFILE = EmbedderProfile(name="calibrated", calibration="pool")  # for undeclared ones


def unwrap_embeddings(embeddings: Embeddings) -> Embeddings:
    """The model under any known wrappers (see :data:`WRAPPED_MODEL_ATTRIBUTES`).

    Example:
        >>> from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
        >>> model = HashedTfidfEmbeddings(dim=8)
        >>> unwrap_embeddings(CachedEmbeddings(CachedEmbeddings(model))) is model
        True
    """
    seen = {id(embeddings)}
    while True:
        fields = _fields(embeddings)
        inner = next(
            (v for n in WRAPPED_MODEL_ATTRIBUTES if isinstance(v := fields.get(n), Embeddings)),
            None,
        )
        if inner is None or id(inner) in seen:
            return embeddings
        seen.add(id(inner))
        embeddings = inner


def _fields(obj: object) -> dict[str, object]:
    return vars(obj) if hasattr(obj, "__dict__") else {}


def resolve_profile(embeddings: Embeddings) -> EmbedderProfile:
    """The profile an embedder declares (``pacms_profile``), under any known wrappers.

    Else :data:`CALIBRATED_PROFILE` (dense defaults on each pool's own scale), with a warning
    if the model wraps another under an unknown attribute.

    Args:
        embeddings: The embeddings, wrapped or not.

    Example:
        >>> from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
        >>> resolve_profile(CachedEmbeddings(HashedTfidfEmbeddings(dim=8))).name
        'hashed-tfidf'
    """
    model = unwrap_embeddings(embeddings)
    declared = getattr(model, "pacms_profile", None)  # a class attribute, field or attribute
    if isinstance(declared, EmbedderProfile):
        return declared
    if any(isinstance(value, Embeddings) for value in _fields(model).values()):  # a wrapper
        logger.warning(
            "%s wraps another embeddings model that the selector cannot see through; using "
            "the calibrated profile (similarity_threshold=%s on each pool's own cosine scale, "
            "no gain floor, no relevance feedback, no IDF reweighting). "
            "Pass ContextSelector(profile=...) to state the right one.",
            type(model).__name__,
            DENSE_SIMILARITY_THRESHOLD,
        )
    return CALIBRATED_PROFILE


def idf_reweight(
    vectors: NDArray[np.float32], query: NDArray[np.float32]
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """New pool vectors and query weighted by inverse document frequency over the pool, unit.

    Example:
        >>> _, q = idf_reweight(np.array([[1, 1, 0], [1, 0, 1]], "f"), np.ones(3, "f"))
        >>> bool(q[1] > q[0])  # the rarer feature weighs more
        True
    """
    n = vectors.shape[0]
    df = np.count_nonzero(vectors, axis=0)
    idf = (np.log((1.0 + n) / (1.0 + df)) + 1.0).astype(np.float32)
    pool = vectors * idf[None, :]
    q = query * idf
    norms = np.linalg.norm(pool, axis=1)
    nz = norms > 0
    pool[nz] /= norms[nz, None]
    qn = float(np.linalg.norm(q))
    return pool, (q / qn if qn > 0 else q)
