"""Live sessions stay within their bounds, and a followed JSONL log is read line by whole line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="needs the 'server' extra")

from langchain_pacms.server.live import WATCH_SESSION, JsonlTail, LiveSessions, session_id

ADDS = st.lists(st.tuples(st.sampled_from("abcdefg"), st.integers(0, 400)), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(adds=ADDS, sessions=st.integers(1, 4), records=st.integers(1, 5), size=st.integers(1, 2000))
def test_every_bound_holds_and_the_newest_record_stays(
    adds: list[tuple[str, int]], sessions: int, records: int, size: int
) -> None:
    live = LiveSessions(max_sessions=sessions, max_records=records, max_bytes=size)
    for n, (name, length) in enumerate(adds):
        seq = live.add(name, {"n": n, "pad": "x" * length})
        kept = {s["id"]: live.since(s["id"], 0) for s in live.summary()}
        assert len(kept) <= sessions
        assert all(0 < len(r) <= records for r in kept.values())
        total = sum(len(data) for r in kept.values() for _, data in r)
        newest = kept[name][-1]
        assert newest[0] == seq and json.loads(newest[1])["n"] == n
        assert total <= size or total == len(newest[1])  # over only by the newest alone
        for r in kept.values():
            assert [s for s, _ in r] == sorted(s for s, _ in r)
    assert live.summary()[0]["id"] == adds[-1][0]  # most recently updated first


def test_since_gives_only_later_records() -> None:
    live = LiveSessions()
    first = live.add("s", {"n": 1})
    live.add("t", {"n": 2})
    third = live.add("s", {"n": 3})
    assert [seq for seq, _ in live.since("s", first)] == [third]
    assert live.since("s", third) == [] and live.since("nobody", 0) == []


def test_an_after_beyond_the_newest_record_gives_them_all() -> None:
    live = LiveSessions(start=0)  # numbers went back: a page saw record 5 of another numbering
    assert live.since("s", 5) == []
    first = live.add("s", {"n": 1})
    second = live.add("s", {"n": 2})
    assert [seq for seq, _ in live.since("s", 5)] == [first, second] == [1, 2]
    assert [seq for seq, _ in live.since("s", second)] == []  # the newest itself: nothing new


def test_a_restarted_service_numbers_above_the_one_before() -> None:
    before = LiveSessions()
    seen = [before.add("s", {"n": n}) for n in range(3)][-1]  # the last record a page saw
    time.sleep(0.001)  # a restart takes longer than one microsecond per record kept before it
    after = LiveSessions()  # the service restarted; the page is back only after 10 records
    later = [after.add("s", {"n": n}) for n in range(10)]
    assert later[0] > seen
    assert [seq for seq, _ in after.since("s", seen)] == later


def test_streams_are_counted_up_to_the_cap() -> None:
    live = LiveSessions(max_clients=2)
    assert live.open_stream() and live.open_stream() and not live.open_stream()
    live.close_stream()
    assert live.open_stream()


@pytest.mark.parametrize("bad", ["", "a b", "x" * 65, "a/b", "é", "a\nb"])
def test_a_session_id_is_short_and_plain(bad: str) -> None:
    with pytest.raises(ValueError, match="X-Pacms-Session"):
        session_id(bad)


def record(n: int) -> bytes:
    return json.dumps({"candidates": [], "n": n}).encode() + b"\n"


def watched(live: LiveSessions) -> list[int]:
    return [json.loads(data)["n"] for _, data in live.since(WATCH_SESSION, 0)]


def test_the_tail_waits_for_the_file_and_for_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "sel.jsonl"
    live = LiveSessions()
    tail = JsonlTail(path, live)
    assert tail.poll() == 0  # not there yet
    line = record(1)
    path.write_bytes(line[:7])
    assert tail.poll() == 0
    with path.open("ab") as handle:
        handle.write(line[7:] + b"[1, 2]\n" + b"not json\n" + record(2))
    assert tail.poll() == 2 and watched(live) == [1, 2]


def test_the_tail_starts_again_on_a_shorter_or_replaced_file(tmp_path: Path) -> None:
    path = tmp_path / "sel.jsonl"
    live = LiveSessions()
    tail = JsonlTail(path, live)
    path.write_bytes(record(1) + record(2))
    assert tail.poll() == 2
    path.write_bytes(record(3))  # truncated and rewritten
    assert tail.poll() == 1
    other = tmp_path / "new.jsonl"
    other.write_bytes(record(4) + record(5) + record(6))
    other.replace(path)  # rotated: a new file under the same name
    assert tail.poll() == 3 and watched(live) == [1, 2, 3, 4, 5, 6]


def test_the_tail_skips_overlong_lines_and_reads_only_the_end_of_a_big_log(tmp_path: Path) -> None:
    path = tmp_path / "sel.jsonl"
    live = LiveSessions(max_bytes=200)
    tail = JsonlTail(path, live, chunk=64, max_line=100)
    path.write_bytes(b"".join(record(n) for n in range(40)))  # far more than max_bytes
    for _ in range(50):  # a few bytes a poll
        tail.poll()
    assert watched(live) and watched(live)[-1] == 39 and watched(live)[0] > 20
    with path.open("ab") as handle:
        handle.write(b'{"candidates": [], "pad": "' + b"x" * 300 + b'"}\n' + record(40))
    for _ in range(50):  # a few bytes a poll
        tail.poll()
    assert watched(live)[-1] == 40
    assert all(len(data) < 100 for _, data in live.since(WATCH_SESSION, 0))
