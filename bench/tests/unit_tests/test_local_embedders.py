"""The eval embedders that load weights from installed packages (skipped when they are absent)."""

from __future__ import annotations

import numpy as np
import pytest

from langchain_pacms import ContextSelector
from pacms_bench.local_embedders import StaticModelEmbeddings, static_model


class _Model:
    """A stand-in for ``model2vec.StaticModel``: fixed, unnormalised rows."""

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.array([[3.0, 4.0] if t else [0.0, 0.0] for t in texts])


def test_the_wrapper_gives_unit_vectors_and_leaves_zero_rows_zero() -> None:
    wrapped = StaticModelEmbeddings(_Model())
    assert wrapped.embed_documents(["a", ""]) == [[0.6, 0.8], [0.0, 0.0]]
    assert wrapped.embed_documents([]) == []
    assert wrapped.embed_query("a") == [0.6, 0.8]


def test_the_static_model_embeds_offline_and_is_calibrated() -> None:
    pytest.importorskip("model2vec")
    pytest.importorskip("static_model")
    model = static_model()
    vectors = np.array(model.embed_documents(["I bought a crystal chandelier.", "Weather?"]))
    assert vectors.shape == (2, 64)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert ContextSelector(model).profile.calibration == "pool"
