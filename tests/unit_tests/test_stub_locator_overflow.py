"""A fold stub shows each locator of its payload, grouped by directory, or counts those left out."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from pacms_fakes import fold, tool_round

from langchain_pacms.messages.locators import find_locators, stub_budget, stub_locators

_GROUP = re.compile(r"([^\s,{}]*/)\{([^{}]*)\}")
_MORE = re.compile(r" ?\(\+(\d+) more\)$")


def expanded(stub: str) -> str:
    """The stub's locator text with each ``dir/{a,b}`` group written out path by path."""
    return _GROUP.sub(lambda m: ", ".join(m.group(1) + n for n in m.group(2).split(",")), stub)


def left_out(stub: str) -> int:
    found = _MORE.search(stub)
    return int(found.group(1)) if found else 0


def listing(n: int = 20) -> str:
    """``find /testbed -name '*.py' | head -n``: long paths in a few directories."""
    dirs = ["/testbed/src/sqlfluff/core/parser/grammar", "/testbed/src/sqlfluff/core/rules"]
    return "\n".join(f"{dirs[k % 2]}/module_{k}.py" for k in range(n))


def folded_stub(payload: str) -> tuple[str, str]:
    """The stub text (after ``locators: ``) of a folded tool result, and the stored payload."""
    result = fold(
        [
            HumanMessage("fix the grammar parser", id="h"),
            *tool_round("bash", {"command": "find /testbed -name '*.py' | head -20"}, payload),
            HumanMessage("go on", id="h2"),
        ]
    )
    stub = str(result.messages[2].content)
    assert stub.startswith("[folded: ") and stub.endswith("]")
    return stub.split("; locators: ", 1)[1][:-1], result.sidecars[0].payload


def test_a_folded_short_listing_writes_every_path_whole() -> None:
    payload = listing(20)
    text, stored = folded_stub(payload)
    assert stored == payload  # recoverable byte for byte
    assert all(p in text for p in payload.splitlines()) and "{" not in text


def test_a_folded_long_listing_keeps_every_path_with_each_directory_written_once() -> None:
    payload = listing(140)
    text, stored = folded_stub(payload)
    assert stored == payload  # recoverable byte for byte
    paths = payload.splitlines()
    # the first paths stay whole (what a later command copies), the rest grouped
    assert paths[0] in text and "/testbed/src/sqlfluff/core/rules/{" in text
    assert all(p in expanded(text) for p in paths)  # the 140th path too
    assert left_out(text) == 0
    # what does not fit whole takes at most half the budget again, far less than written whole
    budget = stub_budget(payload)
    assert len(text) <= budget + budget // 2 < len(", ".join(paths))


def test_a_stub_that_cannot_hold_every_locator_says_how_many_it_left_out() -> None:
    payload = " ".join(f"order ORD{n:05}X at bay B{n:04}Z" for n in range(300))
    text, stored = folded_stub(payload)
    wanted = find_locators(payload, limit=10**6)
    missing = [t for t in wanted if t not in expanded(text)]
    assert missing and left_out(text) == len(missing)
    assert text.endswith(f"(+{len(missing)} more)")
    assert all(t in stored for t in missing)  # each is in the payload recover_context returns


_SEGMENT = st.text(alphabet="abcxyz_019", min_size=1, max_size=8)
_DIRS = st.lists(_SEGMENT, min_size=1, max_size=5).map(lambda parts: "/" + "/".join(parts))


@st.composite
def payloads(draw: st.DrawFn) -> list[str]:
    """Paths in a few shared directories, mixed with ids: from a few lines to far past a budget."""
    dirs = draw(st.lists(_DIRS, min_size=1, max_size=4))
    file = st.tuples(st.sampled_from(dirs), _SEGMENT).map(lambda p: f"{p[0]}/{p[1]}.py")
    ident = st.from_regex(r"[A-Z]{2}[0-9]{3,5}", fullmatch=True)
    return draw(st.lists(st.one_of(file, file, ident), min_size=20, max_size=300))


@settings(max_examples=200, deadline=None)
@given(payloads(), st.sets(st.integers(min_value=0, max_value=399), max_size=10))
def test_every_locator_of_a_payload_is_in_its_stub_shown_elsewhere_or_counted(
    items: list[str], hidden_at: set[int]
) -> None:
    payload = "\n".join(items)
    shown = frozenset(items[i] for i in hidden_at if i < len(items))
    stub = stub_locators(f"sha-{hash(payload)}-{hash(shown)}", payload, shown)
    text = str(stub)
    visible = expanded(text)
    assert all(t in visible for t in stub.locators)
    missing = [t for t in find_locators(payload, limit=10**6, shown=shown) if t not in visible]
    assert len(missing) <= stub.left_out == left_out(text)
    assert (stub.left_out == 0) == (not missing)
    budget = stub_budget(payload)
    assert len(text) <= budget + budget // 2 + len(f" (+{stub.left_out} more)")
