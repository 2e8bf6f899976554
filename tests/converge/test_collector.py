"""`paused_collector`: the cyclic collector off inside, back as it was after."""

from __future__ import annotations

import gc

import pytest

from converge._core._collector import paused_collector


def _fail_inside() -> None:
    with paused_collector():
        assert not gc.isenabled()
        raise RuntimeError("boom")


def test_paused_collector_turns_the_collector_back_on_even_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"):
        _fail_inside()
    assert gc.isenabled()


def test_paused_collector_leaves_a_collector_that_was_off_off() -> None:
    gc.disable()
    try:
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
