"""Fold stubs as a variant of dropped tool spans: options, candidates, alternatives, sidecars."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from pacms_fakes import assert_provider_valid, slow_examples
from test_messages import SELECTOR, STRATEGIES, call, conversations, text

from langchain_pacms.integrations import SelectionConfig, ToolLoopOptions, create_pacms_hook
from langchain_pacms.lifecycle import Action, SidecarStore, apply_actions, index_messages
from langchain_pacms.lifecycle.fold import call_texts
from langchain_pacms.lifecycle.variants import FoldMemo, fold_variants
from langchain_pacms.messages import (
    LIFECYCLE_KEY,
    messages_to_candidates,
    payload_of,
    sent_tokens,
    thread_of,
)


def tool_loop(outputs: list[list[str]]) -> list[BaseMessage]:
    """A task, then one AI message per step calling one tool per output of that step.

    The commands read no file (the newest read of a file counts as reused, which would put
    every span first in the floor).
    """
    msgs: list[BaseMessage] = [SystemMessage("You fix bugs."), HumanMessage("fix src/app.py")]
    for step, results in enumerate(outputs):
        calls = [
            call("bash", f"c{step}_{k}", cmd=f"wc -l f{step}_{k}.py") for k in range(len(results))
        ]
        msgs.append(AIMessage(f"step {step}", tool_calls=calls))
        msgs += [ToolMessage(r, tool_call_id=c["id"]) for r, c in zip(results, calls, strict=True)]
    return msgs


LOOP = tool_loop([[f"/srv/out{k}.json " + "word " * 80] for k in range(6)])


def is_stub(message: BaseMessage) -> bool:
    return (message.additional_kwargs.get(LIFECYCLE_KEY) or {}).get("state") == "folded"


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"fold_stubs": True}, "needs sidecar_store"),
        ({"sidecar_store": InMemoryStore(), "fold_stubs": False}, "leave sidecar_store out"),
        (
            {"sidecar_store": InMemoryStore(), "placeholders": True},
            "exclude placeholders=True",
        ),
        ({"fold_stubs": True, "sidecar_store": {}}, "must be a langgraph BaseStore"),
        (
            {"fold_stubs": True, "sidecar_store": InMemoryStore(), "placeholders": True},
            "not both",
        ),
        ({"fold_stubs": "yes", "sidecar_store": InMemoryStore()}, "True or False"),
    ],
)
def test_bad_fold_stub_options_fail_at_construction(options, error):
    with pytest.raises(ValueError, match=error):
        ToolLoopOptions(**options)


# -- variants and candidates ---------------------------------------------------------------------
def test_fold_variants_follow_the_lifecycle_ids_and_payloads():
    variants = fold_variants(LOOP)
    assert sorted(variants) == [2, 4, 6, 8, 10, 12]
    for n, (i, variant) in enumerate(sorted(variants.items()), start=1):
        assert variant.record.object_id == f"function:tool:{n}"
        payload = json.loads(variant.record.payload)  # the call's text is folded with the span
        assert payload["text"] == f"step {n - 1}" and payload["results"] == payload_of(
            LOOP, (i, i + 1)
        )
        head = variant.messages[0]
        assert head.content == "" and head.tool_calls == LOOP[i].tool_calls  # the calls stay
        stub = str(variant.messages[1].content)
        assert stub.startswith(f'[folded: 1 line; recover_context("function:tool:{n}")')
        assert f"/srv/out{n - 1}.json" in stub
    assert LOOP[3].content.startswith("/srv/out0.json")  # the input is untouched
    assert LOOP[2].content == "step 0"


@pytest.mark.parametrize("with_ids", [True, False])
def test_one_memo_over_two_histories_with_the_same_contents_keeps_each_spans_own(with_ids):
    # two threads (or two branches of a fork) that made the same calls with the same results:
    # each variant keeps its own history's messages and the payload its recovery checks
    def history(tag: str) -> list[BaseMessage]:
        read = {"name": "read_file", "args": {"path": "src/a.py"}, "id": f"call-{tag}"}
        return [
            HumanMessage("review src/a.py", id=f"h-{tag}" if with_ids else None),
            AIMessage("reading", tool_calls=[read], id=f"a-{tag}" if with_ids else None),
            ToolMessage(
                "x = 1\n" * 40, tool_call_id=f"call-{tag}", id=f"t-{tag}" if with_ids else None
            ),
            HumanMessage("next", id=f"n-{tag}" if with_ids else None),
        ]

    memo = FoldMemo()
    for tag in ("a", "b"):
        messages = history(tag)
        (variant,) = fold_variants(messages, memo=memo).values()
        assert [m.id for m in variant.messages] == [m.id for m in messages[1:3]]
        assert variant.messages[0].tool_calls[0]["id"] == f"call-{tag}"
        assert variant.messages[1].tool_call_id == f"call-{tag}"
        (obj,) = [o for o in index_messages(messages).objects if o.kind == "tool"]
        assert variant.record.sha256 == fold_variants(messages)[1].record.sha256  # no memo
        assert json.loads(variant.record.payload)["tool_calls"][0]["id"] == f"call-{tag}"
        assert variant.record.object_id == obj.id


def test_fold_variants_leave_a_call_without_text_or_when_asked():
    quiet = [m.model_copy(update={"content": ""}) if isinstance(m, AIMessage) else m for m in LOOP]
    for msgs, variants in ((quiet, fold_variants(quiet)), (LOOP, fold_variants(LOOP, calls=False))):
        for i, variant in variants.items():
            assert variant.messages[0] is msgs[i]  # the call goes out unchanged
            assert variant.record.payload == payload_of(msgs, (i, i + 1))


def test_an_already_folded_span_gets_no_second_stub():
    folded = list(LOOP)
    folded[2:4] = fold_variants(LOOP)[2].messages
    assert 2 not in fold_variants(folded) and 4 in fold_variants(folded)


def test_a_fold_variant_is_offered_for_optional_answered_spans_only():
    msgs = [*LOOP, AIMessage("", tool_calls=[call("bash", "open", cmd="ls")])]  # no result
    stubs = {i: v.messages for i, v in fold_variants(msgs).items()}
    cands, spans = messages_to_candidates(
        msgs, fold_stubs=stubs, keep_latest_turn=False, token_counter=SELECTOR.token_counter
    )
    ids = [c.id for c in cands]
    assert ids[:4] == ["m0", "m1", "t2:fold", "t2"]
    assert "t14:fold" not in ids  # the newest span is mandatory: kept whole
    by_id = {s.id: s for s in spans}
    assert by_id["t2:fold"].full_id == "t2" and by_id["t2:fold"].stub
    cost = {c.id: c.tokens for c in cands}
    assert cost["t2:fold"] == sent_tokens(stubs[2], SELECTOR.token_counter) < cost["t2"]


# -- the hook ------------------------------------------------------------------------------------
def assert_within_budget(sent: int, budget: int, selection: Any) -> None:
    """Past the budget only when the mandatory part alone is: then no floor of stubs either."""
    assert sent <= budget or (
        selection.over_budget
        and not selection.info["stub_floor"]
        and all(c.mandatory for c in selection.kept)
    )


@st.composite
def tool_loops(draw: st.DrawFn) -> list[BaseMessage]:
    steps = draw(st.lists(st.lists(text, min_size=1, max_size=3), min_size=1, max_size=10))
    pad = " word" * draw(st.integers(0, 40))  # long outputs have stubs cheaper than themselves
    # an output may name the file an earlier call read (its stub leaves it out: the call shows it)
    outputs = [
        [
            f"{t} /tmp/{s}_{k}.log id-{s}{k}" + (f" f{s - 1}_0.py" if s and k == 0 else "") + pad
            for k, t in enumerate(step)
        ]
        for s, step in enumerate(steps)
    ]
    msgs = tool_loop(outputs)
    if draw(st.booleans()):  # later turns: earlier spans are optional under any setting
        msgs += [AIMessage("done"), *draw(conversations())]
    return msgs


def _spans(out: list[BaseMessage]) -> list[tuple[AIMessage, list[ToolMessage]]]:
    groups: list[tuple[AIMessage, list[ToolMessage]]] = []
    for m in out:
        if isinstance(m, AIMessage) and m.tool_calls:
            groups.append((m, []))
        elif isinstance(m, ToolMessage):
            groups[-1][1].append(m)
    return groups


@slow_examples(40)
@given(
    messages=tool_loops(),
    budget=st.integers(1, 900),
    strategy=st.sampled_from(STRATEGIES),
    keep=st.sampled_from([True, False, "auto"]),
)
def test_a_span_and_its_stub_are_alternatives(messages, budget, strategy, keep):
    store = InMemoryStore()
    hook = create_pacms_hook(
        budget,
        strategy=strategy,
        selector=SELECTOR,
        tool_loop=ToolLoopOptions(keep_latest_turn=keep, fold_stubs=True, sidecar_store=store),
    )
    out = hook.invoke({"messages": messages})["llm_input_messages"]
    assert_provider_valid(out)
    selection = hook.last_selection
    kept = set(selection.kept_ids)
    assert not any(k.endswith(":fold") and k.removesuffix(":fold") in kept for k in kept)
    sent = sent_tokens(out, SELECTOR.token_counter)
    assert sent == selection.info["tokens_sent"]
    assert_within_budget(sent, budget, selection)
    # what a sent stub left out as shown elsewhere is in view: elsewhere, or in the stub again
    seen = "\n".join(
        str(m.content) + json.dumps([c["args"] for c in getattr(m, "tool_calls", [])]) for m in out
    )
    for m in out:
        for value in (m.additional_kwargs.get(LIFECYCLE_KEY) or {}).get("elsewhere", ()):
            assert value in seen
    sidecars = SidecarStore(store, thread_of(None, messages))  # no thread id: the run's own
    originals = {id(m) for m in messages}
    for call_message, results in _spans(out):
        stubbed = [is_stub(r) for r in results]
        assert all(stubbed) or not any(stubbed)  # never split: all results whole, or the stub
        first = next(
            i
            for i, m in enumerate(messages)
            if isinstance(m, AIMessage) and m.tool_calls == call_message.tool_calls
        )
        assert call_message.tool_calls and (id(call_message) in originals or stubbed[0])
        if stubbed[0]:
            object_id = results[0].additional_kwargs[LIFECYCLE_KEY]["object"]
            indices = [
                first,
                *(
                    i
                    for i, m in enumerate(messages)
                    if isinstance(m, ToolMessage)
                    and any(m.tool_call_id == c["id"] for c in call_message.tool_calls)
                ),
            ]
            record = sidecars.get(object_id)
            if any(call_texts(messages[first])):  # the call's text is folded with its results
                payload = json.loads(record.payload)
                assert payload["text"] == messages[first].content
                assert payload["results"] == payload_of(messages, indices)
            else:  # a call with neither text nor long arguments stays: the results alone
                assert record.payload == payload_of(messages, indices)
        else:
            assert all(
                id(r) in originals or "no result was recorded" in str(r.content) for r in results
            )
    assert sorted(sidecars.list_ids()) == sorted(
        r.additional_kwargs[LIFECYCLE_KEY]["object"]
        for _, rs in _spans(out)
        for r in rs[:1]
        if is_stub(r)
    )


@st.composite
def loops_naming_earlier_files(draw: st.DrawFn) -> list[BaseMessage]:
    """Tool loops whose outputs name the files the earlier calls read, but for the newest."""
    steps = draw(st.integers(2, 10))
    pad = " word" * draw(st.integers(0, 40))
    return tool_loop(
        [
            *(
                [" ".join(f"f{j}_0.py" for j in range(s)) + f" /tmp/{s}.log" + pad]
                for s in range(steps)
            ),
            ["done /tmp/end.log"],
        ]
    )


@slow_examples(40)
@given(
    messages=loops_naming_earlier_files(),
    data=st.data(),
    budget=st.integers(1, 900),
    strategy=st.sampled_from(STRATEGIES),
    keep=st.sampled_from([True, False, "auto"]),
)
def test_the_budget_holds_over_spans_the_lifecycle_folded(messages, data, budget, strategy, keep):
    # a folded span is its own floor, and its stub shows again the locators it left out (the
    # files earlier calls read) when those calls are dropped: more than it was priced at
    spans = [o for o in index_messages(messages).objects if o.kind == "tool"][:-1]
    folds = data.draw(st.lists(st.sampled_from(spans), unique=True)) if spans else []
    folded = apply_actions(
        messages, index_messages(messages), [Action("fold", o.id) for o in folds]
    ).messages
    stubs = ToolLoopOptions(keep_latest_turn=keep, fold_stubs=True, sidecar_store=InMemoryStore())
    hook = create_pacms_hook(budget, strategy=strategy, selector=SELECTOR, tool_loop=stubs)
    out = hook.invoke({"messages": folded})["llm_input_messages"]
    assert_provider_valid(out)
    selection = hook.last_selection
    sent = sent_tokens(out, SELECTOR.token_counter)
    assert sent == selection.info["tokens_sent"]
    assert_within_budget(sent, budget, selection)


async def test_async_hook_writes_the_stub_payloads_before_returning():
    store = InMemoryStore()
    hook = create_pacms_hook(260, tool_loop=ToolLoopOptions(sidecar_store=store))
    out = (await hook.ainvoke({"messages": LOOP}, {"configurable": {"thread_id": "t-9"}}))[
        "llm_input_messages"
    ]
    stubs = [m for m in out if is_stub(m) and isinstance(m, ToolMessage)]
    assert stubs and sent_tokens(out, hook.selector.token_counter) <= 260
    sidecars = SidecarStore(store, "t-9")
    for stub in stubs:
        record = await sidecars.aget(stub.additional_kwargs[LIFECYCLE_KEY]["object"])
        original = next(m for m in LOOP if getattr(m, "tool_call_id", None) == stub.tool_call_id)
        assert json.loads(record.payload)["results"] == original.content


class BrokenStore(InMemoryStore):
    """A store whose writes fail."""

    def batch(self, ops: Any) -> Any:
        raise OSError("disk full")


def test_a_failed_sidecar_write_sends_no_stub():
    store: BaseStore = BrokenStore()
    stubs = ToolLoopOptions(fold_stubs=True, sidecar_store=store)
    hook = create_pacms_hook(260, tool_loop=stubs)
    out = hook.invoke({"messages": LOOP})["llm_input_messages"]
    assert not any(is_stub(m) for m in out)  # recency fallback, without variants
    assert_provider_valid(out)
    strict = create_pacms_hook(config=SelectionConfig(budget=260, tool_loop=stubs, strict=True))
    with pytest.raises(OSError, match="disk full"):
        strict.invoke({"messages": LOOP})


# -- stubs as the floor --------------------------------------------------------------------------
def _sent_rounds(out: list[BaseMessage]) -> dict[str, str]:
    """``tool_call_id -> "whole" | "stub"`` for every tool round that is sent."""
    return {
        r.tool_call_id: "stub" if is_stub(r) else "whole"
        for _, results in _spans(out)
        for r in results
    }


def _floor_hook(budget: int) -> Any:
    stubs = ToolLoopOptions(keep_latest_turn=False, fold_stubs=True, sidecar_store=InMemoryStore())
    return create_pacms_hook(budget, selector=SELECTOR, tool_loop=stubs)


def test_when_every_stub_fits_no_tool_round_vanishes():
    stubs = fold_variants(LOOP, token_counter=SELECTOR.token_counter)
    floor = sum(
        sent_tokens(v.messages, SELECTOR.token_counter) for i, v in stubs.items() if i != 12
    )  # the newest round is mandatory, whole
    whole = sent_tokens(LOOP[:2] + LOOP[12:], SELECTOR.token_counter)
    hook = _floor_hook(whole + floor + 40)
    out = hook.invoke({"messages": LOOP})["llm_input_messages"]
    rounds = _sent_rounds(out)
    assert len(rounds) == 6 and rounds["c5_0"] == "whole"
    assert "stub" in rounds.values()
    assert hook.last_selection.info["stub_floor"] is True
    assert sent_tokens(out, SELECTOR.token_counter) <= whole + floor + 40
    # a round sent whole replaces its stub: the selection holds one of the two, never both
    selection = hook.last_selection
    kept = set(selection.kept_ids)
    assert not any(f"{k}:fold" in kept for k in kept)
    # and it reports every candidate at its full cost, not at what it adds to its stub
    cands, _ = messages_to_candidates(
        LOOP,
        fold_stubs={i: v.messages for i, v in stubs.items()},
        keep_latest_turn=False,
        token_counter=SELECTOR.token_counter,
    )
    assert selection.tokens == {c.id: c.tokens for c in cands}
    assert selection.tokens_kept == sum(selection.tokens[k] for k in kept)


def test_when_the_stubs_do_not_all_fit_the_oldest_go_first():
    # the first outputs of a tool loop (listings, searches) name what later steps open
    stubs = fold_variants(LOOP, token_counter=SELECTOR.token_counter)
    cost = {i: sent_tokens(v.messages, SELECTOR.token_counter) for i, v in stubs.items()}
    whole = sent_tokens(LOOP[:2] + LOOP[12:], SELECTOR.token_counter)
    hook = _floor_hook(whole + cost[2] + cost[4] + 5)  # room for two stubs, not three
    out = hook.invoke({"messages": LOOP})["llm_input_messages"]
    rounds = _sent_rounds(out)
    assert rounds == {"c0_0": "stub", "c1_0": "stub", "c5_0": "whole"}
    assert hook.last_selection.info["stub_floor"] is True


def test_a_stub_too_large_for_what_is_left_is_passed_over_for_newer_ones_that_fit():
    loop = list(LOOP)  # the second round's output names many paths: its stub is the largest
    loop[5] = ToolMessage(" ".join(f"/srv/d{k}/f{k}.json" for k in range(40)), tool_call_id="c1_0")
    stubs = fold_variants(loop, token_counter=SELECTOR.token_counter)
    cost = {i: sent_tokens(v.messages, SELECTOR.token_counter) for i, v in stubs.items()}
    assert cost[4] > cost[6] + cost[8] + 5
    whole = sent_tokens(loop[:2] + loop[12:], SELECTOR.token_counter)
    hook = _floor_hook(whole + cost[2] + cost[6] + 5)
    rounds = _sent_rounds(hook.invoke({"messages": loop})["llm_input_messages"])
    assert rounds == {"c0_0": "stub", "c2_0": "stub", "c5_0": "whole"}


def test_a_record_later_calls_used_takes_the_floor_before_older_stubs():
    loop = list(LOOP)
    loop[9] = ToolMessage("/srv/out3.json booking HAT039 " + "word " * 80, tool_call_id="c3_0")
    loop[10] = AIMessage("step 4", tool_calls=[call("bash", "c4_0", cmd="get HAT039")])
    stubs = fold_variants(loop, token_counter=SELECTOR.token_counter)
    cost = {i: sent_tokens(v.messages, SELECTOR.token_counter) for i, v in stubs.items()}
    whole = sent_tokens(loop[:2] + loop[12:], SELECTOR.token_counter)
    hook = _floor_hook(whole + cost[8] + cost[2] + 5)  # room for two stubs, not three
    rounds = _sent_rounds(hook.invoke({"messages": loop})["llm_input_messages"])
    # the fourth output's id went into a later call: its stub goes first, then the oldest
    assert rounds == {"c0_0": "stub", "c3_0": "stub", "c5_0": "whole"}
    # an id the task message states is no sign of reuse: oldest first again
    loop[1] = HumanMessage("fix booking HAT039")
    rounds = _sent_rounds(hook.invoke({"messages": loop})["llm_input_messages"])
    assert rounds == {"c0_0": "stub", "c1_0": "stub", "c5_0": "whole"}


def test_spans_the_lifecycle_folded_are_their_own_floor():
    index = index_messages(LOOP)
    spans = [o for o in index.objects if o.kind == "tool"][:-1]
    folded = apply_actions(LOOP, index, [Action("fold", o.id) for o in spans]).messages
    assert set(fold_variants(folded)) == {12}  # a stub variant for the newest span alone
    cost = {i: sent_tokens(folded[i : i + 2], SELECTOR.token_counter) for i in (2, 4, 6)}
    whole = sent_tokens(folded[:2] + folded[12:], SELECTOR.token_counter)
    hook = _floor_hook(whole + cost[2] + cost[4] + 5)
    out = hook.invoke({"messages": folded})["llm_input_messages"]
    assert hook.last_selection.info["stub_floor"] is True
    assert _sent_rounds(out) == {"c0_0": "stub", "c1_0": "stub", "c5_0": "whole"}


def test_a_stub_leaves_out_what_the_history_before_it_shows_and_gets_it_back_when_dropped():
    loop = list(LOOP)
    loop[2] = AIMessage("step 0", tool_calls=[call("bash", "c0_0", cmd="get HAT039")])
    # the first output names many paths: its stub is too large for the budget below
    loop[3] = ToolMessage(" ".join(f"/srv/d{k}/f{k}.json" for k in range(40)), tool_call_id="c0_0")
    loop[5] = ToolMessage("/srv/out1.json booking HAT039 " + "word " * 80, tool_call_id="c1_0")
    variant = fold_variants(loop, token_counter=SELECTOR.token_counter)[4]
    stub = variant.messages[1]
    assert "HAT039" not in str(stub.content) and "/srv/out1.json" in str(stub.content)
    assert stub.additional_kwargs[LIFECYCLE_KEY]["elsewhere"] == ["HAT039"]
    # what the history after the span shows does not count: the stub stays as it was
    reread = call("bash", "c6_0", cmd="cat /srv/out1.json")
    longer = [
        *loop,
        AIMessage("step 6", tool_calls=[reread]),
        ToolMessage("done", tool_call_id="c6_0"),
    ]
    assert fold_variants(longer, token_counter=SELECTOR.token_counter)[4].messages[1].content == (
        stub.content
    )
    # room for one small stub: the first step is not sent, so the stub of step 1 shows HAT039
    # again
    stubs = fold_variants(loop, token_counter=SELECTOR.token_counter)
    cost = {i: sent_tokens(v.messages, SELECTOR.token_counter) for i, v in stubs.items()}
    assert cost[2] > cost[4] + 12
    whole = sent_tokens(loop[:2] + loop[12:], SELECTOR.token_counter)
    hook = _floor_hook(whole + cost[4] + 12)
    out = hook.invoke({"messages": loop})["llm_input_messages"]
    assert _sent_rounds(out) == {"c1_0": "stub", "c5_0": "whole"}
    sent = next(m for m in out if isinstance(m, ToolMessage) and m.tool_call_id == "c1_0")
    assert str(sent.content).endswith(", HAT039]")
    assert sent_tokens(out, SELECTOR.token_counter) <= hook.last_selection.budget


def test_a_folded_record_whose_ids_later_calls_show_goes_first_and_keeps_them_in_view():
    # the lifecycle's stub of the first output leaves out HAT039: a later call shows it
    loop = list(LOOP)
    loop[7] = ToolMessage("/srv/out2.json booking HAT039 " + "word " * 80, tool_call_id="c2_0")
    loop[8] = AIMessage("step 3", tool_calls=[call("bash", "c3_0", cmd="get HAT039")])
    index = index_messages(loop)
    spans = [o for o in index.objects if o.kind == "tool"][:-1]
    folded = apply_actions(loop, index, [Action("fold", o.id) for o in spans]).messages
    assert "HAT039" not in str(folded[7].content)
    assert folded[7].additional_kwargs[LIFECYCLE_KEY]["elsewhere"] == ["HAT039"]
    cost = {i: sent_tokens(folded[i : i + 2], SELECTOR.token_counter) for i in (2, 6)}
    whole = sent_tokens(folded[:2] + folded[12:], SELECTOR.token_counter)
    hook = _floor_hook(whole + cost[2] + cost[6] + 12)  # two floors and a few tokens
    out = hook.invoke({"messages": folded})["llm_input_messages"]
    # its values went into a later call: it takes the floor before the older stubs
    assert _sent_rounds(out) == {"c0_0": "stub", "c2_0": "stub", "c5_0": "whole"}
    # the call that showed HAT039 is not sent, so the stub shows it again, within the budget
    stub = next(m for m in out if isinstance(m, ToolMessage) and m.tool_call_id == "c2_0")
    assert str(stub.content).endswith(", HAT039]") and "HAT039" not in str(folded[7].content)
    assert sent_tokens(out, SELECTOR.token_counter) <= hook.last_selection.budget


def test_without_fold_stubs_there_is_no_floor():
    hook = create_pacms_hook(
        400, selector=SELECTOR, tool_loop=ToolLoopOptions(keep_latest_turn=False)
    )
    hook.invoke({"messages": LOOP})
    assert hook.last_selection.info["stub_floor"] is False


# -- the memo between calls ----------------------------------------------------------------------
def test_the_memo_returns_the_same_variants_and_refolds_a_changed_span():
    memo = FoldMemo(max_entries=100)
    first = fold_variants(LOOP, memo=memo)
    again = fold_variants(LOOP, memo=memo)
    assert all(again[i] is first[i] for i in first) and len(memo) == 6
    edited = list(LOOP)
    edited[3] = ToolMessage("/srv/other.json changed", tool_call_id=LOOP[3].tool_call_id)
    changed = fold_variants(edited, memo=memo)
    assert changed[2] is not first[2] and "/srv/other.json" in str(changed[2].messages[1].content)
    assert all(changed[i] is first[i] for i in first if i != 2)
    fresh = fold_variants(edited)
    assert [(v.record, [m.content for m in v.messages]) for v in changed.values()] == [
        (v.record, [m.content for m in v.messages]) for v in fresh.values()
    ]


def _stub_texts(variants: dict[int, Any]) -> list[tuple[Any, list[Any]]]:
    return [(v.record, [m.content for m in v.messages]) for v in variants.values()]


def test_one_memo_for_two_threads_stubs_each_from_its_own_history():
    # the same call and output first in both threads; one task names a path the output holds,
    # so that thread's stub leaves it out as shown, and the other's must still show it
    def thread(task: str) -> list[BaseMessage]:
        out = "\n".join(f"src/pkg/mod{i}.py:{i}: parse(x)" for i in range(6))
        return [
            SystemMessage("You fix bugs."),
            HumanMessage(task),
            AIMessage("", tool_calls=[call("bash", "c1", command="grep -rn parse src")]),
            ToolMessage(out, tool_call_id="c1"),
        ]

    memo = FoldMemo()
    named, plain = thread("fix the parser; see src/pkg/mod3.py"), thread("fix the parser")
    assert "src/pkg/mod3.py" not in str(fold_variants(named, memo=memo)[2].messages[1].content)
    shared = fold_variants(plain, memo=memo)
    assert "src/pkg/mod3.py" in str(shared[2].messages[1].content)
    assert _stub_texts(shared) == _stub_texts(fold_variants(plain))


@slow_examples(40)
@given(st.lists(conversations(), min_size=2, max_size=4))
def test_a_memo_shared_by_threads_gives_each_its_fresh_variants(threads):
    memo = FoldMemo()
    for msgs in threads:
        assert _stub_texts(fold_variants(msgs, memo=memo)) == _stub_texts(fold_variants(msgs))


_PATHS = [f"src/pkg/mod{i}.py" for i in range(6)]


@slow_examples(40)
@given(
    st.lists(
        st.tuples(st.frozensets(st.sampled_from(_PATHS)), st.lists(st.sampled_from(_PATHS))),
        min_size=2,
        max_size=4,
    )
)
def test_threads_with_the_same_rounds_and_other_tasks_get_their_own_stubs(threads):
    # every thread runs the same tool rounds (so the same ids and payloads); their tasks name
    # other paths, which each thread's stubs leave out as shown, or must list
    rounds = [["\n".join(f"{p}:{k}: parse(x)" for p in _PATHS[k:] + _PATHS[:k])] for k in range(3)]
    memo = FoldMemo()
    for named, mentioned in threads:
        msgs = tool_loop(rounds)
        msgs[1] = HumanMessage(
            f"fix the parser; see {' '.join(sorted(named))} {' '.join(mentioned)}"
        )
        assert _stub_texts(fold_variants(msgs, memo=memo)) == _stub_texts(fold_variants(msgs))


def test_the_memo_forgets_the_least_recently_used():
    memo = FoldMemo(max_entries=2)
    fold_variants(LOOP, memo=memo)
    assert len(memo) == 2
    with pytest.raises(ValueError, match="max_entries"):
        FoldMemo(max_entries=0)


def test_a_growing_loop_selects_as_a_fresh_hook_does():
    store = InMemoryStore()
    hook = create_pacms_hook(500, selector=SELECTOR, tool_loop=ToolLoopOptions(sidecar_store=store))
    for end in range(4, len(LOOP) + 1, 2):
        grown = hook.invoke({"messages": LOOP[:end]})["llm_input_messages"]
        fresh = create_pacms_hook(
            500, selector=SELECTOR, tool_loop=ToolLoopOptions(sidecar_store=InMemoryStore())
        )
        alone = fresh.invoke({"messages": LOOP[:end]})["llm_input_messages"]
        assert [(type(m), m.content) for m in grown] == [(type(m), m.content) for m in alone]


def test_a_sidecar_store_turns_fold_stubs_on_by_default():
    store = InMemoryStore()
    assert ToolLoopOptions(sidecar_store=store).fold_stubs is True
    assert ToolLoopOptions().fold_stubs is False
    assert SelectionConfig(budget=100).tool_loop.fold_stubs is False


def test_the_memo_holds_a_bounded_number_of_characters():
    memo = FoldMemo(max_chars=20_000)
    big = tool_loop([["x" * 3_000 + f" src/f{k}.py"] for k in range(12)])
    fold_variants(big, memo=memo)
    assert 0 < memo.nbytes <= 20_000 and len(memo) < 12
    with pytest.raises(ValueError, match="max_chars"):
        FoldMemo(max_chars=0)
