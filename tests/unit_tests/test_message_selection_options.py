"""The options the hook's and middleware's message selection passes to the selector."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pacms_fakes import values_loop

from langchain_pacms import Budget, ContextSelector, Pacms, ToolLoopOptions
from langchain_pacms.integrations.config import SelectionConfig
from langchain_pacms.integrations.runner import SelectionRunner

IN_TURN = ToolLoopOptions(keep_latest_turn=False)


class RecordingSelector(ContextSelector):
    """A real selector that records the strategy and options each ``select`` call resolves."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def select(self, candidates, query, budget, *, strategy=None, **options):  # type: ignore[override]
        # relevant_ids is select's own argument, not a strategy option
        given = {k: v for k, v in options.items() if k != "relevant_ids"}
        self.calls.append(self.resolve_options(strategy, given))
        return super().select(candidates, query, budget, strategy=strategy, **options)


def conversation() -> list[Any]:
    turns: list[Any] = [SystemMessage("You answer questions about the user's trips.")]
    for i in range(12):
        turns.append(HumanMessage(f"Trip {i}: we flew to city number {i} and stayed {i} nights."))
        turns.append(AIMessage(f"Noted trip {i}."))
    turns.append(HumanMessage("How many nights did we stay on trip 7?"))
    return turns


def resolved(
    selector: RecordingSelector, messages: list[Any] | None = None, **config: Any
) -> dict[str, Any]:
    runner = SelectionRunner(
        SelectionConfig(budget=Budget(ratio=0.4), selector=selector, **config), source="test"
    )
    out = runner.run(messages or conversation())
    assert runner.last_selection is not None and len(out) < len(messages or conversation())
    strategy, options = selector.calls[-1]
    assert strategy == "pacms"
    return options


def test_message_selection_leaves_the_profiles_relevance_feedback_off():
    selector = RecordingSelector()
    assert selector.relevance_feedback == 0.6  # the built-in embedder's profile turns it on
    options = resolved(selector)
    assert options["relevance_feedback"] == 0.0
    # the profile's other settings still apply
    assert options["similarity_threshold"] == selector.similarity_threshold == 0.85
    assert options["min_gain"] == selector.min_gain


def test_inside_the_latest_turn_the_profiles_tool_loop_threshold_applies():
    selector = RecordingSelector()
    options = resolved(selector, tool_loop=IN_TURN)
    assert options["similarity_threshold"] == selector.profile.tool_loop_similarity_threshold
    assert options["similarity_threshold"] == 0.3
    # the fill still passes over near-copies only, at the profile's own threshold
    assert options["fill_threshold"] == selector.similarity_threshold == 0.85
    # and the coverage greedy runs to the budget (no gain floor)
    assert options["gain_floor"] == 0.0


@pytest.mark.parametrize("where", ["config", "selector"])
def test_a_tool_loop_setting_the_user_gave_is_kept(where: str):
    given = {"gain_floor": 0.2, "fill_threshold": 0.9}
    if where == "config":
        options = resolved(RecordingSelector(), tool_loop=IN_TURN, strategy=Pacms(**given))
    else:
        options = resolved(RecordingSelector(strategy_options=given), tool_loop=IN_TURN)
    assert options["gain_floor"] == 0.2 and options["fill_threshold"] == 0.9
    assert options["similarity_threshold"] == 0.3  # what the user left unset still applies


def test_a_tool_loop_that_outgrew_the_budget_gets_the_tool_loop_threshold_by_default():
    from langchain_core.messages import ToolMessage

    loop: list[Any] = [SystemMessage("You fix bugs."), HumanMessage("fix the parser")]
    for k in range(8):
        call = {"name": "bash", "args": {"command": f"grep -n tok{k} src"}, "id": f"c{k}"}
        loop += [
            AIMessage(f"step {k}", tool_calls=[call]),
            ToolMessage(f"src/p{k}.py: token {k} " + "parse " * 30, tool_call_id=f"c{k}"),
        ]
    selector = RecordingSelector()
    options = resolved(selector, loop)  # keep_latest_turn="auto": the turn exceeds 40%
    assert options["similarity_threshold"] == 0.3 and options["fill_threshold"] == 0.85
    # a chat whose latest turn fits keeps the retrieval threshold
    assert "fill_threshold" not in resolved(RecordingSelector())


def test_a_conversation_with_earlier_tool_rounds_gets_the_tool_loop_threshold():
    from langchain_core.messages import ToolMessage

    chat: list[Any] = [SystemMessage("You are an airline agent.")]
    for k in range(6):
        call = {"name": "get_reservation", "args": {"reservation_id": f"R{k}X9"}, "id": f"c{k}"}
        chat += [
            HumanMessage(f"Please look at reservation R{k}X9."),
            AIMessage("", tool_calls=[call]),
            ToolMessage(f'{{"id": "R{k}X9", "cabin": "economy"}}', tool_call_id=f"c{k}"),
            AIMessage(f"Reservation R{k}X9 is in economy."),
        ]
    chat.append(HumanMessage("Which reservation was the third one?"))  # the latest turn fits
    options = resolved(RecordingSelector(), chat)
    assert options["similarity_threshold"] == 0.3 and options["fill_threshold"] == 0.85
    assert options["gain_floor"] == 0.0
    # the same rounds without calls (a plain chat) keep the retrieval threshold
    plain = [m for m in chat if not isinstance(m, ToolMessage) and not getattr(m, "tool_calls", 0)]
    options = resolved(RecordingSelector(), plain)
    assert options["similarity_threshold"] == 0.85 and "fill_threshold" not in options


@pytest.mark.parametrize("where", ["config", "selector"])
def test_a_similarity_threshold_set_by_the_user_is_kept(where: str):
    if where == "config":
        options = resolved(
            RecordingSelector(), tool_loop=IN_TURN, strategy=Pacms(similarity_threshold=0.5)
        )
    else:
        options = resolved(
            RecordingSelector(strategy_options={"similarity_threshold": 0.7}), tool_loop=IN_TURN
        )
    assert options["similarity_threshold"] == (0.5 if where == "config" else 0.7)
    assert "fill_threshold" not in options and "gain_floor" not in options


def test_a_profile_without_a_tool_loop_threshold_keeps_its_own():
    from langchain_pacms.embeddings import HashedTfidfEmbeddings
    from langchain_pacms.embeddings.profile import EmbedderProfile

    profile = EmbedderProfile(name="mine", similarity_threshold=0.6, idf_reweighting=True)
    selector = RecordingSelector(embeddings=HashedTfidfEmbeddings(), profile=profile)
    options = resolved(selector, tool_loop=IN_TURN)
    assert options["similarity_threshold"] == 0.6 and "fill_threshold" not in options


@pytest.mark.parametrize("bad", [1.0, -0.1, "0.3", True])
def test_a_bad_history_threshold_fails(bad: Any):
    from langchain_pacms.embeddings.profile import EmbedderProfile

    with pytest.raises(ValueError, match="tool_loop_similarity_threshold must be a number"):
        EmbedderProfile(tool_loop_similarity_threshold=bad)


@pytest.mark.parametrize("where", ["config", "selector"])
def test_relevance_feedback_set_by_the_user_is_kept(where: str):
    if where == "config":
        selector = RecordingSelector()
        options = resolved(selector, strategy=Pacms(relevance_feedback=0.6))
    else:
        selector = RecordingSelector(strategy_options={"relevance_feedback": 0.4})
        options = resolved(selector)
    assert options["relevance_feedback"] == (0.6 if where == "config" else 0.4)


def test_other_strategies_get_no_feedback_option():
    selector = RecordingSelector()
    runner = SelectionRunner(
        SelectionConfig(budget=Budget(ratio=0.4), strategy="topk", selector=selector),
        source="test",
    )
    runner.run(conversation())
    assert selector.calls[-1] == ("topk", {})


def test_tool_rounds_are_selected_by_the_values_they_hold():
    loop = values_loop(8)  # even rounds repeat the task's path; odd ones hold an id of their own
    selector = RecordingSelector()
    runner = SelectionRunner(
        SelectionConfig(budget=Budget(ratio=0.4), selector=selector), source="test"
    )
    out = runner.run(loop)
    options = selector.calls[-1][1]
    assert len(options["values"]) == len(runner.last_selection.candidates)
    assert runner.last_selection.info["coverage"] == "values"
    sent = " ".join(str(m.content) for m in out)
    kept = [k for k in range(7) if f"token {k} " in sent]  # the newest round is mandatory
    assert kept and all(k % 2 for k in kept)  # the rounds with values of their own come first
    # opting out, and a chat without tool rounds, select by the embeddings' similarity
    off = ToolLoopOptions(cover_values=False)
    assert "values" not in resolved(RecordingSelector(), loop, tool_loop=off)
    # options given to pacms are for its embedding coverage: they keep it
    assert "values" not in resolved(RecordingSelector(), loop, strategy=Pacms(gain_floor=0.1))
    assert "values" not in resolved(RecordingSelector())


def test_cover_values_must_be_a_flag():
    with pytest.raises(ValueError, match="cover_values"):
        ToolLoopOptions(cover_values="yes")  # type: ignore[arg-type]


class RefusingSelector(ContextSelector):
    """A selector whose every call fails, as a service that refuses every request does."""

    def select(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise ValueError("refused: strategy_options")

    async def aselect(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise ValueError("refused: strategy_options")


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_selector_that_always_fails_still_gets_a_recency_window(use_async: bool) -> None:
    # its fallback asks the same selector: it fails too, and recency is selected here rather
    # than every message passed through over the budget
    runner = SelectionRunner(SelectionConfig(budget=60, selector=RefusingSelector()))
    messages = conversation()
    sent = await runner.arun(messages) if use_async else runner.run(messages)
    counter = runner.selector.token_counter
    assert len(sent) < len(messages)
    assert sum(counter(str(m.content)) for m in sent) <= 60
    assert sent[0] == messages[0] and sent[-1].content == messages[-1].content
    selection = runner.last_selection
    assert selection is not None and selection.fell_back and "refused" in str(selection.error)


class TimingOutSelector(ContextSelector):
    """A selector that answers each call with its recency fallback, as after a timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def select(self, candidates, query, budget, **options):  # type: ignore[override]
        from langchain_pacms.selector import recency_selection

        self.calls += 1
        selection = recency_selection(candidates, budget, self.token_counter)
        return dataclasses.replace(selection, error="TimeoutError: no answer in 0.5 s")


def test_a_call_asks_a_selector_that_fell_back_once() -> None:
    # every later round of the fit selects by recency here, not by asking (and waiting) again
    rounds = []
    loop = ToolLoopOptions(placeholders=True, keep_latest_turn=False)  # a fit of several rounds
    for budget in range(175, 475, 25):
        selector = TimingOutSelector()
        runner = SelectionRunner(SelectionConfig(budget=budget, selector=selector, tool_loop=loop))
        runner.run(values_loop(12))
        selection = runner.last_selection
        assert selection is not None and selector.calls == 1
        assert selection.fell_back and selection.error == "TimeoutError: no answer in 0.5 s"
        rounds.append(selection.info["rounds"])
    assert max(rounds) > 1  # some budgets took several rounds
