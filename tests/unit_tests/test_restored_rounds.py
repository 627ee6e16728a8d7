"""Rounds restored in place (`reactivate=True`): what the selection keeps, what results say."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.tool import ToolCall

from langchain_pacms.integrations import SelectionConfig, SelectionRunner
from langchain_pacms.lifecycle import RECOVER_TOOL_NAME, restored_note, with_unsent_noted
from langchain_pacms.messages import LIFECYCLE_KEY, sent_tokens

OBJECT = "function:tool:1"
PAYLOAD = "\n".join(f"/srv/a/file_{i}.py: value a-{i * 37}" for i in range(40))
RESTORED = {LIFECYCLE_KEY: {"reactivated": "h1", "by": "r1"}, "pacms_object": OBJECT}


def recovery(call_ids: tuple[str, ...], *, held: bool = True) -> list[BaseMessage]:
    """The AI message recovering ``OBJECT`` once per call id, and each call's result."""
    calls = [ToolCall(name=RECOVER_TOOL_NAME, args={"object_id": OBJECT}, id=c) for c in call_ids]
    notes = [
        ToolMessage(restored_note(OBJECT), tool_call_id=c, name=RECOVER_TOOL_NAME, id=f"n{c}")
        for c in call_ids
    ]
    if held:
        notes = [n.model_copy(update={"additional_kwargs": RESTORED}) for n in notes]
    return [AIMessage("", tool_calls=calls, id="a1"), *notes]


def history(*, folded_again: bool = False) -> list[BaseMessage]:
    """A question, a round restored in place in the second turn, and its recovery."""
    result = ToolMessage(
        PAYLOAD, tool_call_id="c0", name="search", id="t0", additional_kwargs=RESTORED
    )
    if folded_again:  # a later commit folded it again: a stub and a fold mark in its place
        stub = f'[folded: 40 lines; recover_context("{OBJECT}")]'
        mark = {LIFECYCLE_KEY: {"state": "folded", "object": OBJECT}}
        result = result.model_copy(update={"content": stub, "additional_kwargs": mark})
    return [
        HumanMessage("first question " * 30, id="h0"),
        AIMessage("", tool_calls=[ToolCall(name="search", args={"q": "a"}, id="c0")], id="a0"),
        result,
        HumanMessage("second question", id="h1"),
        *recovery(("r1",)),
    ]


def claims(messages: list[BaseMessage]) -> list[str]:
    """The call ids of results that say the round is in the history above."""
    return [
        m.tool_call_id
        for m in messages
        if isinstance(m, ToolMessage) and m.content == restored_note(OBJECT)
    ]


def test_every_result_naming_a_round_left_out_points_at_recover_context() -> None:
    # two recoveries of one object in one message: the mark names only the last call
    messages = [*history()[:4], *recovery(("ra", "rb"))]
    sent = [messages[0], *messages[3:]]  # the restored round left out
    noted = with_unsent_noted(messages, sent)
    assert claims(noted) == []
    pointer = restored_note(OBJECT, sent=False)
    assert [m.content for m in noted if isinstance(m, ToolMessage)] == [pointer, pointer]
    assert claims(with_unsent_noted(messages, messages)) == ["ra", "rb"]  # sent whole: true


def test_a_result_claims_nothing_once_its_round_is_folded_again() -> None:
    messages = history(folded_again=True)
    assert claims(with_unsent_noted(messages, messages)) == []
    assert claims(with_unsent_noted(history(), history())) == ["r1"]


def test_the_selection_keeps_a_recovery_result_when_its_round_does_not_fit() -> None:
    # later steps make the turn too long for the budget: only its newest step must be sent;
    # the recovery's result (the pointer to the round left out) is kept too, while it fits
    def step(n: int) -> list[BaseMessage]:
        output = "\n".join(f"/srv/s{n}/file_{i}.py: value {i * 41}" for i in range(30))
        call = ToolCall(name="search", args={"q": f"s{n}"}, id=f"c{n}")
        return [
            AIMessage("", tool_calls=[call], id=f"a{n}"),
            ToolMessage(output, tool_call_id=f"c{n}", name="search", id=f"t{n}"),
        ]

    messages = [*history(), *step(2), *step(3), *step(4)]
    counter = SelectionRunner(SelectionConfig(budget=1)).selector.token_counter
    budget = sent_tokens([messages[3], *messages[4:6], *messages[-2:]], counter) + 30
    runner = SelectionRunner(SelectionConfig(budget=budget))
    sent = runner.run(messages)
    assert PAYLOAD not in {m.content for m in sent}
    assert restored_note(OBJECT, sent=False) in {m.content for m in sent}
    selection = runner.last_selection
    assert selection is not None
    (note,) = [c for c in selection.candidates if 5 in getattr(c.source, "indices", ())]
    assert note.mandatory  # pinned, not kept by chance


def test_a_pinned_round_gives_way_rather_than_the_budget() -> None:
    # pinned while it fits the room, the round may still not fit what is sent (the note that
    # earlier messages were left out): it goes back to the selection, the budget holds
    counter = SelectionRunner(SelectionConfig(budget=1)).selector.token_counter
    messages = history()
    least = sent_tokens(messages[3:], counter) + sent_tokens(messages[1:3], counter)
    for budget in range(least - 5, least + 20):
        runner = SelectionRunner(SelectionConfig(budget=budget))
        sent = runner.run(messages)
        selection = runner.last_selection
        assert selection is not None and not selection.over_budget
        assert sent_tokens(sent, counter) <= budget
        assert claims(sent) == ([] if PAYLOAD not in {m.content for m in sent} else ["r1"])


def test_every_round_restored_in_the_turn_keeps_its_payload_or_its_pointer() -> None:
    # two rounds restored by two recoveries: the pointers are pinned before the rounds, so
    # a budget too small for both rounds leaves each object its payload or its result
    def restored(n: int, by: str) -> list[BaseMessage]:
        mark = {
            LIFECYCLE_KEY: {"reactivated": "h1", "by": by},
            "pacms_object": f"function:tool:{n}",
        }
        output = "\n".join(f"/srv/r{n}/file_{i}.py: value {i * 13}" for i in range(25))
        call = ToolCall(name="search", args={"q": f"r{n}"}, id=f"c{n}")
        return [
            AIMessage("", tool_calls=[call], id=f"a{n}", additional_kwargs=mark),
            ToolMessage(output, tool_call_id=f"c{n}", id=f"t{n}", additional_kwargs=mark),
        ]

    def recovering(n: int, by: str) -> list[BaseMessage]:
        ask = ToolCall(name=RECOVER_TOOL_NAME, args={"object_id": f"function:tool:{n}"}, id=by)
        mark = {LIFECYCLE_KEY: {"reactivated": "h1", "by": by}}
        note = restored_note(f"function:tool:{n}")
        return [
            AIMessage("", tool_calls=[ask], id=f"ask{by}"),
            ToolMessage(note, tool_call_id=by, id=f"n{by}", additional_kwargs=mark),
        ]

    messages = [
        HumanMessage("first question", id="h0"),
        *restored(1, "r1"),
        *restored(2, "r2"),
        HumanMessage("second question", id="h1"),
        *recovering(1, "r1"),
        *recovering(2, "r2"),
        # a large step between: the turn no longer fits, only its newest step must be sent
        AIMessage("", tool_calls=[ToolCall(name="search", args={"q": "y"}, id="c8")], id="a8"),
        ToolMessage("\n".join(f"row {i}" for i in range(300)), tool_call_id="c8", id="t8"),
        AIMessage("", tool_calls=[ToolCall(name="search", args={"q": "x"}, id="c9")], id="a9"),
        ToolMessage("\n".join(f"line {i}" for i in range(60)), tool_call_id="c9", id="t9"),
    ]
    counter = SelectionRunner(SelectionConfig(budget=1)).selector.token_counter
    rounds = {n: messages[2 * n - 1 : 2 * n + 1] for n in (1, 2)}
    # from the room for the newest step and both recoveries (and the note of what was left out)
    start = sent_tokens([*messages[5:10], *messages[-2:]], counter) + 30
    for budget in range(start, start + 2 * sent_tokens(rounds[2], counter) + 40, 2):
        sent = SelectionRunner(SelectionConfig(budget=budget)).run(messages)
        contents = {str(m.content) for m in sent}
        for n, (_, result) in rounds.items():
            pointer = restored_note(f"function:tool:{n}", sent=False)
            assert str(result.content) in contents or pointer in contents, (budget, n)
