"""A recovered payload folded again is described by the results it holds, as written."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_pacms.lifecycle import Action, apply_actions, index_messages, span_payload
from langchain_pacms.messages.payload import payload_of

LISTING = "\n".join(f"src/pkg/module_{n}.py" for n in range(30))


def recovered(content: str) -> list[BaseMessage]:
    """A chat where the model recovered a fold and got ``content`` back."""
    call = {"name": "recover_context", "args": {"object_id": "function:tool:9"}, "id": "r1"}
    return [
        HumanMessage("go", id="h"),
        AIMessage("", tool_calls=[call], id="a2"),
        ToolMessage(content, tool_call_id="r1", name="recover_context", id="t2"),
        AIMessage("ok", id="a3"),
        HumanMessage("next", id="h2"),
    ]


def folded_again(content: str) -> tuple[str, str]:
    msgs = recovered(content)
    result = apply_actions(msgs, index_messages(msgs), [Action("fold", "function:tool:1")])
    (sidecar,) = result.sidecars
    return str(result.messages[2].content), sidecar.payload


def span_of(*outputs: str) -> str:
    calls = [{"name": "sh", "args": {"cmd": "ls"}, "id": f"c{i}"} for i in range(len(outputs))]
    msgs = [
        AIMessage("look", tool_calls=calls, id="a"),
        *(ToolMessage(o, tool_call_id=f"c{i}", id=f"t{i}") for i, o in enumerate(outputs)),
    ]
    return span_payload(msgs, index_messages(msgs).objects[0])


def test_a_recovered_span_folded_again_counts_its_lines_and_lists_its_paths_unescaped():
    # the stub read "1 line" and listed `nsrc/pkg/module_1.py` (JSON-escape debris)
    payload = span_of(LISTING)
    stub, kept = folded_again(payload)
    assert kept == payload  # the payload stays exact
    assert "folded: 30 lines;" in stub
    assert "src/pkg/module_1.py" in stub and "nsrc/" not in stub


def test_a_recovered_round_of_several_results_reads_as_its_results():
    calls = [{"name": "sh", "args": {}, "id": c} for c in ("c1", "c2")]
    msgs = [
        AIMessage("", tool_calls=calls, id="a"),
        ToolMessage("a.py\nb.py", tool_call_id="c1", id="t1"),
        ToolMessage("c.py", tool_call_id="c2", id="t2"),
    ]
    parallel = payload_of(msgs, (0, 1, 2))
    assert json.loads(parallel)[0]["tool_call_id"] == "c1"
    for payload in (parallel, span_of("a.py\nb.py", "c.py")):
        stub, kept = folded_again(payload)
        assert kept == payload and "folded: 3 lines;" in stub
        assert "a.py, b.py, c.py" in stub


@pytest.mark.parametrize("content", ['{"text": 1}', '{"text": "x", "tool_calls": []}', "[1, 2]"])
def test_other_json_outputs_are_read_as_they_are(content: str):
    stub, kept = folded_again(content)
    assert kept == content and "folded: 1 line;" in stub


def test_one_round_folded_as_a_span_and_as_its_output_is_not_ambiguous():
    # the selection folds a dropped round as a span and the lifecycle its output under the same
    # id; once the round was pruned, recovering the id said "2 different payloads ... (a forked
    # thread)" though both were the same round
    from langgraph.store.memory import InMemoryStore

    from langchain_pacms.lifecycle.fold import SidecarRecord
    from langchain_pacms.lifecycle.sidecar import SidecarAmbiguousError, SidecarStore

    span = span_of(LISTING)
    sidecars = SidecarStore(InMemoryStore(), "t")
    sidecars.put_many([SidecarRecord.of("function:tool:1", p, "tool") for p in (LISTING, span)])
    assert sidecars.get("function:tool:1").payload == span
    # another round's output under the same id (a forked thread) stays ambiguous
    sidecars.put_many([SidecarRecord.of("function:tool:1", "other output", "tool")])
    with pytest.raises(SidecarAmbiguousError):
        sidecars.get("function:tool:1")
