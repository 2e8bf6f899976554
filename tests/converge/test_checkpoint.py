"""Checkpoints: plain JSON, verified on restore, signed, resumable in another process."""

import json
import sys
from pathlib import Path

import anyio
import pytest
from hitl_formation import SIGNING_KEY, build_engine

from converge import (
    Checkpoint,
    GateDecision,
    InvalidCheckpointError,
    InvalidResumeError,
    StopReason,
)
from converge_suggestors import SeedSuggestor

GATE = "gate:2:strategies/costly"
HERE = Path(__file__).resolve().parent


async def paused_checkpoint(signing_key: str | None = SIGNING_KEY) -> Checkpoint:
    result = await build_engine(signing_key=signing_key).run()
    assert result.stop_reason is StopReason.AWAITING_HUMAN
    assert result.checkpoint is not None
    return result.checkpoint


def edited(checkpoint: Checkpoint, edit: str) -> Checkpoint:
    data = json.loads(checkpoint.model_dump_json())
    if edit == "content":
        data["facts"][0]["content"] = "forged"
    elif edit == "drop-fact":
        data["facts"].pop()
    elif edit == "pending":
        data["pending"][0]["proposal"]["content"] = "Buy everything"
    elif edit == "tokens":
        data["tokens"] = 0
    return Checkpoint.model_validate_json(json.dumps(data))


async def test_checkpoint_round_trips_through_json() -> None:
    checkpoint = await paused_checkpoint()
    again = Checkpoint.model_validate_json(checkpoint.model_dump_json())
    assert again == checkpoint
    assert checkpoint.signature is not None


async def test_resume_from_json_gives_the_same_root_as_resuming_in_process() -> None:
    engine = build_engine()
    paused = await engine.run()
    assert paused.checkpoint is not None
    decision = [GateDecision.approve(GATE, by="jane")]
    in_process = await engine.resume(paused.checkpoint, decision)
    text = paused.checkpoint.model_dump_json()
    from_json = await build_engine().resume(Checkpoint.model_validate_json(text), decision)
    assert from_json.integrity == in_process.integrity
    assert [f.model_dump() for f in from_json.context.facts()] == [
        f.model_dump() for f in in_process.context.facts()
    ]


async def test_resume_in_a_new_process_gives_the_same_root(tmp_path: Path) -> None:
    engine = build_engine()
    paused = await engine.run()
    assert paused.checkpoint is not None
    path = tmp_path / "checkpoint.json"
    path.write_text(paused.checkpoint.model_dump_json(), encoding="utf-8")
    completed = await anyio.run_process(
        [sys.executable, str(HERE / "hitl_formation.py"), str(path), GATE, "approve"]
    )
    remote = json.loads(completed.stdout)
    local = await engine.resume(paused.checkpoint, [GateDecision.approve(GATE, by="jane")])
    assert remote["stop_reason"] == "converged"
    assert remote["root"] == local.integrity.merkle_root
    assert remote["facts"] == [f.ref for f in local.context.facts()]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("content", "bad signature"),
        ("drop-fact", "bad signature"),
        ("pending", "bad signature"),
        ("tokens", "bad signature"),
    ],
)
async def test_a_tampered_signed_checkpoint_is_refused(edit: str, message: str) -> None:
    checkpoint = edited(await paused_checkpoint(), edit)
    engine = build_engine()
    with pytest.raises(InvalidCheckpointError, match=message):
        await engine.resume(checkpoint, [GateDecision.approve(GATE, by="jane")])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("content", "digest .* does not match its fields"),
        ("drop-fact", "not to the recorded Merkle root"),
    ],
)
async def test_an_unsigned_checkpoint_is_still_checked_against_its_root(
    edit: str, message: str
) -> None:
    checkpoint = edited(await paused_checkpoint(signing_key=None), edit)
    engine = build_engine(signing_key=None)
    with pytest.raises(InvalidCheckpointError, match=message):
        await engine.resume(checkpoint, [GateDecision.approve(GATE, by="jane")])


async def test_an_unsigned_checkpoint_is_refused_by_a_signing_engine() -> None:
    checkpoint = await paused_checkpoint(signing_key=None)
    with pytest.raises(InvalidCheckpointError, match="is unsigned"):
        await build_engine().resume(checkpoint, [GateDecision.approve(GATE, by="jane")])


async def test_a_checkpoint_signed_with_another_key_is_refused() -> None:
    checkpoint = await paused_checkpoint(signing_key="other-key")
    with pytest.raises(InvalidCheckpointError, match="bad signature"):
        await build_engine().resume(checkpoint, [GateDecision.approve(GATE, by="jane")])


async def test_a_checkpoint_from_other_registrations_is_refused() -> None:
    checkpoint = await paused_checkpoint()
    engine = build_engine()
    engine.register_suggestor(SeedSuggestor("extra", "x"))
    with pytest.raises(InvalidResumeError, match="was paused with registrations"):
        await engine.resume(checkpoint, [GateDecision.approve(GATE, by="jane")])


async def test_checkpoint_registrations_read_id_name_pack() -> None:
    checkpoint = await paused_checkpoint()
    assert checkpoint.registrations[0] == "0:seed:seeds/budget:"
    assert checkpoint.registrations[1] == "1:recommender:"
