"""Model backends for the evaluation harnesses, named by short spec strings.

Embeddings (:func:`embeddings_from_spec`):

* ``default``: the built-in offline :class:`~langchain_pacms.embeddings.HashedTfidfEmbeddings`
  (4096 hashed features, pool-level IDF applied by the selector);
* ``hashed:<dim>``: the same embedder with ``dim`` features (a power of two);
* ``ollama:<model>``: ``langchain_ollama.OllamaEmbeddings`` (e.g. ``ollama:nomic-embed-text``,
  the study's setup). The server is ``ollama_url``, else ``$OLLAMA_HOST``, else Ollama's default
  ``http://127.0.0.1:11434``. A model trained with task prefixes (``nomic-embed-text``,
  ``mxbai-embed-large``; see :data:`~langchain_pacms.embeddings.prefixed.TASK_PREFIXES`) is
  wrapped in :class:`~langchain_pacms.embeddings.PrefixedEmbeddings`, so queries and
  documents reach it the way it was trained to read them.

Chat models (:func:`chat_model_from_spec`):

* ``ollama:<model>``: ``langchain_ollama.ChatOllama`` (same server rules as above);
* ``fake:<reply>[|<reply>...]``: ``FakeListChatModel`` that cycles through the replies (for
  tests and dry runs; ``fake:`` alone replies ``"I don't know."``).

Both kinds also take:

* ``<provider>:<model>`` for any other provider LangChain knows, built by LangChain's
  ``init_embeddings`` or ``init_chat_model`` (for example ``openai:text-embedding-3-small`` or
  ``anthropic:claude-sonnet-4-5``). This needs ``langchain`` v1 (the ``models`` extra) and the
  provider's package (``langchain-openai``, ``langchain-anthropic``, ...);
* ``python:<module>:<name>``: any ``Embeddings`` or chat model class, factory or instance
  importable from Python (a class or factory is called with no arguments, or with the keyword
  arguments given to :func:`chat_model_from_spec`), for models that no provider string names.

``langchain_ollama`` and ``langchain`` are imported only when a spec needs them.

Example:
    >>> embeddings_from_spec("hashed:256").dim
    256
    >>> chat_model_from_spec("fake:yes|no").invoke("q").content
    'yes'
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.stores import ByteStore

from langchain_pacms.embeddings import (
    CachedEmbeddings,
    HashedTfidfEmbeddings,
    PrefixedEmbeddings,
    task_prefixes,
)

__all__ = [
    "CACHE_MODES",
    "CHAT_MODEL_SPECS",
    "EMBEDDINGS_CHECK_TEXT",
    "EMBEDDINGS_HELP",
    "EMBEDDING_SPECS",
    "chat_model_from_spec",
    "check_embeddings",
    "embeddings_from_spec",
    "is_lexical",
    "ollama_base_url",
    "selector_from_spec",
]

EMBEDDING_SPECS = (
    "default",
    "hashed:<dim>",
    "ollama:<model>",
    "<provider>:<model>",
    "python:<module>:<name>",
)
"""The accepted forms of an embeddings spec."""

EMBEDDINGS_HELP = (
    "default (built-in hashed TF-IDF), hashed:<dim>, ollama:<model> (e.g. "
    "ollama:nomic-embed-text, the study's), any <provider>:<model> LangChain's init_embeddings "
    "knows, or python:<module>:<name>"
)
"""The ``--embeddings`` help shared by the recall and QA command lines."""

CHAT_MODEL_SPECS = (
    "ollama:<model>",
    "fake:<reply>[|<reply>...]",
    "<provider>:<model>",
    "python:<module>:<name>",
)
"""The accepted forms of a chat model spec."""

CACHE_MODES = ("auto", "on", "off")
"""On-disk embedding cache modes: ``auto`` caches every backend except the lexical one."""


def ollama_base_url(url: str | None = None) -> str | None:
    """The Ollama server to use: ``url``, else ``$OLLAMA_HOST``, else None (Ollama's default).

    A bare ``host:port`` (as ``OLLAMA_HOST`` is often written) gets an ``http://`` scheme.
    """
    value = (url or os.environ.get("OLLAMA_HOST") or "").strip()
    if not value:
        return None
    return value if "://" in value else f"http://{value}"


def _split(spec: str, kind: str) -> tuple[str, str]:
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"empty {kind} spec")
    name, _, arg = spec.strip().partition(":")
    return name.lower(), arg.strip()


def _from_python(target: str, kind: str, expected: type, **kwargs: Any) -> Any:
    """Build a model from ``<module>:<name>`` (the part after ``python:``)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"python {kind} specs look like python:<module>:<name>; got python:{target!r}"
        )
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"python:{target}: {module_name} has no {attr!r}") from None
    if isinstance(obj, expected):
        if kwargs:
            raise ValueError(
                f"python:{target} is an instance; it takes no options, got {sorted(kwargs)}"
            )
        return obj
    if not callable(obj):
        raise ValueError(f"python:{target} is neither a {kind} nor a callable that builds one")
    model = obj(**kwargs)
    if not isinstance(model, expected):
        raise TypeError(
            f"python:{target} built a {type(model).__name__}, which is not {expected.__name__}"
        )
    return model


def _from_provider(spec: str, kind: str, **kwargs: Any) -> Any:
    """Build a model with LangChain's ``init_embeddings`` / ``init_chat_model``."""
    provider, _, model = spec.strip().partition(":")
    if not model.strip():
        raise ValueError(f"{kind} specs look like <provider>:<model>; got {spec!r}")
    init: Callable[..., Any]
    try:
        if kind == "embeddings":
            from langchain.embeddings import init_embeddings as init
        else:
            from langchain.chat_models import init_chat_model as init
    except ImportError as err:
        raise ImportError(
            f"{kind} spec {spec!r} needs langchain v1 and the provider's package: "
            f"pip install 'langchain-pacms[middleware]' langchain-{provider.lower()}"
        ) from err
    try:
        return init(f"{provider.lower()}:{model.strip()}", **kwargs)
    except ValueError as err:  # e.g. a provider LangChain does not know, or a bad setting
        raise ValueError(f"cannot build {kind} from {spec!r}: {err}") from err


def embeddings_from_spec(spec: str = "default", *, ollama_url: str | None = None) -> Embeddings:
    """Build an embedding model from a spec string.

    Args:
        spec: ``default``, ``hashed:<dim>``, ``ollama:<model>``, ``<provider>:<model>`` or
            ``python:<module>:<name>`` (see the module docstring).
        ollama_url: Ollama server for ``ollama:`` specs (default: ``$OLLAMA_HOST`` or Ollama's
            own default).

    Returns:
        The (uncached) embeddings object.

    Raises:
        ValueError: For an unknown or malformed spec, or a provider LangChain does not know.
        ImportError: When the package a spec needs is not installed.
        TypeError: When a ``python:`` factory builds something that is not ``Embeddings``.

    Example:
        >>> embeddings_from_spec("python:langchain_pacms.embeddings:HashedTfidfEmbeddings").dim
        4096
    """
    name, arg = _split(spec, "embeddings")
    if name == "default" and not arg:
        return HashedTfidfEmbeddings()
    if name == "hashed":
        try:
            dim = int(arg)
        except ValueError:
            raise ValueError(
                f"hashed embeddings need an integer size, e.g. hashed:4096; got {spec!r}"
            ) from None
        return HashedTfidfEmbeddings(dim=dim)
    if name == "ollama":
        if not arg:
            raise ValueError(
                f"ollama embeddings need a model, e.g. ollama:nomic-embed-text; got {spec!r}"
            )
        try:
            from langchain_ollama import OllamaEmbeddings
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(
                "ollama embeddings need langchain-ollama: pip install 'langchain-pacms[ollama]'"
            ) from err
        model = OllamaEmbeddings(model=arg, base_url=ollama_base_url(ollama_url))
        prefixes = task_prefixes(arg)
        if prefixes is None:
            return model
        return PrefixedEmbeddings(model, query_prefix=prefixes[0], document_prefix=prefixes[1])
    if name == "python":
        return _from_python(arg, "embeddings", Embeddings)
    if name in ("default", "hashed") or ":" not in spec:
        raise ValueError(
            f"unknown embeddings spec {spec!r}; use one of: {', '.join(EMBEDDING_SPECS)}"
        )
    return _from_provider(spec, "embeddings")


def chat_model_from_spec(
    spec: str, *, ollama_url: str | None = None, **kwargs: Any
) -> BaseChatModel:
    """Build a chat model from a spec string.

    Args:
        spec: ``ollama:<model>``, ``fake:<reply>[|<reply>...]``, ``<provider>:<model>`` or
            ``python:<module>:<name>`` (see the module docstring).
        ollama_url: Ollama server for ``ollama:`` specs (default: ``$OLLAMA_HOST`` or Ollama's
            own default).
        **kwargs: Passed to the model class (e.g. ``temperature=0``).

    Returns:
        The chat model.

    Raises:
        ValueError: For an unknown or malformed spec, or a provider LangChain does not know.
        ImportError: When the package a spec needs is not installed.
        TypeError: When a ``python:`` factory builds something that is not a chat model.
    """
    name, arg = _split(spec, "chat model")
    if name == "fake":
        from langchain_core.language_models import FakeListChatModel

        replies = arg.split("|") if arg else ["I don't know."]
        return FakeListChatModel(responses=replies, **kwargs)
    if name == "ollama":
        if not arg:
            raise ValueError(f"ollama chat models need a model, e.g. ollama:llama3.1; got {spec!r}")
        try:
            from langchain_ollama import ChatOllama
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(
                "ollama chat models need langchain-ollama: pip install 'langchain-pacms[ollama]'"
            ) from err
        return ChatOllama(model=arg, base_url=ollama_base_url(ollama_url), **kwargs)
    if name == "python":
        return _from_python(arg, "chat model", BaseChatModel, **kwargs)
    if ":" not in spec:
        raise ValueError(
            f"unknown chat model spec {spec!r}; use one of: {', '.join(CHAT_MODEL_SPECS)}"
        )
    return _from_provider(spec, "chat model", **kwargs)


EMBEDDINGS_CHECK_TEXT = "A short text to test the embedder."
"""The text :func:`check_embeddings` embeds."""


def check_embeddings(spec: str, embeddings: Embeddings) -> str | None:
    """Embed one short text with a model that runs elsewhere, to find a dead one before a run.

    The text goes to the model itself, past any cache. The built-in embedders (``default``,
    ``hashed:<dim>``) and ``python:`` models run in this process and are not tried.

    Args:
        spec: The spec the embeddings were built from.
        embeddings: The embeddings (cached or not).

    Returns:
        None if the text was embedded or not tried, else the problem, naming the spec.

    Example:
        >>> check_embeddings("default", embeddings_from_spec("default")) is None
        True
    """
    if _split(spec, "embeddings")[0] in ("default", "hashed", "python"):
        return None
    # Past the cache: a vector stored by an earlier run says nothing about the model now.
    inner = embeddings.embeddings if isinstance(embeddings, CachedEmbeddings) else embeddings
    try:
        inner.embed_query(EMBEDDINGS_CHECK_TEXT)
    except Exception as err:
        return f"the embeddings {spec} did not embed a test text: {type(err).__name__}: {err}"
    return None


def is_lexical(embeddings: Embeddings) -> bool:
    """True for the built-in hashed lexical embedder (cheap enough that caching rarely pays)."""
    inner = embeddings.embeddings if isinstance(embeddings, CachedEmbeddings) else embeddings
    return isinstance(inner, HashedTfidfEmbeddings)


def selector_from_spec(
    embeddings: str = "default",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache: str = "auto",
    ollama_url: str | None = None,
    token_counter: Any = None,
    max_memory_vectors: int = 50_000,
) -> Any:
    """A :class:`~langchain_pacms.ContextSelector` for an evaluation run.

    Args:
        embeddings: Embeddings spec (see :func:`embeddings_from_spec`).
        cache_dir: Folder of the on-disk embedding cache
            (:class:`~langchain_pacms.embeddings.filestore.LocalByteStore`).
        cache: ``auto`` (use ``cache_dir`` for every backend except the lexical one, which
            recomputes faster than it reads from disk), ``on`` or ``off``.
        ollama_url: Ollama server for ``ollama:`` specs.
        token_counter: Passed to the selector (default: ``o200k_base``).
        max_memory_vectors: Size of the in-memory vector cache when no disk cache is used
            (keeps long sweeps from holding every vector they ever saw).

    Returns:
        The selector (typed ``Any`` to keep this module import-light).

    Raises:
        ValueError: For a bad spec or cache mode.
    """
    from langchain_pacms import ContextSelector

    if cache not in CACHE_MODES:
        raise ValueError(f"cache must be one of {CACHE_MODES}, got {cache!r}")
    base = embeddings_from_spec(embeddings, ollama_url=ollama_url)
    store: ByteStore | None = None
    if cache_dir is not None and (cache == "on" or (cache == "auto" and not is_lexical(base))):
        from langchain_pacms.embeddings.filestore import LocalByteStore

        store = LocalByteStore(Path(cache_dir))
    cached = CachedEmbeddings(base, store=store, max_entries=max_memory_vectors)
    return ContextSelector(cached, token_counter=token_counter)
