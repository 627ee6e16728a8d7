import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from pacms_fakes import call, fold, tool_round

from langchain_pacms.lifecycle import (
    RECOVER_TOOL_NAME,
    SIDECAR_NAMESPACE,
    Action,
    LifecycleHarness,
    SidecarRecord,
    SidecarStore,
    apply_actions,
    check_actions,
    fold_variants,
    index_messages,
    make_recover_tool,
)
from langchain_pacms.lifecycle.sidecar import record_key

PAYLOAD = '{"rows": [1, 2], "note": "caf\u00e9 \U0001f600 \x00 \ud800"}'


def _store(thread="t1", payload=PAYLOAD, object_id="function:tool:1"):
    store = InMemoryStore()
    SidecarStore(store, thread).put(SidecarRecord.of(object_id, payload, "tool", ("a1", "t1")))
    return store


def _config(thread):
    return {"configurable": {"thread_id": thread}}


def test_schema_name_and_description():
    tool = make_recover_tool(InMemoryStore())
    assert tool.name == RECOVER_TOOL_NAME == "recover_context"
    assert list(tool.tool_call_schema.model_json_schema()["properties"]) == ["object_id"]
    assert "folded" in tool.description


def test_thread_from_argument_wins_over_config():
    store = _store("t1")
    SidecarStore(store, "t2").put(SidecarRecord.of("function:tool:1", "other", "tool"))
    tool = make_recover_tool(store, thread_id="t1")
    assert tool.invoke({"object_id": "function:tool:1"}, _config("t2")) == PAYLOAD
    assert (
        make_recover_tool(store).invoke({"object_id": "function:tool:1"}, _config("t2")) == "other"
    )


def test_tool_call_gives_exact_payload_in_tool_message():
    tool = make_recover_tool(_store())
    request = call(RECOVER_TOOL_NAME, {"object_id": "function:tool:1"}, "r1")
    message = tool.invoke(request, _config("t1"))
    assert isinstance(message, ToolMessage)
    assert message.content == PAYLOAD and message.status == "success"


def test_unknown_id_is_an_error_result_naming_known_ids():
    tool = make_recover_tool(_store())
    request = call(RECOVER_TOOL_NAME, {"object_id": "function:tool:7"}, "r1")
    message = tool.invoke(request, _config("t1"))
    assert message.status == "error"
    assert "no sidecar for 'function:tool:7' in thread 't1'" in message.content
    assert "function:tool:1" in message.content
    empty = make_recover_tool(InMemoryStore()).invoke({"object_id": "x"}, _config("t1"))
    assert empty == "recover_context failed: no sidecar for 'x' in thread 't1'."


def _key(payload=PAYLOAD):
    return record_key(
        "function:tool:1", SidecarRecord.of("function:tool:1", payload, "tool").sha256
    )


def test_integrity_mismatch_is_an_error_never_the_wrong_payload():
    store = _store()
    ns = (SIDECAR_NAMESPACE, "t1")
    value = dict(store.get(ns, _key()).value)
    wrong = PAYLOAD.replace("1", "9")
    other = _store(payload=wrong)
    value["payload"] = other.get(ns, _key(wrong)).value["payload"]
    store.put(ns, _key(), value)
    out = make_recover_tool(store).invoke({"object_id": "function:tool:1"}, _config("t1"))
    assert out.startswith("recover_context failed:") and "sha256" in out
    assert PAYLOAD.replace("1", "9") not in out


def test_missing_or_bad_thread_is_an_error_result():
    tool = make_recover_tool(_store())
    assert "has no thread id" in tool.invoke({"object_id": "function:tool:1"})
    # any thread id is a valid thread: one with '.' is encoded for the store, not refused
    dotted = make_recover_tool(_store("alice@example.com"))
    assert dotted.invoke({"object_id": "function:tool:1"}, _config("alice@example.com")) == PAYLOAD
    assert "no sidecar" in tool.invoke({"object_id": "function:tool:1"}, _config("a.b"))


def test_numeric_thread_id_in_config_is_read_as_text():
    tool = make_recover_tool(_store("42"))
    assert tool.invoke({"object_id": "function:tool:1"}, _config(42)) == PAYLOAD


def test_bad_construction_arguments():
    with pytest.raises(TypeError, match="BaseStore"):
        make_recover_tool({})
    with pytest.raises(ValueError, match="thread_id"):
        make_recover_tool(InMemoryStore(), thread_id="")


async def test_async_invoke():
    tool = make_recover_tool(_store())
    assert await tool.ainvoke({"object_id": "function:tool:1"}, _config("t1")) == PAYLOAD
    missing = await tool.ainvoke({"object_id": "function:tool:5"}, _config("t1"))
    assert missing.startswith("recover_context failed: no sidecar for 'function:tool:5'")


class _CountingStore(InMemoryStore):
    def __init__(self):
        super().__init__()
        self.sync_calls = 0

    def batch(self, ops):
        self.sync_calls += 1
        return super().batch(ops)


async def test_async_path_does_not_use_sync_store_calls():
    store = _CountingStore()
    await SidecarStore(store, "t").aput(SidecarRecord.of("function:tool:1", "p", "tool"))
    tool = make_recover_tool(store, thread_id="t")
    assert await tool.ainvoke({"object_id": "function:tool:1"}) == "p"
    await tool.ainvoke({"object_id": "nope"})
    assert store.sync_calls == 0
    assert isinstance(store, BaseStore)


def test_fold_then_recover_returns_the_folded_payload():
    payload = PAYLOAD.replace("\ud800", "")  # index_messages hashes with strict UTF-8
    msgs = [
        HumanMessage("read data.json", id="h1"),
        *tool_round("read", {"path": "data.json"}, payload),
        HumanMessage("thanks", id="h2"),
    ]
    folded = fold(msgs)
    store = InMemoryStore()
    SidecarStore(store, "t").put_many(folded.sidecars)
    stub = folded.messages[2].content
    assert 'recover_context("function:tool:1")' in stub and payload not in stub
    assert (
        make_recover_tool(store).invoke({"object_id": "function:tool:1"}, _config("t")) == payload
    )


def test_a_graph_with_another_messages_key_recovers_without_a_thread_id():
    """create_lifecycle_node(messages_key="history") folds under the run's own namespace (named
    after its first message): the tool must read the same key to find it and check the hash."""
    from langchain_pacms.messages.runs import run_thread

    payload = PAYLOAD.replace("\ud800", "")
    msgs = [
        HumanMessage("read data.json", id="h1"),
        *tool_round("read", {"path": "data.json"}, payload),
        HumanMessage("thanks", id="h2"),
    ]
    folded = fold(msgs)
    store = InMemoryStore()
    SidecarStore(store, run_thread(msgs)).put_many(folded.sidecars)
    call = {"object_id": "function:tool:1", "state": {"history": folded.messages}}
    tool = make_recover_tool(store, messages_key="history")
    assert tool.invoke(call, {}) == payload
    assert "no thread id" in make_recover_tool(store).invoke(call, {})  # it reads "messages"


@pytest.mark.parametrize("by_key", [False, True])
@pytest.mark.parametrize("with_image", [True, False])
def test_a_folded_result_of_blocks_with_media_comes_back_as_blocks(with_image, by_key):
    image = {"type": "image", "url": "https://example.com/shot.png"}
    blocks = [{"type": "text", "text": "the login page"}, *([image] if with_image else [])]
    msgs = [
        HumanMessage("look", id="h1"),
        *tool_round("shot", {}, "x"),
        HumanMessage("ok", id="h2"),
    ]
    msgs[2] = msgs[2].model_copy(update={"content": blocks})
    folded = fold(msgs)
    store = InMemoryStore()
    SidecarStore(store, "t").put_many(folded.sidecars)
    # by the key (<id>@<hash prefix>) the ambiguity error asks for, the same answer
    key = f"function:tool:1@{folded.sidecars[0].sha256[:16]}" if by_key else "function:tool:1"
    request = call(RECOVER_TOOL_NAME, {"object_id": key}, "r1")
    request["args"]["state"] = {"messages": folded.messages}
    message = make_recover_tool(store).invoke(request, _config("t"))
    # with an image the model gets the blocks again; text alone stays the exact payload text
    expected = blocks if with_image else json.dumps(blocks, ensure_ascii=False)
    assert message.content == expected


def test_recover_context_says_a_masked_object_is_not_recoverable():
    # before the fix: "is not folded in this conversation (its content is in the history)",
    # although the mask had cut most of it out of the history
    history = [HumanMessage("task", id="h1")]
    history += tool_round("pytest", {}, "ok\n" * 2000, "1")
    history.append(HumanMessage("and now?", id="h2"))
    masked = apply_actions(history, index_messages(history), [Action("mask", "function:tool:1")])
    tool = make_recover_tool(InMemoryStore())
    request = call(RECOVER_TOOL_NAME, {"object_id": "function:tool:1"}, "r1")
    request["args"]["state"] = {"messages": masked.messages}
    answer = tool.invoke(request, {"configurable": {"thread_id": "t"}})
    assert answer.status == "error" and "was masked" in answer.content
    assert "in the history)" not in answer.content


def test_a_result_holding_bytes_is_never_folded():
    # a Bedrock-style image block holds raw bytes: stored as JSON they came back as "b'...'"
    png = {"image": {"format": "png", "source": {"bytes": b"\x89PNG\r\n\x1a\n\x00raw"}}}
    listing = "\n".join(f"src/pkg{i % 7}/module_{i}.py" for i in range(300))
    blocks = [{"type": "text", "text": listing}, png]
    msgs = [
        HumanMessage("take a screenshot and read the log", id="h1"),
        *tool_round("shot", {"path": "app.log"}, "x"),
        AIMessage("done", id="a2"),
        HumanMessage("next task", id="h2"),
    ]
    msgs[2] = msgs[2].model_copy(update={"content": blocks})
    checked = check_actions(msgs, index_messages(msgs), [Action("fold", "function:tool:1")])
    assert not checked.accepted
    assert [r.reason for r in checked.rejected] == [
        "its content holds values JSON cannot carry (bytes, ...): a fold would lose them"
    ]
    harness = LifecycleHarness(store=InMemoryStore())
    assert harness.step(msgs, thread_id="t") is None  # the default planner's fold is refused
    assert fold_variants(msgs) == {}  # nor does the selection send a stub of it
    # the same text without the bytes folds and comes back exactly
    msgs[2] = msgs[2].model_copy(update={"content": blocks[:1]})
    commit = harness.step(msgs, thread_id="t")
    assert commit is not None and [a.target for a in commit.actions] == ["function:tool:1"]
    assert set(fold_variants(msgs)) == {1}


@pytest.mark.parametrize("scope", ["output", "span"])
def test_a_parallel_round_with_a_screenshot_comes_back_as_blocks(scope):
    # before: one JSON string, the image's base64 inline as text the model would read
    image = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}
    shot = [{"type": "text", "text": "the login page"}, image]
    # a string result that reads as image blocks stays that string (it was never an image)
    text = json.dumps([image])
    calls = [call("shot", {}, "c1"), call("read", {"path": "a.json"}, "c2")]
    msgs = [
        HumanMessage("look", id="h1"),
        AIMessage("checking both", tool_calls=calls, id="a1"),
        ToolMessage(shot, tool_call_id="c1", id="t1"),
        ToolMessage(text, tool_call_id="c2", id="t2"),
        HumanMessage("ok", id="h2"),
    ]
    folded = apply_actions(
        msgs, index_messages(msgs), [Action("fold", "function:tool:1", scope=scope)]
    )
    store = InMemoryStore()
    SidecarStore(store, "t").put_many(folded.sidecars)
    request = call(RECOVER_TOOL_NAME, {"object_id": "function:tool:1"}, "r1")
    request["args"]["state"] = {"messages": folded.messages}
    content = make_recover_tool(store).invoke(request, _config("t")).content
    if scope == "span":  # the call first, as text
        head = json.loads(content.pop(0)["text"])
        assert head["text"] == "checking both"
        assert [c["id"] for c in head["tool_calls"]] == ["c1", "c2"]
    assert content == [
        {"type": "text", "text": '{"tool_call_id": "c1"}'},
        *shot,
        {"type": "text", "text": json.dumps({"tool_call_id": "c2", "content": text})},
    ]
