"""What the command line, the console and batches trust in a stored run, and how they check it.

A stored record is data anyone with write access to the store could have changed. With a
signing key every record the CLI or an engine saves is signed, every record `review`,
`resume`, `replay` and `report` act on is verified first, and `verify`, `show`, `review`
and `runs` say whether what they show verified (`check_signature`, `check_listed`). Without
one, the record is only checked for consistency, and the CLI says so.

The key is read once, when the command starts (`take_signing_key`): from `--key-file`,
`CONVERGE_SIGNING_KEY_FILE` or `CONVERGE_SIGNING_KEY`, both variables then dropped from
`os.environ` before any formation is imported, so suggestor code finds no key there (nor
do the processes it starts). `signing_key` returns it for the rest of the command.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TextIO, TypeAlias, final

from ._core._checkpoint import Checkpoint
from ._core._error import UsageError
from ._core._exceptions import InvalidResumeError, StaleRecordError, StoreError
from ._core._hitl import GateDecision
from ._core._listing import RunSummary
from ._core._model import FrozenModel
from ._core._record import RunRecord
from ._core._record_head import RecordHead
from ._core._result import ConvergeResult
from ._core._stop import RunStatus, StopReason
from ._core._store import RowStore, RunStore

if TYPE_CHECKING:  # a run's formation is imported when it resumes: the reads need no engine
    from ._formation import EngineOptions, Formation

__all__ = [
    "KEY_FILE_VARIABLE",
    "KEY_VARIABLE",
    "STALE",
    "CheckedRun",
    "Resumed",
    "SignatureCheck",
    "check_listed",
    "check_signature",
    "forget_signing_key",
    "formation_locator",
    "paused_checkpoint",
    "read_signing_key",
    "resumable",
    "resume_stored",
    "signing_key",
    "take_signing_key",
]

STALE: Final = 8
"""Exit status when someone else saved the run first (a decision would have been lost)."""


KEY_VARIABLE: Final = "CONVERGE_SIGNING_KEY"
"""The environment variable that holds the signing key itself."""
KEY_FILE_VARIABLE: Final = "CONVERGE_SIGNING_KEY_FILE"
"""The environment variable that names a file holding the signing key."""


@final
class _Taken:
    """The key the running command took at its start (`taken` is false outside a command)."""

    __slots__ = ("key", "taken")

    def __init__(self) -> None:
        self.taken = False
        self.key: bytes | None = None


_TAKEN: Final = _Taken()


def read_signing_key(key_file: str | None, environ: Mapping[str, str]) -> bytes | None:
    """The signing key `key_file`, else `CONVERGE_SIGNING_KEY_FILE`, else
    `CONVERGE_SIGNING_KEY` names (`None`: none is set, or the variable is empty).

    A file holds the key as bytes; one final line ending (`\\n` or `\\r\\n`) is not part of
    it, so `echo SECRET > FILE` gives the same key as `CONVERGE_SIGNING_KEY=SECRET`.

    Raises:
        UsageError: The file cannot be read or holds no key, or both variables are set.
    """
    named = environ.get(KEY_FILE_VARIABLE) or None
    given = environ.get(KEY_VARIABLE) or None
    if key_file is None and named is not None and given is not None:
        raise UsageError(
            f"both {KEY_VARIABLE} and {KEY_FILE_VARIABLE} are set: set one of them",
            "--key-file FILE is the safer choice (see the threat model in the docs)",
        )
    path = key_file if key_file is not None else named
    if path is None:
        return None if given is None else given.encode("utf-8", "surrogateescape")
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read the signing key file {path}: {error.strerror}") from None
    key = data.removesuffix(b"\n").removesuffix(b"\r")
    if not key:
        raise UsageError(f"the signing key file {path} is empty")
    return key


def take_signing_key(key_file: str | None) -> bytes | None:
    """Read the signing key for this command (`read_signing_key`), then drop both variables
    from `os.environ`; `signing_key` returns it until `forget_signing_key`.

    Raises:
        UsageError: As `read_signing_key` (the variables are dropped all the same).
    """
    try:
        key = read_signing_key(key_file, os.environ)
    finally:
        for name in (KEY_VARIABLE, KEY_FILE_VARIABLE):
            os.environ.pop(name, None)
    _TAKEN.key, _TAKEN.taken = key, True
    return key


def forget_signing_key() -> None:
    """End the command's hold on its key: `signing_key` reads the environment again."""
    _TAKEN.key, _TAKEN.taken = None, False


def signing_key() -> bytes | None:
    """The signing key: the one the running command took at its start (`take_signing_key`);
    outside a command (the console or a batch started from code), `read_signing_key` of
    the environment, which is left as it is."""
    if _TAKEN.taken:
        return _TAKEN.key
    return read_signing_key(None, os.environ)


SignatureState = Literal["verified", "unchecked", "failed"]
"""What a read command can say of a stored record's signature: checked and good, not
checked (no signing key is set), or checked and bad (unsigned, changed, or another key's)."""


@final
class SignatureCheck(FrozenModel, frozen=True):
    """What checking a stored record's signature found, for a command or page to show."""

    run_id: str
    """The run whose record was checked."""
    state: SignatureState
    """`"verified"`, `"unchecked"` (no key) or `"failed"`."""
    message: str
    """One line that says so, for people."""

    @property
    def failed(self) -> bool:
        """Whether a key is set and the record does not verify under it."""
        return self.state == "failed"

    @property
    def said(self) -> str:
        """The message without its `"run RUN_ID: "`, capitalised, for a page about the run."""
        said = self.message.removeprefix(f"run {self.run_id}: ")
        return said[:1].upper() + said[1:]


def check_signature(record: RunRecord | RecordHead, key: bytes | None) -> SignatureCheck:
    """Check `record`'s signature (or a stored head's) under `key`; every read command shows
    what this says. Of a paused run's head, it says that the head's was checked (what is
    shown of the run), not its rows."""
    run_id = record.run_id if isinstance(record, RunRecord) else record.record.run_id
    if key is None:
        return _unchecked(run_id)
    try:
        record.verify_signature(key)
    except StoreError as error:
        return SignatureCheck(run_id=run_id, state="failed", message=str(error))
    said = "signature verified"
    if isinstance(record, RecordHead) and record.record.checkpoint is not None:
        said = "the stored head's signature verified (its rows were not read)"
    return SignatureCheck(run_id=run_id, state="verified", message=f"run {run_id}: {said}")


def _unchecked(run_id: str) -> SignatureCheck:
    """What can be said of run `run_id`'s record without a key: it is not authenticated."""
    return SignatureCheck(
        run_id=run_id,
        state="unchecked",
        message=(
            f"run {run_id}: the record is not authenticated (no signing key is set); "
            "anyone with write access to the store could have changed it"
        ),
    )


@final
class CheckedRun(FrozenModel, frozen=True):
    """One line of `converge runs`, and what checking it found."""

    summary: RunSummary
    """What the line shows: with a key, read from the run's record, else the store's listing."""
    check: SignatureCheck
    """What checking the record's signature found."""


async def check_listed(
    store: RunStore, runs: Sequence[RunSummary], key: bytes | None
) -> tuple[CheckedRun, ...]:
    """Each listed run as `converge runs` shows it, with its check, in order.

    Without a key, every run is shown as listed and `"unchecked"`; nothing is loaded. With
    one, each run's record is loaded and its signature checked (`check_signature`), and the
    line shows what that record says, not the store's own columns (which no signature
    covers); a record that cannot be loaded fails, and its line is the listing. Of a
    finished or paused run stored as rows, only the head is read and checked.
    """
    checked: list[CheckedRun] = []
    rows = isinstance(store, RowStore)  # a runtime protocol check: once, not once a run
    for run in runs:
        if key is None:
            checked.append(CheckedRun(summary=run, check=_unchecked(run.run_id)))
            continue
        try:
            head = await store.load_head(run.run_id, paused=True) if rows else None
            record = head if head is not None else await store.load(run.run_id)
        except StoreError as error:
            failed = SignatureCheck(run_id=run.run_id, state="failed", message=str(error).strip())
            checked.append(CheckedRun(summary=run, check=failed))
            continue
        check = check_signature(record, key)
        checked.append(CheckedRun(summary=_shown(run, record), check=check))
    return tuple(checked)


def _shown(run: RunSummary, record: RunRecord | RecordHead) -> RunSummary:
    """The line of `run` as its loaded `record` (or head) says (when it was saved: the
    listing's)."""
    if isinstance(record, RecordHead):
        return record.summary(run.saved_at)
    if record.stop_reason is not None:
        return record.summary(run.saved_at)
    return run.model_copy(  # a running run's line says where it is, not its root
        update={
            "status": record.status,
            "cycles": record.cycles,
            "fact_count": record.integrity.fact_count,
            "name": record.name,
        }
    )


def paused_checkpoint(source: RunRecord | RecordHead, run_id: str, key: bytes | None) -> Checkpoint:
    """The checkpoint a reviewer sees and `resume` applies, checked to be this run's, now.

    Of a paused run's stored head (`RowStore.load_head`), the head's signature is checked,
    and the checkpoint holds its pending gates but not its facts, rejections or traces.

    Raises:
        UsageError: The run is not paused, or its record or checkpoint is another run's.
        StoreError: With a key, the record (or head) is unsigned or its signature does not
            match.
    """
    source.verify_signature(key)
    record = source if isinstance(source, RunRecord) else source.record
    if record.run_id != run_id:
        raise UsageError(f"the stored record of run {run_id} is the record of run {record.run_id}")
    checkpoint = record.checkpoint
    if checkpoint is None or record.stop_reason is not StopReason.AWAITING_HUMAN:
        raise UsageError(
            f"run {run_id} is not waiting for a decision ({record.outcome}){record.decided_by()}"
        )
    if checkpoint.run_id != run_id or checkpoint.merkle_root != record.integrity.merkle_root:
        raise UsageError(
            f"run {run_id}: its checkpoint does not belong to this run as stored "
            f"(run {checkpoint.run_id}, root {checkpoint.merkle_root[:12]})"
        )
    return checkpoint


def resumable(record: RunRecord, run_id: str, key: bytes | None, *, decided: bool) -> str | None:
    """Check that `converge resume` can act on `record`; what another process did if not.

    Returns the message for the conflict exit status when someone else holds the run (it is
    running) or already decided it; `None` when it is paused, or interrupted and `decided`
    is false.

    Raises:
        UsageError: The run finished without anyone deciding, or decisions were given for an
            interrupted run, or (when paused) as `paused_checkpoint`.
        StoreError: With a key, the record is unsigned or its signature does not match.
    """
    record.verify_signature(key)
    status = record.status
    if status is RunStatus.PAUSED:
        paused_checkpoint(record, run_id, key)
        return None
    if status is RunStatus.INTERRUPTED:
        if decided:
            raise UsageError(
                f"run {run_id} is interrupted, not waiting for a decision",
                f"continue it with: converge resume {run_id}",
            )
        return None
    if status is RunStatus.RUNNING:
        return f"run {run_id} is running in another process ({record.detail}){record.decided_by()}"
    if record.trace.decisions:
        return f"run {run_id} was already resumed (now {record.outcome}){record.decided_by()}"
    if record.trace.continuations:
        return f"run {run_id} was already continued (now {record.outcome})"
    raise UsageError(f"run {run_id} is not waiting for a decision ({record.outcome})")


def formation_locator(
    record: RunRecord | RecordHead, given: str | None, key: bytes | None, err: TextIO
) -> str:
    """The formation to import for `record` (or a run stored as rows, from its head):
    `given` on the command line, or the record's.

    The record's own locator is used only when the record is authenticated (a key is set and
    its signature verified), or after saying on `err` that an unauthenticated record names it.

    Raises:
        UsageError: Neither the command line nor the record names a formation.
    """
    if given is not None:
        return given
    run = record.record if isinstance(record, RecordHead) else record
    if run.formation is None:
        raise UsageError(
            f"run {run.run_id} does not say which formation it came from",
            "pass --formation FILE_OR_MODULE",
        )
    record.verify_signature(key)
    if key is None:
        err.write(
            f"note: importing formation {run.formation!r} named by the stored record of run "
            f"{run.run_id}; records are not authenticated without a signing key "
            "(pass --formation to choose the formation yourself)\n"
        )
    return run.formation


Resumed: TypeAlias = "tuple[ConvergeResult, Formation, str]"
"""What `resume_stored` ran: the result, the formation, and the locator it was loaded from."""


async def resume_stored(
    store: RunStore,
    run_id: str,
    decisions: Sequence[GateDecision],
    *,
    formation: str | None,
    options: Callable[[Formation, str], EngineOptions],
    err: TextIO,
    seen_version: int | None = None,
) -> Resumed | str:
    """Decide a paused run, or continue an interrupted one: the one path `converge resume`
    and the review console share.

    Loads the run, checks it can be resumed (`resumable`), imports its formation
    (`formation_locator`), builds an engine with `options(formation, locator)` and calls
    `Engine.resume_run`. With `seen_version`, the run must still be the version the
    reviewer saw.

    Returns:
        What ran; or, when someone else holds, decided, continued or changed the run first,
        the message that says so (nothing was saved).

    Raises:
        UsageError, StoreError: As `resumable` and `formation_locator`.
        InvalidResumeError: The decisions do not fit the run (and nobody changed it).
    """
    key = signing_key()
    record = await store.load(run_id)
    stale = resumable(record, run_id, key, decided=bool(decisions))
    if stale is None and seen_version is not None and record.version != seen_version:
        stale = f"run {run_id} changed since it was shown ({record.outcome}){record.decided_by()}"
    if stale is not None:
        return stale
    locator = formation_locator(record, formation, key, err)
    from ._formation import load_formation  # here: the reads import no engine

    loaded = load_formation(locator)
    engine = loaded.engine(**options(loaded, locator))
    try:
        result = await engine.resume_run(run_id, decisions)
    except (StaleRecordError, InvalidResumeError) as error:
        current = await store.load(run_id)
        if isinstance(error, InvalidResumeError) and current.version == record.version:
            raise
        if isinstance(error, StaleRecordError):
            return f"{error}{current.decided_by()}"
        return str(error)
    return result, loaded, locator
