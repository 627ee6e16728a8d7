r"""Redundancy injection for the LongMemEval recall study.

Context selectors are often biased towards recent or repeated material. To
test this, we flood the *recent* end of a history with restatements of
irrelevant (filler) rounds and check whether the evidence rounds still get
selected.

Procedure (:func:`inject_redundancy`):

1. The original rounds are kept, in the given order, as pool items
   ``r{index}`` at positions ``0..n-1``. Evidence flags are copied from the
   rounds.
2. For every *filler* round (``is_evidence`` is False), ``level`` (R)
   restatements ``r{index}-x{k}`` (k = 0..R-1) are made. Evidence rounds are
   never restated. Restatements never count as evidence, so
   ``is_evidence=False`` and ``is_restatement=True``, and ``source_index`` is
   the ``Round.index`` of the round they restate.
3. All restatements are shuffled together and appended after the originals
   (positions ``n..n + n_filler*R - 1``), so the most recent part of the
   context consists of paraphrased filler.
4. All randomness comes from one ``random.Random(seed)``, drawn in a fixed
   order: filler rounds in input order, then k, then one shuffle. The output
   is therefore a pure function of ``(rounds, level, style, seed)``.

For each filler round, the template order is a random permutation of the
style's templates, cycled when R exceeds the number of templates. The R
restatements of one round therefore use different framings while possible.

Styles:

``"recap"`` (short)
    A one- or two-sentence recap quoting the *lead* of the round: the first
    line of the user text, cut to its first sentence (or two, if the first
    is shorter than 40 characters) and to at most 40 words, plus the same for
    the assistant reply. Synonym swaps are applied with probability 0.6 per
    matching phrase. The form is ``<user frame> "<user lead>" <reply frame>
    "<assistant lead>"``. Without user text (an orphan assistant turn) it is
    ``<assistant-only frame> "<assistant lead>"``. Without a reply, the reply
    part is left out. Recaps are typically 5-20x shorter than the round.

``"full"`` (full length)
    ``<prefix>`` followed by ``"\nuser: <user>\nassistant: <assistant>"``,
    with the *whole* round text (empty sides left out). Light synonym swaps
    are applied with probability 0.3 per matching phrase. The round's date
    stamp is dropped and a one-line prefix is added, so the length stays
    close to that of ``Round.text``.

Templates (all written for this project):

Recap user frames:
    - ``Earlier you mentioned:``
    - ``Quick recap of something you said before:``
    - ``As you brought up a while ago:``
    - ``Going back to an earlier message of yours:``
    - ``You noted at one point:``
    - ``Just recapping what you told me earlier:``

Recap reply frames:
    - ``I replied roughly:``
    - ``My answer was along the lines of:``
    - ``I responded with something like:``
    - ``To which I said, more or less:``

Recap assistant-only frames:
    - ``Earlier I pointed out:``
    - ``Recap of an earlier reply of mine:``
    - ``As I said before, roughly:``

Full prefixes (hedges and conversational framing):
    - ``Just to restate an exchange we had before, in case it helps:``
    - ``Going back over an earlier part of our chat (roughly as it went):``
    - ``For reference, here is that earlier conversation again, lightly paraphrased:``
    - ``If I remember right, this came up before:``
    - ``Repeating an older exchange, more or less word for word:``
    - ``Picking up a thread from earlier; it went something like this:``
    - ``To refresh the context, this is approximately what was said:``
    - ``I may be paraphrasing a little, but earlier we had this exchange:``

Synonym swaps:
    These match case-sensitively, on word boundaries, with the longest
    phrase first. Only lower-case forms are listed, so capitalised words
    (proper nouns, sentence starts) are left alone. The pairs were chosen to
    stay grammatical in common contexts, including a/an agreement.

    - ``I want to -> I'd like to``; ``I think -> I believe``;
      ``help me -> assist me``; ``looking for -> searching for``
    - ``a lot of -> plenty of``; ``lots of -> plenty of``;
      ``a bit -> a little``; ``kind of -> sort of``
    - ``tried to -> attempted to``; ``try to -> attempt to``
    - ``recently -> lately``; ``currently -> at the moment``;
      ``usually -> typically``; ``often -> frequently``; ``maybe -> perhaps``
    - ``really -> truly``; ``especially -> particularly``;
      ``probably -> likely``; ``approximately -> roughly``;
      ``however -> that said``; ``also -> additionally``
    - ``big -> large``; ``huge -> massive``; ``important -> essential``;
      ``interesting -> intriguing``; ``amazing -> incredible``;
      ``difficult -> challenging``; ``favorite -> preferred``;
      ``excited -> thrilled``; ``happy -> glad``
    - ``buy -> purchase``; ``bought -> purchased``; ``recommend -> suggest``;
      ``using -> utilizing``; ``quickly -> rapidly``
    - ``suggestions -> recommendations``; ``suggestion -> recommendation``;
      ``tips -> pointers``; ``ideas -> thoughts``; ``options -> choices``;
      ``advice -> guidance``; ``children -> kids``; ``car -> vehicle``;
      ``trip -> journey``; ``movie -> film``; ``movies -> films``;
      ``pictures -> photos``

Only the standard library is used here.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pacms_bench.longmemeval import Round

__all__ = [
    "FULL_PREFIXES",
    "RECAP_ASSISTANT_ONLY_FRAMES",
    "RECAP_REPLY_FRAMES",
    "RECAP_USER_FRAMES",
    "STYLES",
    "SYNONYMS",
    "PoolItem",
    "inject_redundancy",
    "restate",
]

STYLES: tuple[str, ...] = ("recap", "full")
"""Supported restatement styles."""

RECAP_USER_FRAMES: tuple[str, ...] = (
    "Earlier you mentioned:",
    "Quick recap of something you said before:",
    "As you brought up a while ago:",
    "Going back to an earlier message of yours:",
    "You noted at one point:",
    "Just recapping what you told me earlier:",
)
"""Frames that introduce the quoted user lead in a recap."""

RECAP_REPLY_FRAMES: tuple[str, ...] = (
    "I replied roughly:",
    "My answer was along the lines of:",
    "I responded with something like:",
    "To which I said, more or less:",
)
"""Frames that introduce the quoted assistant lead after a user lead."""

RECAP_ASSISTANT_ONLY_FRAMES: tuple[str, ...] = (
    "Earlier I pointed out:",
    "Recap of an earlier reply of mine:",
    "As I said before, roughly:",
)
"""Frames for recaps of rounds without user text (orphan assistant turns)."""

FULL_PREFIXES: tuple[str, ...] = (
    "Just to restate an exchange we had before, in case it helps:",
    "Going back over an earlier part of our chat (roughly as it went):",
    "For reference, here is that earlier conversation again, lightly paraphrased:",
    "If I remember right, this came up before:",
    "Repeating an older exchange, more or less word for word:",
    "Picking up a thread from earlier; it went something like this:",
    "To refresh the context, this is approximately what was said:",
    "I may be paraphrasing a little, but earlier we had this exchange:",
)
"""Hedge / framing prefixes for full-length restatements."""

SYNONYMS: dict[str, str] = {
    "I want to": "I'd like to",
    "I think": "I believe",
    "help me": "assist me",
    "looking for": "searching for",
    "a lot of": "plenty of",
    "lots of": "plenty of",
    "a bit": "a little",
    "kind of": "sort of",
    "tried to": "attempted to",
    "try to": "attempt to",
    "recently": "lately",
    "currently": "at the moment",
    "usually": "typically",
    "often": "frequently",
    "maybe": "perhaps",
    "really": "truly",
    "especially": "particularly",
    "probably": "likely",
    "approximately": "roughly",
    "however": "that said",
    "also": "additionally",
    "big": "large",
    "huge": "massive",
    "important": "essential",
    "interesting": "intriguing",
    "amazing": "incredible",
    "difficult": "challenging",
    "favorite": "preferred",
    "excited": "thrilled",
    "happy": "glad",
    "buy": "purchase",
    "bought": "purchased",
    "recommend": "suggest",
    "using": "utilizing",
    "quickly": "rapidly",
    "suggestions": "recommendations",
    "suggestion": "recommendation",
    "tips": "pointers",
    "ideas": "thoughts",
    "options": "choices",
    "advice": "guidance",
    "children": "kids",
    "car": "vehicle",
    "trip": "journey",
    "movie": "film",
    "movies": "films",
    "pictures": "photos",
}
"""Case-sensitive phrase swaps (see the module docstring)."""

RECAP_SWAP_PROB = 0.6
"""Probability of swapping each matching phrase in a recap."""

FULL_SWAP_PROB = 0.3
"""Probability of swapping each matching phrase in a full restatement."""

_SWAP_RE = re.compile(
    r"\b(?:" + "|".join(re.escape(k) for k in sorted(SYNONYMS, key=len, reverse=True)) + r")\b"
)
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_MARKUP_RE = re.compile(r"\*\*|__|`|^\s*(?:#+|>|[-*+]|\d+[.)])\s+")
_WS_RE = re.compile(r"\s+")

_LEAD_MIN_CHARS = 40
_LEAD_MAX_SENTENCES = 2
_LEAD_MAX_WORDS = 40


@dataclass(frozen=True)
class PoolItem:
    """One candidate context item in a (possibly redundancy-injected) pool.

    Attributes:
        id: ``r{index}`` for an original round, ``r{index}-x{k}`` for the k-th
            restatement of round ``index``.
        text: The text shown to the selector.
        position: Position in the pool (0-based; larger means more recent).
        is_evidence: True only for original evidence rounds.
        source_index: ``Round.index`` of the restated round (or of itself).
        is_restatement: True for injected restatements.
    """

    id: str
    text: str
    position: int
    is_evidence: bool
    source_index: int
    is_restatement: bool


def _swap(text: str, rng: random.Random, prob: float) -> str:
    """Replace each synonym-table phrase with probability ``prob``."""

    def repl(m: re.Match[str]) -> str:
        return SYNONYMS[m.group(0)] if rng.random() < prob else m.group(0)

    return _SWAP_RE.sub(repl, text)


def _lead(text: str) -> str:
    """Return the first sentence(s) of the first non-empty line, markup removed."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = _WS_RE.sub(" ", _MARKUP_RE.sub("", line)).strip()
    if not line:
        return ""
    out: list[str] = []
    for sentence in _SENTENCE_SPLIT_RE.split(line):
        out.append(sentence)
        if len(" ".join(out)) >= _LEAD_MIN_CHARS or len(out) >= _LEAD_MAX_SENTENCES:
            break
    words = " ".join(out).split()
    if len(words) > _LEAD_MAX_WORDS:
        return " ".join(words[:_LEAD_MAX_WORDS]) + " ..."
    return " ".join(words)


def _recap(round_: Round, template: int, rng: random.Random) -> str:
    user = _swap(_lead(round_.user), rng, RECAP_SWAP_PROB)
    reply = _swap(_lead(round_.assistant), rng, RECAP_SWAP_PROB)
    if user:
        text = f'{RECAP_USER_FRAMES[template % len(RECAP_USER_FRAMES)]} "{user}"'
        if reply:
            text += f' {RECAP_REPLY_FRAMES[template % len(RECAP_REPLY_FRAMES)]} "{reply}"'
        return text
    if reply:
        frame = RECAP_ASSISTANT_ONLY_FRAMES[template % len(RECAP_ASSISTANT_ONLY_FRAMES)]
        return f'{frame} "{reply}"'
    return f"{RECAP_USER_FRAMES[template % len(RECAP_USER_FRAMES)]} (an empty message)"


def _full(round_: Round, template: int, rng: random.Random) -> str:
    parts = [FULL_PREFIXES[template % len(FULL_PREFIXES)]]
    if round_.user:
        parts.append(f"user: {_swap(round_.user, rng, FULL_SWAP_PROB)}")
    if round_.assistant:
        parts.append(f"assistant: {_swap(round_.assistant, rng, FULL_SWAP_PROB)}")
    return "\n".join(parts)


def _n_templates(style: str) -> int:
    return len(RECAP_USER_FRAMES) if style == "recap" else len(FULL_PREFIXES)


def _check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")


def restate(round_: Round, *, style: str = "recap", template: int = 0, seed: int = 0) -> str:
    """Render one restatement of ``round_`` (mainly for inspection and docs).

    Args:
        round_: The round to restate.
        style: ``"recap"`` or ``"full"``.
        template: Template number (taken modulo the number of templates).
        seed: Seed for the synonym swaps.

    Returns:
        The restatement text.

    Raises:
        ValueError: If ``style`` is unknown.
    """
    _check_style(style)
    rng = random.Random(seed)
    return _recap(round_, template, rng) if style == "recap" else _full(round_, template, rng)


def inject_redundancy(
    rounds: Sequence[Round],
    level: int,
    *,
    style: str = "recap",
    seed: int = 0,
) -> list[PoolItem]:
    """Build a pool of the original rounds followed by shuffled filler restatements.

    See the module docstring for the full procedure and the templates.

    Args:
        rounds: The history (e.g. ``Question.rounds``), in the order to keep.
        level: Restatements per filler round (R >= 0). 0 returns only the
            originals.
        style: ``"recap"`` (short) or ``"full"`` (full length).
        seed: Seed of the ``random.Random`` that drives template choice,
            synonym swaps and the shuffle.

    Returns:
        ``len(rounds) + n_filler * level`` items. The originals come first, in
        input order, then the restatements in shuffled order. ``position``
        equals the list index.

    Raises:
        ValueError: If ``level`` is negative or not an int, ``style`` is
            unknown, or two rounds share an ``index``.
    """
    if isinstance(level, bool) or not isinstance(level, int):
        raise ValueError(f"level must be an int, got {level!r}")
    if level < 0:
        raise ValueError(f"level must be >= 0, got {level}")
    _check_style(style)
    if len({r.index for r in rounds}) != len(rounds):
        raise ValueError("rounds must have distinct indices")

    pool = [
        PoolItem(
            id=f"r{r.index}",
            text=r.text,
            position=i,
            is_evidence=r.is_evidence,
            source_index=r.index,
            is_restatement=False,
        )
        for i, r in enumerate(rounds)
    ]
    if level == 0:
        return pool

    rng = random.Random(seed)
    render = _recap if style == "recap" else _full
    n_templates = _n_templates(style)
    extra: list[tuple[str, str, int]] = []
    for r in rounds:
        if r.is_evidence:
            continue
        order = rng.sample(range(n_templates), n_templates)
        for k in range(level):
            text = render(r, order[k % n_templates], rng)
            extra.append((f"r{r.index}-x{k}", text, r.index))
    rng.shuffle(extra)
    start = len(pool)
    pool.extend(
        PoolItem(
            id=item_id,
            text=text,
            position=start + j,
            is_evidence=False,
            source_index=src,
            is_restatement=True,
        )
        for j, (item_id, text, src) in enumerate(extra)
    )
    return pool
