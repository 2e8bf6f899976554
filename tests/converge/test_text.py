"""`storable` and `identity_problem`: text as a record keeps it, and names a record can hold."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from converge._core._canonical import MAX_JSON_DIGITS, freeze_json
from converge._core._text import MAX_TEXT, identity_problem, storable, utf8_size

SURROGATE = json.loads('"\\ud800"')
LOW = json.loads('"\\udfff"')


def test_storable_returns_storable_text_as_it_is() -> None:
    text = "plain text, é and 😀 too"
    assert storable(text) is text
    assert storable("") == ""


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        (f"a{SURROGATE}b", "a\\ud800b [1 unstorable character escaped]"),
        ("a\x00b", "a\\x00b [1 unstorable character escaped]"),
        (
            f"{SURROGATE}\x00{LOW}",
            "\\ud800\\x00\\udfff [3 unstorable characters escaped]",
        ),
    ],
)
def test_storable_escapes_lone_surrogates_and_nul_and_says_how_many(text: str, stored: str) -> None:
    assert storable(text) == stored
    stored.encode("utf-8")


def test_storable_cuts_text_past_the_limit_and_says_its_length() -> None:
    assert (
        storable("x" * (MAX_TEXT + 5))
        == "x" * MAX_TEXT + f"… [{MAX_TEXT + 5} characters, truncated]"
    )
    assert storable("abcdef", limit=3) == "abc… [6 characters, truncated]"
    assert storable(f"ab{SURROGATE}def", limit=3) == (
        "ab\\ud800 [1 unstorable character escaped]… [6 characters, truncated]"
    )
    long = "y" * (MAX_TEXT + 1)
    assert storable(long, limit=None) is long


def test_storable_gives_plain_text_for_a_subclass() -> None:
    class Loud(str):
        def __format__(self, spec: str) -> str:
            raise RuntimeError("formatted")

    stored = storable(Loud("quiet"))
    assert type(stored) is str
    assert stored == "quiet"


@given(st.text(alphabet=st.characters(exclude_categories=())))
def test_storable_text_always_encodes_and_keeps_what_was_storable(text: str) -> None:
    stored = storable(text, limit=None)
    stored.encode("utf-8")
    assert "\x00" not in stored
    if "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert stored == text


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (f"a{SURROGATE}", "holds a lone surrogate (U+D800) at position 1"),
        (f"é{LOW}", "holds a lone surrogate (U+DFFF) at position 1"),
        ("a\x00", "holds NUL (U+0000) at position 1"),
    ],
)
def test_identity_problem_names_the_first_character_a_name_may_not_hold(
    name: str, problem: str
) -> None:
    said = identity_problem(name)
    assert said is not None
    assert said.startswith(problem)


@pytest.mark.parametrize(
    "name", ["planner", "my suggestor", "résumé-writer", "規劃者", "a/b:c", "tab\there"]
)
def test_identity_problem_accepts_what_a_record_can_store(name: str) -> None:
    assert identity_problem(name) is None


def test_utf8_size_is_the_encoded_length_without_copying_whole() -> None:
    text = "é" * ((1 << 20) + 3) + "a"
    assert utf8_size(text) == len(text.encode("utf-8"))
    assert utf8_size("plain") == 5


def test_freeze_json_escapes_text_and_keys_in_escape_mode_only() -> None:
    value = {f"k{SURROGATE}": ["v\x00", "fine"]}
    frozen = freeze_json(value, "metadata", escape=True)
    assert frozen == {
        "k\\ud800 [1 unstorable character escaped]": [
            "v\\x00 [1 unstorable character escaped]",
            "fine",
        ]
    }
    with pytest.raises(ValueError, match="metadata key 'k\\\\ud800' holds a lone surrogate"):
        freeze_json(value, "metadata")


def test_freeze_json_refuses_a_key_that_escapes_into_another() -> None:
    taken = "k\\ud800 [1 unstorable character escaped]"
    with pytest.raises(ValueError, match=r"escaped is .*, another of its keys"):
        freeze_json({taken: 1, f"k{SURROGATE}": 2}, "metadata", escape=True)


def test_freeze_json_refuses_an_integer_no_json_reader_reads_back() -> None:
    assert freeze_json(10**MAX_JSON_DIGITS - 1) == 10**MAX_JSON_DIGITS - 1
    for huge in (10**MAX_JSON_DIGITS, -(10**MAX_JSON_DIGITS)):
        with pytest.raises(
            ValueError, match=f"payload.n holds an integer of more than {MAX_JSON_DIGITS}"
        ):
            freeze_json({"n": huge})
