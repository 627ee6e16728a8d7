"""The one validated configuration of the hook and the middleware."""

from __future__ import annotations

import dataclasses

import pytest
from langchain_core.messages import HumanMessage

from langchain_pacms.integrations import create_pacms_hook
from langchain_pacms.integrations.config import Budget, SelectionConfig
from langchain_pacms.integrations.middleware import PACMSMiddleware

BUILDERS = [create_pacms_hook, PACMSMiddleware]


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("typo", ["relevance_wieght", "memory_namespace"])
def test_unknown_option_fails_at_construction_naming_it_and_the_valid_ones(build, typo):
    with pytest.raises(ValueError, match=f"unknown option '{typo}'") as info:
        build(budget_tokens=100, **{typo: 0.3})
    message = str(info.value)
    assert "memory_namespaces" in message and "relevance_weight" in message


@pytest.mark.parametrize("build", BUILDERS)
def test_strategy_options_checked_against_the_strategy_signature(build):
    build(budget_tokens=100, strategy="rag", k=2)  # rag(problem, *, k=4)
    with pytest.raises(ValueError, match=r"unknown option 'lambda_mult'.*'rag'"):
        build(budget_tokens=100, strategy="rag", lambda_mult=0.5)
    with pytest.raises(ValueError, match="unknown option 'k'"):
        SelectionConfig(budget=Budget(tokens=5), strategy="topk", strategy_options={"k": 1})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tokens": 10, "answer_reserve": -1}, "answer_reserve must be >= 0"),
        ({"context_window": 100, "answer_reserve": -5}, "answer_reserve must be >= 0"),
        ({"context_window": 100, "fill": 0}, "fill"),
        ({"tokens": 10, "ratio": 0.5}, "not both"),
        ({}, "budget_tokens, budget_ratio or context_window"),
        ({"tokens": 0}, "positive"),
    ],
)
def test_bad_budgets_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Budget(**kwargs)


@pytest.mark.parametrize("build", BUILDERS)
def test_negative_answer_reserve_rejected_by_the_hook_and_the_middleware(build):
    with pytest.raises(ValueError, match="answer_reserve must be >= 0"):
        build(context_window=1000, answer_reserve=-100)


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
    config = SelectionConfig(
        budget=Budget(tokens=50), strategy="rag", strategy_options={"k": 2}, memory_limit=3
    )
    hook = create_pacms_hook(budget_tokens=50, strategy="rag", k=2, memory_limit=3)
    assert hook.runner.config == config
    mw = PACMSMiddleware(config=config)
    assert mw.runner.config is config
    with pytest.raises(ValueError, match="not both"):
        create_pacms_hook(config=config, budget_tokens=10)


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
    hook = create_pacms_hook(budget_tokens=100)
    for out in (
        hook.invoke({"messages": conversation})["llm_input_messages"],
        (await hook.ainvoke({"messages": conversation}))["llm_input_messages"],
    ):
        assert [type(m).__name__ for m in out] == ["HumanMessage", "AIMessage", "HumanMessage"]
        assert out[-1].content == "which port?"
    assert hook.last_selection is not None and not hook.last_selection.fell_back


@pytest.mark.parametrize("build", BUILDERS)
async def test_tuples_and_dicts_reach_the_middleware_runner_converted(build):
    runner = build(budget_tokens=100).runner
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
    hook = create_pacms_hook(budget_tokens=100)
    with pytest.raises(TypeError, match=message):
        hook.invoke({"messages": messages})


@pytest.mark.parametrize("build", BUILDERS)
def test_memory_ceiling_is_an_accepted_validated_option(build):
    config = SelectionConfig.from_options(budget_tokens=10, memory_ceiling_bytes=2**20)
    assert config.memory_ceiling_bytes == 2**20
    assert SelectionConfig.from_options(budget_tokens=10).memory_ceiling_bytes is None
    build(budget_tokens=10, memory_ceiling_bytes=2**20)  # accepted, not an unknown option
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="memory_ceiling_bytes"):
            build(budget_tokens=10, memory_ceiling_bytes=bad)


def test_bad_strategy_option_values_fail_at_construction_not_on_every_call():
    from langchain_pacms.integrations import create_pacms_hook

    with pytest.raises(ValueError, match=r"strategy 'rag' rejects its options \{'k': 0\}"):
        create_pacms_hook(budget_tokens=100, strategy="rag", k=0)
    with pytest.raises(ValueError, match="experimental_auto_relevance_weight"):
        create_pacms_hook(budget_tokens=100, relevance_weight="auto")
