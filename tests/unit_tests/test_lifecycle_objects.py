import hashlib

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pacms_fakes import fold

from langchain_pacms.lifecycle import (
    Action,
    Masking,
    apply_actions,
    find_locators,
    index_messages,
    mask_text,
    provider_problems,
)


def _call(cid, name="read", **args):
    return {"name": name, "args": args, "id": cid}


def history():
    return [
        SystemMessage("You are a coder.", id="s"),
        HumanMessage("Fix the bug in src/app.py", id="h1"),
        AIMessage(
            "", tool_calls=[_call("c1", path="src/app.py"), _call("c2", path="b.py")], id="a1"
        ),
        ToolMessage("x = 1\n" * 200, tool_call_id="c1", id="t1"),
        ToolMessage("y = 2", tool_call_id="c2", id="t2"),
        AIMessage("Found it at line 3.", id="a2"),
        HumanMessage("Now run tests", id="h2"),
        AIMessage("", tool_calls=[_call("c3", "shell", cmd="pytest")], id="a3"),
        ToolMessage("3 passed", tool_call_id="c3", id="t3"),
    ]


def test_ids_kinds_lineage_and_latest():
    index = index_messages(history())
    ids = [o.id for o in index.objects]
    assert ids == [
        "system:1",
        "conversation:user:1",
        "function:tool:1",
        "conversation:assistant:1",
        "conversation:user:2",
        "function:tool:2",
    ]
    tool = index.by_id["function:tool:1"]
    assert tool.lineage == ("a1", "t1", "t2") and tool.indices == (2, 3, 4)
    assert [o.latest for o in index.objects] == [False] * 4 + [True, True]
    assert tool.signature.startswith("read(")
    payload = '[{"tool_call_id": "c1", "content": "' + "x = 1\\n" * 200 + '"}, '
    assert tool.sha256 != hashlib.sha256(payload.encode()).hexdigest()  # json list, not this
    assert all(o.state == "active" for o in index.objects)
    assert tool.tokens > index.by_id["function:tool:2"].tokens


def test_ids_are_stable_after_fold_and_with_known_ids():
    msgs = history()
    index = index_messages(msgs)
    folded = apply_actions(msgs, index, [Action("fold", "function:tool:1")]).messages
    again = index_messages(folded)
    assert again.by_id["function:tool:1"].state == "folded"
    assert again.by_id["function:tool:1"].sha256 == index.by_id["function:tool:1"].sha256
    pruned = apply_actions(msgs, index, [Action("prune", "conversation:assistant:1")]).messages
    assert "conversation:assistant:1" not in index_messages(pruned, known_ids=index.id_map).by_id
    assert index_messages(pruned, known_ids=index.id_map).by_id["function:tool:2"].lineage == (
        "a3",
        "t3",
    )


def test_fold_keeps_pairs_ids_and_locators():
    msgs = history()
    result = fold(msgs)
    out = result.messages
    assert provider_problems(out) == []
    assert [m.id for m in out] == [m.id for m in msgs]
    assert out[3].tool_call_id == "c1" and out[4].tool_call_id == "c2"
    assert 'recover_context("function:tool:1")' in out[3].content
    assert "path=src/app.py" not in out[3].content  # the call is in view: not repeated
    assert "path=src/app.py" in result.sidecars[0].description
    assert out[4].content == "[folded with function:tool:1]"
    (record,) = result.sidecars
    assert hashlib.sha256(record.payload.encode()).hexdigest() == record.sha256
    assert "x = 1" in record.payload and "y = 2" in record.payload
    assert set(result.replaced) == {"t1", "t2"} and result.removed == ()
    assert result.tokens_after < result.tokens_before
    assert msgs[3].content == "x = 1\n" * 200  # input untouched


def test_mask_and_prune():
    msgs = history()
    index = index_messages(msgs)
    masked = apply_actions(
        msgs, index, [Action("mask", "function:tool:1")], masking=Masking(head=10, tail=5)
    )
    assert "elided by mask" in masked.messages[3].content
    assert masked.messages[3].content.startswith("x = 1\nx = ")
    assert masked.sidecars == ()
    pruned = apply_actions(msgs, index, [Action("prune", "function:tool:1")])
    assert pruned.removed == ("a1", "t1", "t2")
    assert provider_problems(pruned.messages) == []
    assert pruned.tokens_after == 0


def test_errors():
    msgs = history()
    index = index_messages(msgs)
    with pytest.raises(ValueError, match="system"):
        apply_actions(msgs, index, [Action("fold", "system:1")])
    with pytest.raises(KeyError):
        apply_actions(msgs, index, [Action("fold", "function:tool:9")])


def test_helpers():
    assert mask_text("short") == "short"
    assert "elided" in mask_text("z" * 1000, 10, 10)
    assert "ABC-42" in find_locators("ticket ABC-42 at https://a.b/c")
    assert provider_problems([HumanMessage("a"), AIMessage("", tool_calls=[_call("q")])])


def test_mask_keeps_images_and_masks_the_text():
    # before the fix: a masked screenshot-and-log result became the masked text alone
    image = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}
    call = {"name": "browse", "args": {"url": "u"}, "id": "c1", "type": "tool_call"}
    log = {"type": "text", "text": "row ok\n" * 300}
    msgs = [
        HumanMessage("check the page", id="h1"),
        AIMessage("", tool_calls=[call], id="a1"),
        ToolMessage([log, image], tool_call_id="c1", id="t1"),
        HumanMessage("and now?", id="h2"),
    ]
    index = index_messages(msgs)
    (target,) = [o.id for o in index.objects if o.kind == "tool"]
    out = apply_actions(msgs, index, [Action("mask", target)], masking=Masking(head=10, tail=5))
    content = out.messages[2].content
    assert content[1] == image and len(content) == 2
    assert "elided by mask" in content[0]["text"] and "[image]" not in content[0]["text"]
    assert out.tokens_after < out.tokens_before
    again = apply_actions(msgs, index, [Action("mask", target)], masking=Masking(head=10, tail=5))
    assert again.messages[2] is out.messages[2]  # the same copy (memoised)
    assert msgs[2].content[1] == image and len(msgs[2].content[0]["text"]) == 2100


def test_mask_keeps_each_non_text_block_and_the_text_blocks_keys():
    # a text-plain file block and a text block's cache_control used to be lost (the file read
    # as text, the key dropped); a tool_result wrapper was flattened away
    file = {"type": "text-plain", "text": "a,b\n1,2", "mime_type": "text/csv"}
    image = {"type": "image", "url": "https://example.com/shot.png"}
    log = {"type": "text", "text": "row ok\n" * 300, "cache_control": {"type": "ephemeral"}}
    call = {"name": "browse", "args": {}, "id": "c1", "type": "tool_call"}

    def masked(content: list) -> list:
        msgs = [
            HumanMessage("go", id="h1"),
            AIMessage("", tool_calls=[call], id="a1"),
            ToolMessage(content, tool_call_id="c1", id="t1"),
            HumanMessage("and now?", id="h2"),
        ]
        index = index_messages(msgs)
        (target,) = [o.id for o in index.objects if o.kind == "tool"]
        action = [Action("mask", target)]
        return apply_actions(msgs, index, action, masking=Masking(head=10, tail=5)).messages[2]

    first, *rest = masked([image, log, file]).content
    assert rest == [image, file] and first["cache_control"] == {"type": "ephemeral"}
    assert "elided by mask" in first["text"] and "a,b" not in first["text"]
    wrapped = [{"type": "tool_result", "tool_use_id": "c1", "content": [log, image]}]
    assert masked(wrapped).content == wrapped  # left whole: nothing to mask inside a wrapper
