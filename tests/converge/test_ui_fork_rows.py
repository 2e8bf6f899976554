"""The fork form of a large finished run stored as rows reads its head and its first rows.

`GET /runs/RUN/fork` of a run of more than `WHOLE_SHOW` facts never assembles the whole
record (`store.load` is counted): the cycle count and the trust check come from the head,
and "N fact(s) in the context at the end of cycle C" (with the first of them) from the
counts beside the entries and the first entries. Each test tries to break that: the page
is the one the whole record gives, byte for byte but its one-time field, at every cycle;
rows without counts give it from the whole record; counts edited by hand are an error page,
never a form. On SQLite and, with DATABASE_URL set, on PostgreSQL.
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from test_durable import sql
from test_ui_rows import FACTS, KEY, PER_CYCLE, Target, console, counting, run_of, target

from converge.stores import _rows_read

__all__ = ["target"]


@pytest.fixture(autouse=True)
def _keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)


def fork_path(run_id: str, at: str | None = None) -> str:
    query = "" if at is None else f"?at={quote(at)}"
    return f"/runs/{quote(run_id, safe='')}/fork{query}"


def without_once(html: str) -> str:
    """`html` less its one-time field and the CSRF token (each console has its own)."""
    return re.sub(r'name="(once|csrf)" value="[^"]*"', r'name="\1" value=""', html)


ASKED = (None, "0", "1", "2", "5", "9", "16", "x", "99999")
"""The cycles asked for (`None`: none), with the run's last and the one before it."""


def asked(cycles: int) -> tuple[str | None, ...]:
    return (*ASKED, str(cycles - 1), str(cycles))


def forms(
    target: Target, run_id: str, monkeypatch: pytest.MonkeyPatch, whole: int, cycles: int
) -> list[str]:
    """The fork form at each cycle `asked`, with `WHOLE_SHOW` at `whole`; no whole record
    read when `whole` makes the run large."""
    monkeypatch.setattr(_rows_read, "WHOLE_SHOW", whole)
    store = counting(target)
    with console(store) as client:
        answers = [client.get(fork_path(run_id, at)) for at in asked(cycles)]
    pages = [f"{answer.status_code} {without_once(answer.text)}" for answer in answers]
    assert store.loads == (0 if whole < FACTS else len(asked(cycles)))
    return pages


def test_the_fork_form_from_the_head_is_the_one_the_record_gives(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, record = run_of(target, FACTS)
    cycles = record.cycles
    assert cycles > FACTS // PER_CYCLE
    from_record = forms(target, run_id, monkeypatch, 10**9, cycles)
    from_head = forms(target, run_id, monkeypatch, 100, cycles)
    assert from_head == from_record
    said = [re.findall(r'data-facts-at="(\d+)"', page) for page in from_head]
    for at, found in zip(asked(cycles), said, strict=True):
        cycle = record.cycles if at is None or not at.isdecimal() else min(int(at), record.cycles)
        expected = sum(1 for fact in record.facts if fact.promotion.cycle <= cycle)
        assert found == [str(expected)], at
    assert "... 151 more" in from_head[0]  # 651 facts at the end: 500 listed
    assert from_head[ASKED.index("x")].startswith("400 ")
    assert from_head[ASKED.index("99999")].startswith("400 ")


def test_rows_without_counts_give_the_form_from_the_whole_record(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, record = run_of(target, FACTS)
    from_record = forms(target, run_id, monkeypatch, 10**9, record.cycles)
    sql(target, "UPDATE converge_journal SET counts = NULL WHERE run_id = ? AND seq = 3", run_id)
    monkeypatch.setattr(_rows_read, "WHOLE_SHOW", 100)
    store = counting(target)
    with console(store) as client:
        answers = [client.get(fork_path(run_id, at)) for at in asked(record.cycles)]
    assert store.loads == len(answers)
    assert [f"{a.status_code} {without_once(a.text)}" for a in answers] == from_record


def test_counts_edited_by_hand_are_an_error_page_not_a_form(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = run_of(target, FACTS)
    sql(
        target,
        "UPDATE converge_journal SET counts = ? WHERE run_id = ? AND seq = 3",
        '{"cycle": 1, "keys": [["hypotheses", 39]]}',
        run_id,
    )
    monkeypatch.setattr(_rows_read, "WHOLE_SHOW", 100)
    store = counting(target)
    with console(store) as client:
        answer = client.get(fork_path(run_id, "5"))
    assert answer.status_code == 500
    assert "Cannot read this run" in answer.text
    assert f"run {run_id}: the counts beside its journal entries are not those" in answer.text
    assert "data-fork-form" not in answer.text
