"""Property: any sequence of fold / mask / prune / restore keeps a provider-valid history.

Random histories (user turns, assistant notes, tool calls with one or more results, call text
and long arguments, unicode and NUL payloads) go through random rounds of checked actions (folds
of results or of whole spans) and restores of folded objects; after every round the history is
one a provider accepts, the latest turn is byte-for-byte untouched, every folded object's
sidecar holds its exact original payload, and a restore brings back its messages exactly.
"""

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from pacms_fakes import slow_examples

from langchain_pacms.lifecycle import (
    Action,
    SidecarRecord,
    check_actions,
    index_messages,
    payload_of,
    provider_problems,
    restore,
    span_payload,
)

TEXT = st.text(
    alphabet=st.sampled_from([*"ab xyz/._=-\n0123456789", "é", "✓", "\x00", "😀"]),
    min_size=0,
    max_size=900,
)


@st.composite
def histories(draw: Any) -> list[BaseMessage]:
    msgs: list[BaseMessage] = []
    if draw(st.booleans()):
        msgs.append(SystemMessage("system rules", id="s"))
    n = 0
    for turn in range(draw(st.integers(1, 4))):
        msgs.append(HumanMessage(draw(TEXT) or "ask", id=f"h{turn}"))
        for _ in range(draw(st.integers(0, 3))):
            calls = draw(st.integers(1, 2))
            ids = [f"c{n + k}" for k in range(calls)]
            n += calls
            script = draw(st.one_of(st.just(""), TEXT))
            msgs.append(
                AIMessage(
                    draw(st.one_of(st.just(""), TEXT)),
                    id=f"a{ids[0]}",
                    tool_calls=[
                        {"name": "read", "args": {"path": f"f{c}.py", "script": script}, "id": c}
                        for c in ids
                    ],
                )
            )
            msgs.extend(ToolMessage(draw(TEXT), tool_call_id=c, id=f"t{c}") for c in ids)
        if draw(st.booleans()):
            msgs.append(AIMessage(draw(TEXT) or "done", id=f"r{turn}"))
    return msgs


def _snapshot(msgs: list[BaseMessage], indices: tuple[int, ...]) -> list[Any]:
    return [
        (
            msgs[i].id,
            msgs[i].content,
            [(c["name"], c["args"], c["id"]) for c in getattr(msgs[i], "tool_calls", [])],
        )
        for i in indices
    ]


def _latest(msgs: list[BaseMessage]) -> list[tuple[Any, Any]]:
    start = max(i for i, m in enumerate(msgs) if isinstance(m, HumanMessage))
    return [(m.id, m.content) for m in msgs[start:]]


@slow_examples(60)
@given(histories(), st.data())
def test_any_sequence_of_actions_keeps_the_history_valid(msgs, data):
    latest = _latest(msgs)
    originals: dict[str, tuple[set[str], list[Any]]] = {}
    sidecars: dict[str, SidecarRecord] = {}
    known: dict[str, str] = {}
    for _ in range(data.draw(st.integers(1, 4))):
        index = index_messages(msgs, known_ids=known)
        known.update(index.id_map)
        for obj in index.objects:
            if obj.state == "active":
                payloads = {payload_of(msgs, obj.indices)}
                if obj.kind == "tool":
                    payloads.add(span_payload(msgs, obj))
                originals.setdefault(obj.id, (payloads, _snapshot(msgs, obj.indices)))
        ids = [o.id for o in index.objects] + ["function:tool:404"]
        actions = data.draw(
            st.lists(
                st.builds(
                    Action,
                    st.sampled_from(["fold", "mask", "prune"]),
                    st.sampled_from(ids),
                    scope=st.sampled_from(["output", "span"]),
                ),
                max_size=6,
            )
        )
        checked = check_actions(msgs, index, actions, token_counter=len)
        msgs = checked.result.messages
        sidecars.update({s.object_id: s for s in checked.result.sidecars})
        assert provider_problems(msgs) == []
        assert _latest(msgs) == latest
        folded = [o for o in index_messages(msgs, known_ids=known).objects if o.state == "folded"]
        if folded and data.draw(st.booleans()):
            obj = data.draw(st.sampled_from(folded))
            msgs = [
                *restore(
                    msgs, index_messages(msgs, known_ids=known), sidecars[obj.id], token_counter=len
                ).messages
            ]
            back = index_messages(msgs, known_ids=known).by_id[obj.id]
            assert back.state == "active"
            assert _snapshot(msgs, back.indices) == originals[obj.id][1]
            assert provider_problems(msgs) == []
    for object_id, record in sidecars.items():
        assert record.payload in originals[object_id][0]
