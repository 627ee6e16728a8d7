"""One vocabulary for the planner's handles and the stubs' locators (``messages.locators``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from langchain_pacms.messages.handles import PATH, handles_of
from langchain_pacms.messages.locators import locator_rank, ranked_locators, value_tokens

FRAGMENTS = [
    "src/app.py",
    "./django/conf/global_settings.py",
    "https://x.io/a?b=1",
    "HAT039",
    "credit_card_4421486",
    "2FBBAH",
    "2024-05-21",
    "1.2.840.10008.1.2",
    "1e-8",
    "23553",
    "3.5",
    "742",
    "parse",
    "the",
    "ABC-123",
    "test_x.py",
    "Gold",
]


def test_a_quoted_argument_gives_up_its_values_one_by_one() -> None:
    # a stub shows the quoted literal whole; a later call takes the line numbers inside it
    text = "cat -n pydicom/dataset.py | sed -n '2225,2280p'"
    assert "2225,2280p" in ranked_locators(text)
    assert list(value_tokens(text)) == ["pydicom/dataset.py", "2225", "2280p"]
    assert handles_of(text) == {"pydicom/dataset.py", "2225", "2280p"}


def test_key_value_pairs_give_their_key_and_their_value() -> None:
    assert handles_of("phim1=0.5 user=HAT039") == {"phim1", "HAT039"}
    assert ranked_locators("phim1=0.5")[0] == "phim1=0.5"  # a stub keeps the pair whole


def test_markup_closing_tags_are_no_values() -> None:
    text = "<returncode>0</returncode>\n<output>\n./src/a.py\n</output>"
    assert handles_of(text) == {"./src/a.py"}
    assert ranked_locators(text) == ["./src/a.py"]


def test_dates_and_serials_stay_whole_on_both_sides() -> None:
    text = "booked 2024-05-21, uid 1.2.840.10008.1.2 in 3.5 s"
    assert {"2024-05-21", "1.2.840.10008.1.2"} <= set(ranked_locators(text))
    assert locator_rank("2024-05-21") == locator_rank("1.2.840.10008.1.2") == 4
    assert handles_of(text) == {"2024-05-21", "1.2.840.10008.1.2"}  # not the short decimal


def test_file_names_of_every_known_extension_are_paths() -> None:
    for name in ("App.tsx", "main.cpp", "style.css", "task.rb", "README.rst", "a.yml"):
        assert PATH.fullmatch(name) and locator_rank(name) == 1 and name in handles_of(name)


@given(st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=12), st.sampled_from([" ", "\n"]))
def test_every_strong_or_mixed_locator_is_a_handle(parts: list[str], sep: str) -> None:
    text = sep.join(parts)
    handles = handles_of(text)
    for token in ranked_locators(text):
        if locator_rank(token) <= 2 and len(token) >= 4 and "=" not in token:
            assert token in handles
    assert all(h in text for h in handles)  # a handle is an exact substring
