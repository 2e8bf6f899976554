"""What the console trusts in a stored record: its signature, and the formation it names.

Every page that shows a record checks its signature (`check_signature`) and says what it
found: a red banner when the check failed (the record is unsigned, changed or another key's),
a quiet note when no signing key is set (nothing can be checked). The console imports the
formation a record names only when the record's signature verified, or when it was started
with `--trust-unsigned`; `--formation` chooses one for every run instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from .._core._escape import esc
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._review import SignatureCheck, check_signature

__all__ = ["Trust", "banner", "formation_note", "trust"]


@final
@dataclass(frozen=True, slots=True)
class Trust:
    """What checking a record found, and whether the console may resume it from here."""

    check: SignatureCheck
    """The record's signature check."""
    formation: str | None
    """What resuming would import: `--formation`'s choice, or the record's own."""
    chosen: bool
    """Whether `formation` is the console's `--formation` (not the record's)."""
    refusal: str
    """Why the console will not resume the run (`""`: it will)."""


def trust(
    source: RunRecord | RecordHead, key: bytes | None, *, chosen: str | None, trust_unsigned: bool
) -> Trust:
    """Check `source` (a record, or a stored head) under `key`; may its formation be imported?"""
    check = check_signature(source, key)
    record = source if isinstance(source, RunRecord) else source.record
    if check.failed:
        refusal = (
            f"{check.message}; the console acts on no record whose signature check fails "
            "(resume it from a copy you trust, or find who changed the store)"
        )
        return Trust(check, chosen or record.formation, chosen is not None, refusal)
    if chosen is not None:
        return Trust(check, chosen, True, "")
    if record.formation is None:
        refusal = (
            f"run {record.run_id} does not say which formation it came from: start the "
            "console with --formation FILE_OR_MODULE"
        )
        return Trust(check, None, False, refusal)
    if check.state == "verified" or trust_unsigned:
        return Trust(check, record.formation, False, "")
    refusal = (
        f"run {record.run_id}: the console does not import the formation "
        f"{record.formation!r} that an unauthenticated record names (no signing key is set, "
        "so anyone who can write to the store could have put it there); set "
        "CONVERGE_SIGNING_KEY (and save runs with it), start the console with --formation "
        "FILE_OR_MODULE, or with --trust-unsigned to import it anyway"
    )
    return Trust(check, record.formation, False, refusal)


def banner(check: SignatureCheck) -> str:
    """What a page says above a record about its signature.

    A banner when the check failed, a quiet note when no key is set, a line when it verified.
    """
    if check.failed:
        return (
            f'<div class="banner" data-signature="failed" role="alert"><b>Signature check '
            f"failed.</b> {esc(check.message)}. What this page shows may have been changed by "
            "someone with write access to the store: do not act on it.</div>"
        )
    if check.state == "unchecked":
        return (
            '<p class="trust" data-signature="unchecked">Not authenticated: no signing key is '
            "set (CONVERGE_SIGNING_KEY), so nothing shows whether this record was changed in "
            "the store.</p>"
        )
    return f'<p class="trust" data-signature="verified">{esc(check.said)}.</p>'


def formation_note(record: RunRecord, found: Trust) -> str:
    """Which formation resuming the run imports, where it comes from, and whether it will."""
    named = record.formation
    if found.chosen and found.formation is not None:
        also = f" (the record names <code>{esc(named)}</code>)" if named else ""
        said = f"<code>{esc(found.formation)}</code>, chosen with --formation{also}"
    elif named is None:
        said = "the record names none"
    else:
        state = {
            "verified": "its signature verified",
            "unchecked": "its signature was not checked (no signing key is set)",
            "failed": "its signature check failed",
        }[found.check.state]
        will = "the console will not import it" if found.refusal else "the console imports it"
        trusting = (
            " because it was started with --trust-unsigned"
            if found.check.state == "unchecked" and not found.refusal
            else ""
        )
        said = (
            f"<code data-formation-path>{esc(named)}</code>, named by the record; {state}; "
            f"{will}{trusting} to resume the run"
        )
    return f'<p class="trust" data-formation-trust>Formation: {said}.</p>'
