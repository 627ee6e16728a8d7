"""The one validated configuration of the hook and the middleware."""

from __future__ import annotations

import dataclasses
import inspect
from typing import ClassVar

import numpy as np
import pytest
from langchain_core.messages import HumanMessage
from langgraph.store.memory import InMemoryStore

from langchain_pacms import Budget, MemoryOptions, Pacms, StrategyOptions, ToolLoopOptions
from langchain_pacms.core.pacms import pacms
from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.integrations.compressor import PACMSCompressor
from langchain_pacms.integrations.config import AGENT_KEYWORDS, SelectionConfig
from langchain_pacms.integrations.middleware import PACMSMiddleware

BUILDERS = [create_pacms_hook, PACMSMiddleware]


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("typo", ["relevance_wieght", "memory_namespaces", "budget_tokens"])
def test_unknown_keyword_fails_at_construction_naming_it_and_the_valid_ones(build, typo):
    with pytest.raises(TypeError, match=f"unknown keyword: {typo}") as info:
        build(100, **{typo: 0.3})
    message = str(info.value)
    assert all(name in message for name in AGENT_KEYWORDS)
    assert "query_mode" in message and "StrategyOptions" in message  # where the rest went


@pytest.mark.parametrize("build", [*BUILDERS, PACMSCompressor])
def test_the_agent_facing_calls_take_at_most_eight_keywords(build):
    params = inspect.signature(build).parameters.values()
    named = [p.name for p in params if p.kind is not p.VAR_KEYWORD]
    assert len(named) <= 8, named
    assert named[0] == "budget"
    with pytest.raises(TypeError, match="unknown keyword: k"):
        build(100, k=2)


@pytest.mark.parametrize("build", BUILDERS)
def test_strategy_options_checked_against_the_strategy_signature(build):
    build(100, strategy=StrategyOptions("rag", k=2))  # rag(problem, *, k=4)
    with pytest.raises(
        ValueError, match=r"'rag' rejects its options.*unknown option 'lambda_mult'"
    ):
        StrategyOptions("rag", lambda_mult=0.5)
    with pytest.raises(ValueError, match="unknown option 'k'"):
        StrategyOptions("topk", k=1)
    with pytest.raises(ValueError, match="unknown strategy 'nope'"):
        build(100, strategy="nope")


def test_the_pacms_options_object_takes_exactly_the_strategy_options():
    fields = [f.name for f in dataclasses.fields(Pacms)]
    per_call = {"values"}  # what each call's candidates hold, passed by the tool loop
    assert fields == [p for p in list(inspect.signature(pacms).parameters)[1:] if p not in per_call]
    options = Pacms(similarity_threshold=0.3, fill=False)
    assert options.strategy == "pacms" and dict(options.options) == {
        "similarity_threshold": 0.3,
        "fill": False,
    }
    assert options == Pacms(fill=False, similarity_threshold=0.3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.gain_floor = 0.1  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokens": 10, "answer_reserve": -1}, "answer_reserve=...\\) must be an int >= 0"),
        ({"context_window": 100, "answer_reserve": -5}, "answer_reserve"),
        ({"context_window": 100, "fill": 0}, "fill"),
        ({"context_window": 100, "answer_reserve": 100}, "must exceed answer_reserve"),
        ({"tokens": 10, "ratio": 0.5}, "not tokens and ratio"),
        ({}, "give one budget"),
        ({"tokens": 0}, "positive"),
        ({"ratio": 1.5}, "ratio"),
        ({"fraction": True}, "fraction"),
        ({"tokens": 100, "fill": 0.5}, "fill=0.5\\) applies to a context_window budget only"),
        ({"ratio": 0.5, "answer_reserve": 50}, "answer_reserve=50\\) applies to a context_window"),
    ],
)
def test_bad_budgets_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Budget(**kwargs)


@pytest.mark.parametrize(
    "given, expected",
    [
        (2000, Budget(tokens=2000)),
        (np.int64(7), Budget(tokens=7)),
        (("tokens", 2000), Budget(tokens=2000)),
        (("ratio", 0.5), Budget(ratio=0.5)),
        (("fraction", np.float32(0.5)), Budget(fraction=0.5)),
        (Budget(context_window=9000, fill=0.5), Budget(context_window=9000, fill=0.5)),
    ],
)
def test_budget_coerce_takes_a_budget_tokens_and_langchain_tuples(given, expected):
    assert Budget.coerce(given) == expected
    assert isinstance(Budget.coerce(given).resolve(total=10, model=_Model()), int)


@pytest.mark.parametrize("bad", [None, 0.5, True, "2000", ("messages", 10), ("tokens",)])
def test_budget_coerce_rejects_anything_else(bad):
    with pytest.raises(ValueError, match="budget must be"):
        Budget.coerce(bad)


class _Model:
    profile: ClassVar[dict[str, int]] = {"max_input_tokens": 1000}


@pytest.mark.parametrize("build", [*BUILDERS, PACMSCompressor])
def test_a_bad_budget_fails_at_construction(build):
    with pytest.raises(ValueError, match="positive int"):
        build(0)
    with pytest.raises(ValueError, match="needs a budget"):
        build()


def test_memory_and_tool_loop_options_are_checked_when_made():
    with pytest.raises(ValueError, match="non-empty list of namespaces"):
        MemoryOptions(("memories", "u"))  # one namespace, not a list of them
    with pytest.raises(ValueError, match="scan_limit must be a positive int"):
        MemoryOptions([("memories", "u")], scan_limit=0)
    with pytest.raises(ValueError, match="keep_latest_turn"):
        ToolLoopOptions(keep_latest_turn="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        ToolLoopOptions(fold_stubs=True, sidecar_store=InMemoryStore(), placeholders=True)
    with pytest.raises(ValueError, match="memory must be a MemoryOptions"):
        SelectionConfig(budget=Budget(tokens=5), memory=[("memories", "u")])  # type: ignore[arg-type]


def test_the_three_kinds_of_budget():
    msgs = {"messages": [HumanMessage("alpha beta gamma delta " * 10), HumanMessage("q")]}
    for budget, expected in [
        (Budget(tokens=7), 7),
        (Budget(context_window=1200, answer_reserve=200, fill=0.5), 500),
    ]:
        hook = create_pacms_hook(config=SelectionConfig(budget=budget))
        hook.invoke(msgs)
        assert hook.last_selection.budget == expected
    hook = create_pacms_hook(config=SelectionConfig(budget=Budget(ratio=0.25)))
    hook.invoke(msgs)
    assert hook.last_selection.budget == hook.last_selection.tokens_total // 4


def test_keywords_and_config_build_the_same_configuration():
    memory = MemoryOptions([("memories", "{user_id}")], limit=3)
    config = SelectionConfig(
        budget=Budget(tokens=50), strategy=StrategyOptions("rag", k=2), memory=memory
    )
    hook = create_pacms_hook(50, strategy=StrategyOptions("rag", k=2), memory=memory)
    assert hook.runner.config == config
    mw = PACMSMiddleware(config=config)
    assert mw.runner.config is config
    with pytest.raises(ValueError, match="not both"):
        create_pacms_hook(config=config, budget=10)
    assert SelectionConfig(budget=50, strategy="topk").strategy == StrategyOptions("topk")


def test_config_is_frozen():
    config = SelectionConfig(budget=Budget(tokens=50))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.strict = True  # type: ignore[misc]


@pytest.mark.parametrize(
    "conversation",
    [
        [("user", "the staging port is 6543"), ("assistant", "noted"), ("user", "which port?")],
        [
            {"role": "user", "content": "the staging port is 6543"},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": "which port?"},
        ],
    ],
)
async def test_tuples_and_dicts_are_converted_to_messages(conversation):
    hook = create_pacms_hook(budget=100)
    for out in (
        hook.invoke({"messages": conversation})["llm_input_messages"],
        (await hook.ainvoke({"messages": conversation}))["llm_input_messages"],
    ):
        assert [type(m).__name__ for m in out] == ["HumanMessage", "AIMessage", "HumanMessage"]
        assert out[-1].content == "which port?"
    assert hook.last_selection is not None and not hook.last_selection.fell_back


@pytest.mark.parametrize("build", BUILDERS)
async def test_tuples_and_dicts_reach_the_middleware_runner_converted(build):
    runner = build(budget=100).runner
    conversation = [
        ("user", "the staging port is 6543"),
        {"role": "assistant", "content": "ok"},
        ("user", "which port?"),
    ]
    for out in (runner.run(conversation), await runner.arun(conversation)):
        assert [type(m).__name__ for m in out] == ["HumanMessage", "AIMessage", "HumanMessage"]


@pytest.mark.parametrize(
    "messages, message",
    [
        ("hello", "must be a list of messages, got str"),
        ([5], "messages: Unsupported message type"),
        ([("user",)], "messages: Message as a sequence"),
        ([{"content": "no role"}], "messages: Message dict must contain 'role'"),
    ],
)
def test_messages_that_cannot_be_converted_are_a_type_error(messages, message):
    hook = create_pacms_hook(budget=100)
    with pytest.raises(TypeError, match=message):
        hook.invoke({"messages": messages})


@pytest.mark.parametrize("build", BUILDERS)
def test_memory_ceiling_is_an_accepted_validated_option(build):
    config = SelectionConfig(budget=10, memory_ceiling_bytes=2**20)
    assert config.memory_ceiling_bytes == 2**20
    assert SelectionConfig(budget=10).memory_ceiling_bytes is None
    build(config=config)  # accepted, not an unknown option
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="memory_ceiling_bytes"):
            SelectionConfig(budget=10, memory_ceiling_bytes=bad)


def test_bad_strategy_option_values_fail_at_construction_not_on_every_call():
    with pytest.raises(ValueError, match=r"strategy 'rag' rejects its options \{'k': 0\}"):
        create_pacms_hook(100, strategy=StrategyOptions("rag", k=0))
    with pytest.raises(ValueError, match="experimental_auto_relevance_weight"):
        create_pacms_hook(100, strategy=Pacms(relevance_weight="auto"))  # type: ignore[arg-type]
