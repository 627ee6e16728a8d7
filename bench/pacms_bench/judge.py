"""LLM judge for LongMemEval QA: our own prompts, following the benchmark's per-type criteria.

LongMemEval grades a free-text answer with an LLM judge that applies a different criterion
per question type. The criteria below follow the ones the benchmark describes. The wording of
every prompt in this module was written for this project; no prompt text was copied.

Criteria (see :data:`JUDGE_CRITERIA`):

* ``default`` (``single-session-user``, ``single-session-assistant``, ``multi-session``): correct
  if the response contains the reference answer or an equivalent of it (or works through the
  steps that arrive at it); wrong if it gives only part of the reference answer.
* ``temporal-reasoning``: as ``default``, but counts of days, weeks or months that are off by
  one are accepted.
* ``knowledge-update``: as ``default``, and a response that also mentions the outdated value is
  correct as long as the latest value is the one it gives as the answer.
* ``single-session-preference``: the reference is a rubric. The response need not cover every
  point; it is correct if it recalls and uses the user's personal information correctly.
* ``abstention`` (any question id ending in ``_abs``): the reference explains why the question
  cannot be answered. The response is correct only if it declines, or says that the
  conversation does not contain the answer.

Verdicts:
    The judge is told to reply with exactly one word, ``CORRECT`` or ``WRONG``.
    :func:`parse_verdict` reads that word case-insensitively and tolerates the usual noise of
    small local models (markdown emphasis, punctuation, a ``Verdict:`` label, a JSON object, a
    ``<think>`` block, a trailing explanation). ``yes``/``no`` are accepted as synonyms, since
    the upstream judge uses them. Anything else is a parse failure (``None``):
    :func:`ajudge` then asks again, and after ``parse_retries`` failed re-asks the verdict is
    WRONG with ``parse_failed=True``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from pacms_bench.longmemeval import Question

__all__ = [
    "JUDGE_CRITERIA",
    "JUDGE_SYSTEM_PROMPT",
    "REASK_PROMPT",
    "JudgeResult",
    "ajudge",
    "build_judge_messages",
    "criterion_key",
    "message_text",
    "parse_verdict",
    "strip_reasoning",
]

JUDGE_SYSTEM_PROMPT = (
    "You grade answers given by a chat assistant that has a long-term memory of earlier "
    "conversations with a user. You receive the user's question, the grading reference and "
    "the assistant's response, together with the rule to grade by. Decide whether the "
    "response passes that rule. Judge only what the response says; do not reward style or "
    "length. Reply with exactly one word: CORRECT or WRONG."
)
"""System message of every judge call."""

_DEFAULT_RULE = (
    "Mark the response CORRECT if it contains the reference answer, or an answer that means "
    "the same thing (a paraphrase, a different unit or format of the same value, an "
    "equivalent name). It is also CORRECT if it works through the intermediate steps and "
    "arrives at the reference answer. Mark it WRONG if it gives a different answer, gives "
    "no answer, or gives only part of the reference answer (for example some of the items "
    "of a list, or one of several required facts)."
)

JUDGE_CRITERIA: dict[str, str] = {
    "default": _DEFAULT_RULE,
    "temporal-reasoning": _DEFAULT_RULE
    + " This is a question about dates or durations: when counting days, weeks or months, "
    "a response that is off by one from the reference (for example 18 days instead of 19, "
    "or 3 weeks instead of 4) is still CORRECT.",
    "knowledge-update": _DEFAULT_RULE
    + " The user's information changed over time, and the reference is the most recent "
    "value. A response that also mentions an earlier, outdated value is still CORRECT, as "
    "long as the value it gives as its answer is the most recent one.",
    "single-session-preference": (
        "The question asks for a personalised response, and the reference is a rubric that "
        "describes what a good personalised response looks like. The response does not have "
        "to cover every point of the rubric. Mark it CORRECT if it recalls the user's "
        "personal information (their preferences, situation, history) and uses it correctly "
        "to tailor the answer. Mark it WRONG if it ignores that information, gets it wrong, "
        "or gives only generic advice."
    ),
    "abstention": (
        "This question cannot be answered from the earlier conversations; the reference "
        "explains why (for example, the information was never mentioned, or it differs from "
        "what the question assumes). Mark the response CORRECT only if it declines to answer, "
        "says it does not know, or says the conversations do not contain this information "
        "(pointing out the false assumption also counts). Mark it WRONG if it gives a "
        "substantive answer as if the information were known."
    ),
}
"""Grading rule per criterion key (see :func:`criterion_key`)."""

_REFERENCE_LABELS: dict[str, tuple[str, str]] = {
    "default": ("reference_answer", "Reference answer"),
    "temporal-reasoning": ("reference_answer", "Reference answer"),
    "knowledge-update": ("reference_answer", "Reference answer (the most recent value)"),
    "single-session-preference": ("rubric", "Rubric"),
    "abstention": ("explanation", "Why the question cannot be answered"),
}

REASK_PROMPT = (
    "Your reply could not be read as a verdict. Reply again with exactly one word, CORRECT "
    "or WRONG, and nothing else."
)
"""Follow-up message sent when a verdict could not be parsed."""

_TRUE_WORDS = frozenset({"correct", "yes"})
_FALSE_WORDS = frozenset({"wrong", "incorrect", "no"})
_VERDICT_WORDS = frozenset({"correct", "incorrect", "wrong"})  # verdicts inside a sentence
_LABEL_WORDS = frozenset(
    {"verdict", "label", "answer", "final", "judgment", "judgement", "grade", "result", "output"}
)
_NEGATIONS = frozenset({"not", "never", "neither", "nor", "nothing", "hardly", "cannot"})
# Contractions written without the apostrophe.
_BARE_NEGATIONS = frozenset(
    {
        "isnt",
        "arent",
        "wasnt",
        "werent",
        "dont",
        "doesnt",
        "didnt",
        "cant",
        "wont",
        "wouldnt",
        "shouldnt",
        "couldnt",
        "aint",
    }
)
# Words that make a verdict partial; the reply is then unreadable and the judge is re-asked.
_HEDGES = frozenset(
    {"partially", "partly", "mostly", "largely", "somewhat", "almost", "nearly", "half"}
)
# A verdict word followed by one of these names a thing ("the correct answer is ..."), it
# does not grade the response.
_NOUNS = frozenset(
    {
        "answer",
        "answers",
        "value",
        "values",
        "date",
        "dates",
        "number",
        "count",
        "one",
        "reference",
        "information",
        "option",
        "choice",
        "amount",
        "total",
        "response",
        "name",
    }
)
# In order of trust: "answer" last, since it often holds the graded text ("19 days").
_JSON_KEYS = (
    "verdict",
    "correct",
    "is_correct",
    "label",
    "result",
    "grade",
    "judgment",
    "judgement",
    "answer",
)
# Words that start a new part of a sentence: a negation before one of them does not reach a
# verdict after it ("it says it doesn't know, so it is correct").
_CONJUNCTIONS = frozenset(
    {
        "so",
        "but",
        "because",
        "since",
        "which",
        "therefore",
        "thus",
        "hence",
        "although",
        "though",
        "whereas",
        "while",
        "however",
    }
)
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": " "})
_THINK_RE = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)?")
# Clause ends: punctuation, and dashes between words ("WRONG - it says 25 days").
_CLAUSE_RE = re.compile(r"([.,;:!?\n(){}\[\]]+|\s-+\s|[\u2013\u2014]+)")


def criterion_key(question: Question) -> str:
    """Return the key of :data:`JUDGE_CRITERIA` that applies to ``question``.

    Abstention (an ``_abs`` question id) takes precedence over the question type; types
    without a rule of their own use ``"default"``.

    Args:
        question: The question being graded.

    Returns:
        ``"abstention"``, ``"temporal-reasoning"``, ``"knowledge-update"``,
        ``"single-session-preference"`` or ``"default"``.
    """
    if question.is_abstention:
        return "abstention"
    if question.question_type in JUDGE_CRITERIA:
        return question.question_type
    return "default"


def build_judge_messages(question: Question, gold: str, response: str) -> list[BaseMessage]:
    """Build the judge prompt for one answer.

    Args:
        question: The question (its type and id choose the criterion; its text is shown).
        gold: The grading reference: the answer, the rubric (preference questions) or the
            explanation of why it cannot be answered (abstention questions). Usually
            ``question.answer``.
        response: The reader's answer.

    Returns:
        ``[SystemMessage, HumanMessage]``. The human message holds the rule, the question,
        the reference and the response, each in its own tagged block.
    """
    key = criterion_key(question)
    tag, label = _REFERENCE_LABELS[key]
    body = (
        f"Grading rule:\n{JUDGE_CRITERIA[key]}\n\n"
        f"<question>\n{question.question}\n</question>\n\n"
        f"{label}:\n<{tag}>\n{str(gold).strip()}\n</{tag}>\n\n"
        f"Assistant's response:\n<response>\n{response.strip()}\n</response>\n\n"
        "Does the response pass the grading rule? Reply with exactly one word: CORRECT or WRONG."
    )
    return [SystemMessage(content=JUDGE_SYSTEM_PROMPT), HumanMessage(content=body)]


def strip_reasoning(text: str) -> str:
    """Remove ``<think>…</think>`` style blocks (and an unclosed trailing one) from ``text``."""
    text = _THINK_RE.sub(" ", text)
    lowered = text.lower()
    for tag in ("<think>", "<thinking>", "<reasoning>"):
        pos = lowered.find(tag)
        if pos != -1:
            text = text[:pos]
            lowered = lowered[:pos]
    for tag in ("</think>", "</thinking>", "</reasoning>"):  # closing tag without opener
        pos = lowered.rfind(tag)
        if pos != -1:
            text = text[pos + len(tag) :]
            lowered = lowered[pos + len(tag) :]
    return text.strip()


def _word_verdict(word: str) -> bool | None:
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    return None


def _negation(word: str) -> bool:
    return word in _NEGATIONS or word in _BARE_NEGATIONS or word.endswith("n't")


def _json_fields(text: str) -> dict[str, Any] | None:
    """The fields of the JSON object in ``text`` (keys lower-cased), or None if it holds none."""
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end <= start:
        return None
    try:
        obj = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return {str(k).lower(): v for k, v in obj.items()} if isinstance(obj, dict) else None


def _json_verdict(fields: dict[str, Any]) -> bool | None:
    """The verdict of a JSON reply such as ``{"verdict": "WRONG"}`` or ``{"correct": true}``."""
    for key in _JSON_KEYS:
        value = fields.get(key)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and "{" not in value:
            verdict = parse_verdict(value)
            if verdict is not None:
                return verdict
    return None


def _clauses(text: str) -> list[tuple[list[str], bool]]:
    """The words of each clause of ``text`` (lower-case), and whether the clause asks (``?``).

    Clauses end at punctuation and at dashes between words, and a conjunction starts a new one.
    """
    parts = _CLAUSE_RE.split(text.lower())
    out: list[tuple[list[str], bool]] = []
    for chunk, end in zip(parts[::2], [*parts[1::2], ""]):
        words: list[str] = []
        for word in _WORD_RE.findall(chunk):
            if word in _CONJUNCTIONS:
                if words:
                    out.append((words, False))
                words = []
            else:
                words.append(word)
        if words:
            out.append((words, "?" in end))
    return out


def _sentence_verdict(words: list[str]) -> bool | None:
    """The verdict of a clause inside the reply (None if it gives none).

    That is a ``yes``/``no`` standing alone, or the clause's last verdict word that does not
    name a thing, flipped by a negation before it.

    Raises:
        ValueError: If a hedge (``partially``, ``mostly``, ...) qualifies the verdict.
    """
    if len(words) == 1 and words[0] in ("yes", "no"):
        return words[0] == "yes"
    for i in range(len(words) - 1, -1, -1):
        names_a_thing = i + 1 < len(words) and words[i + 1] in _NOUNS
        if words[i] not in _VERDICT_WORDS or names_a_thing:
            continue
        before = words[:i]
        if any(w in _HEDGES for w in before):
            raise ValueError("hedged verdict")
        verdict = words[i] == "correct"
        return not verdict if any(_negation(w) for w in before) else verdict
    return None


def _clause_verdict(words: list[str]) -> bool | None:
    """The verdict of a clause that is a verdict word alone, or a negated one (``Not correct``)."""
    if len(words) == 1:
        return _word_verdict(words[0])
    if len(words) == 2 and _negation(words[0]) and words[1] in _TRUE_WORDS | _FALSE_WORDS:
        verdict = _word_verdict(words[1])
        return None if verdict is None else not verdict
    return None


def parse_verdict(text: str) -> bool | None:
    """Read a judge reply as a verdict.

    The reply is read after reasoning blocks are removed, typographic apostrophes are made
    plain and the text is lower-cased:

    1. A JSON object decides by its ``verdict``/``label``/``correct``/... field
       (``{"correct": false}`` is False).
    2. Otherwise the reply is cut into clauses at punctuation, at dashes between words and
       before conjunctions (``so``, ``but``, ``which``, ...). If its first clause, after label
       words (``verdict``, ``final answer``, ...), is a verdict word alone (``CORRECT``,
       ``Wrong!``, ``yes``, ``No.``) or a negated one (``Not correct``), that decides.
    3. Otherwise every clause that is not a question gives the verdict of its last
       ``correct``/``incorrect``/``wrong`` that does not name a thing (``the correct
       answer``), or of a ``yes``/``no`` standing alone. A negation before that word in its
       clause flips it (``not``, ``never``, ``nothing``, any ``n't``: ``I don't think it is
       correct`` is False); a hedge there (``partially``, ``mostly``, ...) makes the reply
       unreadable. If these verdicts agree, that decides; if they differ (``WRONG since the
       reference says 19, which is correct``), the reply is unreadable.
    4. Anything else is unreadable.

    Args:
        text: The judge's raw reply.

    Returns:
        True (correct), False (wrong) or None (not a verdict).

    Example:
        >>> parse_verdict("**CORRECT**"), parse_verdict("Verdict: wrong."), parse_verdict("maybe")
        (True, False, None)
        >>> parse_verdict("Correct answer: 19 days. The response says 25, so it is wrong.")
        False
    """
    if not isinstance(text, str):
        return None
    body = strip_reasoning(text).translate(_APOSTROPHES)
    fields = _json_fields(body)
    if fields is not None:  # the words of a JSON reply without a verdict field are none
        return _json_verdict(fields)
    clauses = _clauses(body)
    while clauses and clauses[0][0][0] in _LABEL_WORDS:
        rest = clauses[0][0][1:]
        if rest:
            clauses[0] = (rest, clauses[0][1])
        else:
            clauses.pop(0)
    if not clauses:
        return None
    head = _clause_verdict(clauses[0][0])
    if head is not None:
        return head
    try:
        found = {_sentence_verdict(words) for words, asks in clauses if not asks}
    except ValueError:  # hedged
        return None
    found.discard(None)
    return found.pop() if len(found) == 1 else None


def message_text(message: Any) -> str:
    """Return the text of a chat model reply (``AIMessage``, plain string or content blocks)."""
    if isinstance(message, str):
        return message
    if isinstance(message, BaseMessage):
        return message.text
    content = getattr(message, "content", message)
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return str(content)


@dataclass
class JudgeResult:
    """Outcome of :func:`ajudge`.

    Attributes:
        correct: The verdict (False when it could not be parsed).
        raw: The judge's last raw reply.
        parse_failed: True when no attempt produced a readable verdict.
        attempts: Number of judge calls made (1 plus the re-asks).
        messages: The replies, in order (kept for usage accounting).
    """

    correct: bool
    raw: str
    parse_failed: bool
    attempts: int
    messages: list[Any] = field(default_factory=list)


async def ajudge(
    judge: BaseChatModel,
    question: Question,
    gold: str,
    response: str,
    *,
    parse_retries: int = 1,
    invoke: Callable[[list[BaseMessage]], Awaitable[Any]] | None = None,
) -> JudgeResult:
    """Ask ``judge`` for a verdict, re-asking when the reply is not a verdict.

    Exceptions raised by the model propagate (the caller owns retries with backoff, per call
    through ``invoke``).

    Args:
        judge: Any LangChain chat model.
        question: The question being graded.
        gold: The grading reference (see :func:`build_judge_messages`).
        response: The reader's answer.
        parse_retries: How many times to re-ask after an unreadable reply. The re-ask
            appends the unreadable reply and :data:`REASK_PROMPT` to the conversation.
        invoke: Makes one judge call from the messages (default: ``judge.ainvoke``); a
            caller wraps it to add a timeout and retries to each call, or to record replies.

    Returns:
        The :class:`JudgeResult`. After ``parse_retries`` unreadable re-asks the verdict is
        WRONG with ``parse_failed=True``.
    """
    call = invoke if invoke is not None else judge.ainvoke
    messages = build_judge_messages(question, gold, response)
    replies: list[Any] = []
    raw = ""
    for attempt in range(parse_retries + 1):
        reply = await call(messages)
        replies.append(reply)
        raw = message_text(reply)
        verdict = parse_verdict(raw)
        if verdict is not None:
            return JudgeResult(verdict, raw, False, attempt + 1, replies)
        messages = [*messages, AIMessage(content=raw), HumanMessage(content=REASK_PROMPT)]
    return JudgeResult(False, raw, True, parse_retries + 1, replies)
