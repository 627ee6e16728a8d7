from __future__ import annotations

from pathlib import Path

import pytest

from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings
from langchain_pacms.embeddings.filestore import LocalByteStore
from langchain_pacms.eval.backends import (
    chat_model_from_spec,
    embeddings_from_spec,
    is_lexical,
    ollama_base_url,
    selector_from_spec,
)


def test_embeddings_specs() -> None:
    default = embeddings_from_spec("default")
    assert isinstance(default, HashedTfidfEmbeddings) and default.dim == 4096
    assert embeddings_from_spec(" hashed:256 ").dim == 256
    with pytest.raises(ValueError, match="power of two"):
        embeddings_from_spec("hashed:300")
    with pytest.raises(ValueError, match="integer size"):
        embeddings_from_spec("hashed:big")


@pytest.mark.parametrize("spec", ["bogus", "openai:text-embedding-3", "", "default:x", "ollama:"])
def test_unknown_embeddings_specs(spec: str) -> None:
    with pytest.raises(ValueError):
        embeddings_from_spec(spec)


def test_ollama_specs_build_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")
    emb = embeddings_from_spec("ollama:nomic-embed-text")
    assert type(emb).__name__ == "OllamaEmbeddings"
    assert emb.model == "nomic-embed-text" and emb.base_url == "http://127.0.0.1:9"
    chat = chat_model_from_spec("ollama:llama3.1", ollama_url="http://localhost:1", temperature=0)
    assert type(chat).__name__ == "ChatOllama"
    assert chat.model == "llama3.1" and chat.base_url == "http://localhost:1"
    assert chat.temperature == 0


def test_ollama_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    assert ollama_base_url() is None
    assert ollama_base_url("https://h:1") == "https://h:1"
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:11434")
    assert ollama_base_url() == "http://0.0.0.0:11434"


def test_fake_chat_model_cycles() -> None:
    chat = chat_model_from_spec("fake:yes|no")
    assert [chat.invoke("q").content for _ in range(3)] == ["yes", "no", "yes"]
    assert chat_model_from_spec("fake:").invoke("q").content == "I don't know."


@pytest.mark.parametrize("spec", ["gpt-5", "openai:gpt-5", "ollama:", "  "])
def test_unknown_chat_specs(spec: str) -> None:
    with pytest.raises(ValueError):
        chat_model_from_spec(spec)


def test_selector_from_spec_cache_policy(tmp_path: Path) -> None:
    lexical = selector_from_spec("default", cache_dir=tmp_path)
    assert lexical.embeddings.store is None  # auto: the lexical embedder is not disk-cached
    assert is_lexical(lexical.embeddings)
    forced = selector_from_spec("hashed:64", cache_dir=tmp_path, cache="on")
    assert isinstance(forced.embeddings, CachedEmbeddings)
    assert isinstance(forced.embeddings.store, LocalByteStore)
    remote = selector_from_spec("ollama:nomic-embed-text", cache_dir=tmp_path)
    assert isinstance(remote.embeddings.store, LocalByteStore)  # auto: remote models cached
    assert not is_lexical(remote.embeddings)
    assert selector_from_spec("ollama:m", cache_dir=tmp_path, cache="off").embeddings.store is None
    with pytest.raises(ValueError, match="cache"):
        selector_from_spec("default", cache="sometimes")
