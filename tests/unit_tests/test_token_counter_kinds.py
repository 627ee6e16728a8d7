"""``token_counter`` takes a str -> int counter or LangChain's message-list counters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from pacms_fakes import words

from langchain_pacms import ContextSelector
from langchain_pacms.integrations.compressor import PACMSCompressor
from langchain_pacms.tokens import TokenCounter, resolve_token_counter


def test_a_str_counter_counts_the_text() -> None:
    selector = ContextSelector(token_counter=words)
    assert selector.token_counter("a b c") == 3
    assert selector.count_tokens(["a b c", "d"]) == [3, 1]


def test_count_tokens_approximately_counts_one_message_not_each_character() -> None:
    selector = ContextSelector(token_counter=count_tokens_approximately)
    # one HumanMessage (its content, role and framing), not five one-character messages (25)
    assert count_tokens_approximately("a b c") == 25
    assert selector.token_counter("a b c") == 6
    assert selector.token_counter("a b c") == count_tokens_approximately([HumanMessage("a b c")])
    long = "word " * 400
    assert selector.token_counter(long) == count_tokens_approximately([HumanMessage(long)])


class WordModel(FakeListChatModel):
    """A chat model that counts words, plus 4 tokens of framing per message."""

    def get_num_tokens(self, text: str) -> int:
        return len(text.split())

    def get_num_tokens_from_messages(
        self, messages: list[BaseMessage], tools: Sequence[Any] | None = None
    ) -> int:
        return sum(self.get_num_tokens(str(m.content)) + 4 for m in messages)


def test_a_model_and_its_message_counter_count_one_message() -> None:
    model = WordModel(responses=["x"])
    text = "the staging DB listens on port 6543"
    assert TokenCounter(model)(text) == 7 + 4
    assert TokenCounter(model.get_num_tokens_from_messages)(text) == 7 + 4
    assert TokenCounter(model.get_num_tokens)(text) == 7
    assert ContextSelector(token_counter=model).count_tokens([text, "a b"]) == [11, 6]


def test_an_annotated_message_counter_is_recognised_by_its_type() -> None:
    seen: list[object] = []

    def per_message(batch: Sequence[BaseMessage]) -> int:
        seen.append(batch)
        return 7 * len(batch)

    assert TokenCounter(per_message)("anything") == 7
    (batch,) = seen
    assert isinstance(batch, list) and [m.content for m in batch] == ["anything"]


def test_the_wrapped_counter_reaches_the_budget() -> None:
    pool = ["alpha beta", "gamma delta", "epsilon zeta"]
    each = count_tokens_approximately([HumanMessage(pool[0])])
    assert each < 10  # counted per character (one message each) it would be 10 or more
    selection = ContextSelector(token_counter=count_tokens_approximately).select(
        pool, "alpha", budget=2 * each
    )
    assert dict(selection.tokens) == {str(i): each for i in range(3)}
    assert selection.tokens_kept == 2 * each and "0" in selection.kept_ids


@pytest.mark.parametrize(
    "bad",
    [
        lambda text, encoding: 0,
        lambda: 0,
        lambda *, text: 0,
    ],
)
def test_a_callable_of_the_wrong_shape_fails_at_construction(bad: object) -> None:
    with pytest.raises(TypeError, match=r"must take one text \(str -> int\) or a list of messages"):
        ContextSelector(token_counter=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="its signature is"):
        PACMSCompressor(10, selector=ContextSelector(token_counter=bad))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must take one text"):
        resolve_token_counter(bad)  # type: ignore[arg-type]


def test_other_callables_still_work() -> None:
    assert TokenCounter(len)("abcd") == 4  # a builtin
    assert TokenCounter(lambda text, scale=2: len(text) * scale)("ab") == 4  # optional extras
    assert TokenCounter(lambda *texts: len(texts[0]))("abc") == 3
    with pytest.raises(TypeError, match="callable or an encoding name"):
        TokenCounter(42)  # type: ignore[arg-type]
