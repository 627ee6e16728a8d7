"""A call run again supersedes the first run only when it shows the same state."""

from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage
from pacms_fakes import tool_round

from langchain_pacms.lifecycle import HeuristicPlanner, PlannerTuning, index_messages

TUNING = PlannerTuning(
    fold_min_tokens=60, mask_min_tokens=60, keep_above=1.0, keep_recent=0, keep_file_views=False
)


def traceback(path: str, line: int) -> str:
    frames = [f'  File "/testbed/{path}", line {line + k}, in step_{k}' for k in range(30)]
    return "\n".join(["Traceback (most recent call last):", *frames, "ValueError: bad value"])


def history(*steps: tuple[str, str]) -> list[BaseMessage]:
    """A task, then one bash call per ``(command, output)``, then a user turn."""
    msgs: list[BaseMessage] = [HumanMessage("Fix the crash in the parser", id="h")]
    for n, (command, output) in enumerate(steps):
        msgs += tool_round("bash", {"command": command}, output, n)
    return [*msgs, HumanMessage("and now?", id="h2")]


def first_run(msgs: list[BaseMessage]) -> tuple[str, str] | None:
    """The op and reason of the plan's action on the first tool call, if any."""
    index = index_messages(msgs)
    first = next(o.id for o in index.objects if o.kind == "tool")
    plan = HeuristicPlanner(tuning=TUNING).plan(index, msgs)
    return next(((a.op, a.reason) for a in plan.actions if a.target == first), None)


def test_a_script_run_again_with_another_output_does_not_supersede_the_first_run() -> None:
    msgs = history(
        ("python reproduce.py", traceback("pkg/parser.py", 10)),
        ("sed -i 's/int(/float(/' pkg/parser.py", ""),
        ("python reproduce.py", traceback("pkg/lexer.py", 40)),
    )
    action = first_run(msgs)
    assert action is None or action[0] != "prune", action


def test_a_script_run_again_with_the_same_output_supersedes_the_first_run() -> None:
    msgs = history(
        ("python reproduce.py", traceback("pkg/parser.py", 10)),
        ("sed -i 's/int(/float(/' pkg/parser.py", ""),
        ("python reproduce.py", traceback("pkg/parser.py", 10)),
    )
    assert first_run(msgs) == (
        "prune",
        "superseded by function:tool:3: the same call runs again later",
    )


def test_a_read_again_with_nothing_changed_in_between_supersedes_the_first() -> None:
    body = "\n".join(f"line {n}: value = {n * 7}" for n in range(80))
    msgs = history(
        ("sed -n '1,80p' pkg/parser.py", body),
        ("grep -rn value pkg", "pkg/parser.py:3: value = 14"),
        ("sed -n '1,80p' pkg/parser.py", body + "\n"),  # a trailing newline: another output
    )
    action = first_run(msgs)
    assert action is not None and action[0] == "prune", action


def test_a_read_again_after_an_edit_with_another_output_does_not_supersede_the_first() -> None:
    body = "\n".join(f"line {n}: value = {n * 7}" for n in range(80))
    msgs = history(
        ("sed -n '1,80p' pkg/parser.py", body),
        ("sed -i 's/value/total/' pkg/parser.py", ""),
        ("sed -n '1,80p' pkg/parser.py", body.replace("value", "total")),
    )
    action = first_run(msgs)
    assert action is None or action[0] != "prune", action
