from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel

from langchain_pacms.embeddings import CachedEmbeddings, HashedTfidfEmbeddings, PrefixedEmbeddings
from langchain_pacms.embeddings.filestore import LocalByteStore
from pacms_bench.backends import (
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


@pytest.mark.parametrize(
    "spec",
    [
        "bogus",
        "",
        "default:x",
        "ollama:",
        "openai:",
        "nosuch-provider:model",
        "python:langchain_pacms.embeddings",
        "python:langchain_pacms.embeddings:NoSuchEmbedder",
    ],
)
def test_unknown_embeddings_specs(spec: str) -> None:
    with pytest.raises(ValueError):
        embeddings_from_spec(spec)


def test_ollama_specs_build_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")
    emb = embeddings_from_spec("ollama:mxbai-embed-large:335m")
    assert isinstance(emb, PrefixedEmbeddings)  # a model trained with task prefixes
    assert emb.query_prefix.startswith("Represent this sentence") and emb.document_prefix == ""
    inner = emb.embeddings
    assert type(inner).__name__ == "OllamaEmbeddings"
    assert inner.model == "mxbai-embed-large:335m" and inner.base_url == "http://127.0.0.1:9"
    plain = embeddings_from_spec("ollama:all-minilm")  # no prefixes known: not wrapped
    assert type(plain).__name__ == "OllamaEmbeddings"
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


@pytest.mark.parametrize("spec", ["gpt-5", "ollama:", "  ", "anthropic:", "python:nomodule"])
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


# -- provider and python: specs ---------------------------------------------------------------

MODELS_MODULE = """
from langchain_core.language_models import FakeListChatModel
from langchain_pacms.embeddings import HashedTfidfEmbeddings

SMALL = HashedTfidfEmbeddings(dim=64)
CHAT = FakeListChatModel(responses=["x"])
NOT_A_MODEL = 3


def make_chat(temperature=None):
    return FakeListChatModel(responses=[f"t={temperature}"])


def wrong():
    return "not a model"
"""


@pytest.fixture
def models_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A throwaway importable module holding models, factories and non-models."""
    (tmp_path / "pacms_test_models.py").write_text(MODELS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pacms_test_models", raising=False)
    return "pacms_test_models"


def test_python_specs(models_module: str) -> None:
    assert embeddings_from_spec(f"python:{models_module}:SMALL").dim == 64
    built = embeddings_from_spec("python:langchain_pacms.embeddings:HashedTfidfEmbeddings")
    assert isinstance(built, HashedTfidfEmbeddings) and built.dim == 4096
    chat = chat_model_from_spec(f"python:{models_module}:make_chat", temperature=0)
    assert chat.invoke("q").content == "t=0"  # keyword options reach the factory
    assert chat_model_from_spec(f"python:{models_module}:make_chat").invoke("q").content == "t=None"
    with pytest.raises(TypeError, match="str, which is not BaseChatModel"):
        chat_model_from_spec(f"python:{models_module}:wrong")
    with pytest.raises(TypeError, match="FakeListChatModel, which is not Embeddings"):
        embeddings_from_spec(f"python:{models_module}:make_chat")
    with pytest.raises(ValueError, match="neither"):
        embeddings_from_spec(f"python:{models_module}:NOT_A_MODEL")
    with pytest.raises(ValueError, match="takes no options"):
        chat_model_from_spec(f"python:{models_module}:CHAT", temperature=0)
    assert chat_model_from_spec(f"python:{models_module}:CHAT").invoke("q").content == "x"
    with pytest.raises(ModuleNotFoundError):
        embeddings_from_spec("python:no_such_module_anywhere:Thing")


def test_provider_specs_go_through_langchain(monkeypatch: pytest.MonkeyPatch) -> None:
    import langchain.chat_models
    import langchain.embeddings

    seen: list[tuple[str, dict[str, Any]]] = []

    def init_chat_model(model: str, **kwargs: Any) -> FakeListChatModel:
        seen.append((model, kwargs))
        return FakeListChatModel(responses=["ok"])

    def init_embeddings(model: str, **kwargs: Any) -> HashedTfidfEmbeddings:
        seen.append((model, kwargs))
        return HashedTfidfEmbeddings(dim=128)

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", init_chat_model)
    monkeypatch.setattr(langchain.embeddings, "init_embeddings", init_embeddings)
    chat = chat_model_from_spec(" OpenAI:gpt-4o-mini ", temperature=0)
    assert chat.invoke("q").content == "ok"
    assert embeddings_from_spec("openai:text-embedding-3-small").dim == 128
    assert seen == [
        ("openai:gpt-4o-mini", {"temperature": 0}),
        ("openai:text-embedding-3-small", {}),
    ]


@pytest.mark.skipif(
    importlib.util.find_spec("langchain_openai") is not None, reason="langchain-openai installed"
)
def test_provider_without_its_package_says_what_to_install() -> None:
    with pytest.raises(ImportError, match="langchain-openai"):
        embeddings_from_spec("openai:text-embedding-3-small")
    with pytest.raises(ImportError, match="langchain-openai"):
        chat_model_from_spec("openai:gpt-4o-mini")


def test_provider_specs_without_langchain_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain.embeddings", None)
    monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
    with pytest.raises(ImportError, match=r"langchain-pacms\[middleware\].*langchain-cohere"):
        embeddings_from_spec("cohere:embed-english-v3.0")
    with pytest.raises(ImportError, match=r"langchain-pacms\[middleware\].*langchain-anthropic"):
        chat_model_from_spec("anthropic:claude-sonnet-4-5")
