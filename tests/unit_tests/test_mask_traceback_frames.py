"""A mask keeps the traceback frames of what it elides: the paths the agent opens next."""

from __future__ import annotations

import pytest

from langchain_pacms.lifecycle.mask import mask_text
from langchain_pacms.messages.locators import locator_lines


def test_a_python_frame_is_a_locator_line() -> None:
    frame = '  File "/testbed/a/b.py", line 5, in f'
    assert locator_lines(frame, 500) == [frame]


@pytest.mark.parametrize(
    "frame",
    [
        "    at parse (/app/src/parser.js:10:5)",  # Node
        "\tat com.acme.Parser.parse(Parser.java:42)",  # Java
        "tests/test_io.py:12: AssertionError",  # pytest
        "/usr/src/app/main.go:12 +0x1d",  # Go
        "thread 'main' panicked at src/main.rs:10:5",  # Rust
        "  from /app/lib/reader.rb:10:in `read'",  # Ruby
    ],
)
def test_the_usual_frame_shapes_are_locator_lines(frame: str) -> None:
    assert locator_lines(frame, 500) == [frame]


def test_every_frame_is_kept_even_in_a_file_named_before() -> None:
    frames = [
        '  File "/testbed/pkg/io.py", line 5, in read',
        '  File "/testbed/pkg/io.py", line 88, in _decode',
        '  File "/testbed/pkg/io.py", line 88, in _decode',  # the same frame again: once
        "    raise ValueError(value)",
    ]
    assert locator_lines("\n".join(frames), 500) == frames[:2]


def test_a_masked_traceback_keeps_its_frames() -> None:
    lines = [f"collecting item {n}" for n in range(200)]
    lines[100:100] = [
        "Traceback (most recent call last):",
        '  File "/testbed/reproduce.py", line 3, in <module>',
        '  File "/testbed/astropy/io/fits/card.py", line 1275, in _format_float',
        '    value_str = f"{value:.16G}"',
        "ValueError: bad float",
    ]
    masked = mask_text("\n".join(lines), 200, 100, 500)
    assert "collecting item 100" not in masked  # elided
    assert '  File "/testbed/reproduce.py", line 3, in <module>' in masked
    assert 'File "/testbed/astropy/io/fits/card.py", line 1275, in _format_float' in masked
