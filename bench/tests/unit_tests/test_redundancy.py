from __future__ import annotations

import re
from collections import Counter
from statistics import mean

import pytest

from pacms_bench import redundancy
from pacms_bench.longmemeval import Round
from pacms_bench.redundancy import (
    FULL_PREFIXES,
    RECAP_ASSISTANT_ONLY_FRAMES,
    RECAP_REPLY_FRAMES,
    RECAP_USER_FRAMES,
    SYNONYMS,
    PoolItem,
    inject_redundancy,
    restate,
)

_FILLER_BODY = (
    "I usually go hiking on weekends and I really enjoy the quiet trails near the lake. "
    "Sometimes I bring my camera to take pictures of birds. "
    "Last month I bought new boots because the old ones were worn out. "
    "I think the next trip will be in the mountains."
)
_REPLY_BODY = (
    "That sounds like a wonderful routine, and hiking is a great way to stay active. "
    "Here are some tips for photographing birds on the trail. "
    "First, keep your shutter speed high so you can freeze quick movements. "
    "Second, approach slowly and use natural cover. "
    "Third, early mornings often give the best light and the most activity."
)


def _rounds(n: int = 10, evidence: frozenset[int] = frozenset({2, 7})) -> list[Round]:
    out = []
    for i in range(n):
        user = f"Message {i} about topic{i}. {_FILLER_BODY} Marker late{i} here."
        reply = f"Reply {i} for topic{i}. {_REPLY_BODY} Closing late{i} note."
        out.append(
            Round(i, f"s{i // 3}", i // 3, "2023/05/20 (Sat) 02:21", user, reply, i in evidence)
        )
    return out


def _restatements(pool: list[PoolItem]) -> list[PoolItem]:
    return [p for p in pool if p.is_restatement]


@pytest.mark.parametrize("style", ["recap", "full"])
@pytest.mark.parametrize("level", [0, 1, 3, 10])
def test_counts(style: str, level: int) -> None:
    rounds = _rounds()
    n_filler = sum(not r.is_evidence for r in rounds)
    pool = inject_redundancy(rounds, level, style=style, seed=1)
    assert len(pool) == len(rounds) + n_filler * level
    assert len(_restatements(pool)) == n_filler * level
    per_source = Counter(p.source_index for p in _restatements(pool))
    assert all(per_source[r.index] == level for r in rounds if not r.is_evidence)
    assert len({p.id for p in pool}) == len(pool)


def test_level_zero_returns_originals_only() -> None:
    rounds = _rounds()
    pool = inject_redundancy(rounds, 0)
    assert [p.id for p in pool] == [f"r{r.index}" for r in rounds]
    assert not any(p.is_restatement for p in pool)


def test_originals_first_in_order() -> None:
    rounds = _rounds()
    rounds = rounds[3:] + rounds[:3]  # non-sorted input order must be kept
    pool = inject_redundancy(rounds, 2, seed=5)
    head = pool[: len(rounds)]
    assert [p.id for p in head] == [f"r{r.index}" for r in rounds]
    assert [p.text for p in head] == [r.text for r in rounds]
    assert [p.is_evidence for p in head] == [r.is_evidence for r in rounds]
    assert [p.source_index for p in head] == [r.index for r in rounds]
    assert not any(p.is_restatement for p in head)
    assert all(p.is_restatement for p in pool[len(rounds) :])
    assert [p.position for p in pool] == list(range(len(pool)))


def test_restatements_are_never_evidence_and_only_restate_filler() -> None:
    rounds = _rounds()
    evidence = {r.index for r in rounds if r.is_evidence}
    for style in ("recap", "full"):
        pool = inject_redundancy(rounds, 4, style=style, seed=2)
        extra = _restatements(pool)
        assert not any(p.is_evidence for p in extra)
        assert not {p.source_index for p in extra} & evidence
        assert sum(p.is_evidence for p in pool) == len(evidence)
        for p in extra:
            m = re.fullmatch(r"r(\d+)-x(\d+)", p.id)
            assert m is not None
            assert int(m.group(1)) == p.source_index
            assert 0 <= int(m.group(2)) < 4


def test_determinism_and_shuffle() -> None:
    rounds = _rounds(20, frozenset({5}))
    a = inject_redundancy(rounds, 3, seed=11)
    b = inject_redundancy(rounds, 3, seed=11)
    assert a == b
    c = inject_redundancy(rounds, 3, seed=12)
    assert [p.id for p in a] != [p.id for p in c]
    ids = [p.id for p in _restatements(a)]
    # shuffled: not grouped by source round in generation order
    generation_order = [f"r{r.index}-x{k}" for r in rounds if not r.is_evidence for k in range(3)]
    assert sorted(ids) == sorted(generation_order)
    assert ids != generation_order


def test_restatements_of_one_round_use_different_templates() -> None:
    rounds = _rounds(4, frozenset())
    pool = inject_redundancy(rounds, len(RECAP_USER_FRAMES), style="recap", seed=0)
    for r in rounds:
        frames = set()
        for p in _restatements(pool):
            if p.source_index == r.index:
                frames.update(f for f in RECAP_USER_FRAMES if p.text.startswith(f))
        assert frames == set(RECAP_USER_FRAMES)


def test_recap_style_is_short_lead_quote() -> None:
    rounds = _rounds(6, frozenset())
    pool = inject_redundancy(rounds, 2, style="recap", seed=3)
    for p in _restatements(pool):
        src = rounds[p.source_index]
        assert any(p.text.startswith(f) for f in RECAP_USER_FRAMES)
        assert any(f in p.text for f in RECAP_REPLY_FRAMES)
        assert f"topic{src.index}" in p.text  # built from the first sentence(s)
        assert f"late{src.index}" not in p.text  # ... not from the tail
        assert len(p.text) < 0.5 * len(src.text)


def test_full_style_keeps_whole_round() -> None:
    rounds = _rounds(6, frozenset())
    pool = inject_redundancy(rounds, 2, style="full", seed=3)
    for p in _restatements(pool):
        src = rounds[p.source_index]
        first_line = p.text.split("\n", 1)[0]
        assert first_line in FULL_PREFIXES
        assert f"Marker late{src.index} here." in p.text
        assert f"Closing late{src.index} note." in p.text
        assert src.date not in p.text
        assert 0.8 < len(p.text) / len(src.text) < 1.3


def test_recap_much_shorter_than_full() -> None:
    rounds = _rounds(8, frozenset())
    recap = _restatements(inject_redundancy(rounds, 3, style="recap", seed=0))
    full = _restatements(inject_redundancy(rounds, 3, style="full", seed=0))
    assert mean(len(p.text) for p in recap) < 0.4 * mean(len(p.text) for p in full)


def test_synonym_swaps_are_applied_lightly_and_case_sensitively() -> None:
    user = " ".join(["We recently moved."] * 30) + " Recently is capitalised."
    rnd = Round(0, "s", 0, "d", user, "ok", False)
    pool = inject_redundancy([rnd], 1, style="full", seed=0)
    text = pool[1].text
    assert "lately" in text  # some swapped
    assert "recently" in text  # but not all (light swaps)
    assert "Recently is capitalised." in text  # capitalised words are left alone
    recap_texts = {restate(rnd, style="recap", seed=s) for s in range(20)}
    assert any("lately" in t for t in recap_texts)
    assert any("recently" in t for t in recap_texts)


def test_orphan_and_reply_less_rounds() -> None:
    orphan = Round(0, "s", 0, "d", "", "Hello there. How can I help?", False)
    no_reply = Round(1, "s", 0, "d", "Just one question for you.", "", False)
    orphan_recap = restate(orphan, style="recap")
    assert any(orphan_recap.startswith(f) for f in RECAP_ASSISTANT_ONLY_FRAMES)
    assert "Hello there." in orphan_recap
    no_reply_recap = restate(no_reply, style="recap")
    assert not any(f in no_reply_recap for f in RECAP_REPLY_FRAMES)
    assert "user:" not in restate(orphan, style="full")
    assert "assistant:" not in restate(no_reply, style="full")


def test_markdown_lead_is_cleaned() -> None:
    rnd = Round(0, "s", 0, "d", "Hi.", "**Step 1: Plan** the route.\n\n1. **Map**: details", False)
    text = restate(rnd, style="recap")
    assert "**" not in text
    assert "Step 1: Plan the route." in text
    assert "details" not in text


def test_validation() -> None:
    rounds = _rounds(3)
    with pytest.raises(ValueError, match="level"):
        inject_redundancy(rounds, -1)
    with pytest.raises(ValueError, match="level"):
        inject_redundancy(rounds, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="level"):
        inject_redundancy(rounds, True)
    with pytest.raises(ValueError, match="style"):
        inject_redundancy(rounds, 1, style="verbose")
    with pytest.raises(ValueError, match="style"):
        restate(rounds[0], style="verbose")
    with pytest.raises(ValueError, match="distinct"):
        inject_redundancy([rounds[0], rounds[0]], 1)


def test_module_docstring_documents_all_templates() -> None:
    doc = redundancy.__doc__
    assert doc is not None
    for template in (
        *RECAP_USER_FRAMES,
        *RECAP_REPLY_FRAMES,
        *RECAP_ASSISTANT_ONLY_FRAMES,
        *FULL_PREFIXES,
    ):
        assert f"``{template}``" in doc
    for src, dst in SYNONYMS.items():
        assert f"{src} -> {dst}" in doc
