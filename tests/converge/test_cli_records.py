"""The signing key of the command line: read once at start, then gone from the environment.

`--key-file`, `CONVERGE_SIGNING_KEY_FILE` or `CONVERGE_SIGNING_KEY` give the key; the command
drops both variables from `os.environ` before it imports a formation. A suggestor run by the
real command in its own process looks for the key and re-signs another run's record: it
finds no key in `os.environ` or in the processes it starts, and its forgery is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from converge._core._error import UsageError
from converge._review import (
    KEY_FILE_VARIABLE,
    KEY_VARIABLE,
    forget_signing_key,
    read_signing_key,
    signing_key,
    take_signing_key,
)
from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FORMATION = str(HERE / "cli_formation.py")
SNOOP = str(HERE / "key_snoop_formation.py")
GATE = "gate:2:strategies/costly"
KEY = "a shared secret"


def test_read_signing_key_takes_the_option_then_the_file_variable_then_the_key(
    tmp_path: Path,
) -> None:
    option, named = tmp_path / "option", tmp_path / "named"
    option.write_bytes(b"from the option")
    named.write_bytes(b"from the file variable")
    assert read_signing_key(str(option), {KEY_FILE_VARIABLE: str(named)}) == b"from the option"
    assert read_signing_key(None, {KEY_FILE_VARIABLE: str(named)}) == b"from the file variable"
    assert read_signing_key(str(option), {KEY_VARIABLE: "k"}) == b"from the option"
    assert read_signing_key(None, {KEY_VARIABLE: "k\u00e9"}) == "k\u00e9".encode()
    assert read_signing_key(None, {KEY_VARIABLE: ""}) is None
    assert read_signing_key(None, {}) is None


def test_read_signing_key_drops_one_final_line_ending_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    for written in (b"k", b"k\n", b"k\r\n"):
        path.write_bytes(written)
        assert read_signing_key(str(path), {}) == b"k"
    path.write_bytes(b"k\n\n")
    assert read_signing_key(str(path), {}) == b"k\n"  # only the last line ending
    path.write_bytes(b"\x00\xff binary\n")
    assert read_signing_key(str(path), {}) == b"\x00\xff binary"


@pytest.mark.parametrize("content", [None, b"", b"\n"])
def test_read_signing_key_refuses_a_missing_or_empty_file_in_one_line(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "key"
    if content is not None:
        path.write_bytes(content)
    expected = "is empty" if content is not None else "cannot read the signing key file"
    with pytest.raises(UsageError, match=expected) as raised:
        read_signing_key(None, {KEY_FILE_VARIABLE: str(path)})
    assert "\n" not in str(raised.value)


def test_read_signing_key_refuses_both_variables_at_once(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(b"k")
    with pytest.raises(UsageError, match="both CONVERGE_SIGNING_KEY and"):
        read_signing_key(None, {KEY_VARIABLE: "k", KEY_FILE_VARIABLE: str(path)})
    assert read_signing_key(str(path), {KEY_VARIABLE: "k", KEY_FILE_VARIABLE: "x"}) == b"k"


def test_take_signing_key_drops_both_variables_even_when_it_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    try:
        assert take_signing_key(None) == KEY.encode()
        assert KEY_VARIABLE not in os.environ
        assert signing_key() == KEY.encode()  # what the console and the engine options use
    finally:
        forget_signing_key()
    assert signing_key() is None  # the variable is gone: outside a command, none
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    monkeypatch.setenv(KEY_FILE_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(UsageError):
        take_signing_key(None)
    assert KEY_VARIABLE not in os.environ
    assert KEY_FILE_VARIABLE not in os.environ
    forget_signing_key()


def test_signing_key_outside_a_command_reads_the_environment_and_leaves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console and batches started from code read the key where it is."""
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    assert signing_key() == KEY.encode()
    assert os.environ[KEY_VARIABLE] == KEY
    path = tmp_path / "key"
    path.write_text("filed\n")
    monkeypatch.delenv(KEY_VARIABLE)
    monkeypatch.setenv(KEY_FILE_VARIABLE, str(path))
    assert signing_key() == b"filed"


def converge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "converge.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def base_environment() -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in (KEY_VARIABLE, KEY_FILE_VARIABLE)
    }
    return env | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}


def test_an_unreadable_key_file_is_a_one_line_error_before_anything_runs(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    missing = tmp_path / "missing"
    process = converge(
        "--store", str(store), "--key-file", str(missing), "run", FORMATION, env=base_environment()
    )
    assert process.returncode == 1
    assert process.stderr.splitlines() == [
        f"error: cannot read the signing key file {missing}: No such file or directory"
    ]
    assert not store.exists()  # nothing ran
    process = converge(
        "--store",
        str(store),
        "runs",
        env=base_environment() | {KEY_VARIABLE: "k", KEY_FILE_VARIABLE: str(missing)},
    )
    assert process.returncode == 1
    assert process.stderr.startswith(
        "error: both CONVERGE_SIGNING_KEY and CONVERGE_SIGNING_KEY_FILE"
    )


MODES = ("key-variable", "file-variable", "key-file")


def keyed(mode: str, key_file: Path) -> tuple[list[str], dict[str, str]]:
    """The options and environment that give the command the key, `mode`'s way."""
    env = base_environment()
    if mode == "key-variable":
        return [], env | {KEY_VARIABLE: KEY}
    if mode == "file-variable":
        return [], env | {KEY_FILE_VARIABLE: str(key_file)}
    return ["--key-file", str(key_file)], env


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_suggestor_finds_no_key_in_its_environment_and_its_resigned_record_is_refused(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"{KEY}\n")
    store = str(tmp_path / "runs.db")
    report = tmp_path / "report.json"
    options, env = keyed(mode, key_file)
    process = converge("--store", store, *options, "run", FORMATION, env=env)
    assert process.returncode == 6, process.stderr
    victim = run_id_of(process.stdout)
    snoop_env = env | {
        "SNOOP_KEY_SHA256": hashlib.sha256(KEY.encode()).hexdigest(),
        "SNOOP_STORE": store,
        "SNOOP_VICTIM": victim,
        "SNOOP_REPORT": str(report),
    }
    process = converge("--store", store, *options, "run", SNOOP, env=snoop_env)
    assert process.returncode == 0, process.stderr
    snooped = run_id_of(process.stdout)
    found = json.loads(report.read_text())
    assert found == {
        "names": [],
        "in_os_environ": False,
        "in_child_environ": False,
        # Linux keeps the environment the process started with readable there: a key given
        # in CONVERGE_SIGNING_KEY stays in /proc/self/environ (docs/threat-model.md).
        "in_proc_self_environ": mode == "key-variable",
    }
    with_key = ("--store", store, "--key-file", str(key_file))
    assert cli(*with_key, "verify", snooped)[1].endswith("; signature verified\n")
    capsys.readouterr()
    code, out = cli(*with_key, "verify", victim)
    assert (code, "bad signature" in out) == (7, True)
    for command in ("review", "report", "resume"):
        extra = ("--approve", GATE, "--by", "ceo") if command == "resume" else ()
        code, out = cli(*with_key, command, victim, *extra)
        assert code == 1, (command, out)
        assert "small plan" not in out
        assert "bad signature" in capsys.readouterr().err, command


@pytest.mark.slow
def test_the_console_the_command_starts_checks_records_with_the_key_it_took(
    tmp_path: Path,
) -> None:
    """`converge ui` no longer finds the key in its environment: it uses the one it read."""
    import httpx

    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    store = str(tmp_path / "runs.db")
    signed = run_id_of(cli("--store", store, "--key-file", str(key_file), "run", FORMATION)[1])
    unsigned = run_id_of(cli("--store", store, "run", FORMATION)[1])
    console = subprocess.Popen(
        [
            *(sys.executable, "-m", "converge.cli", "--store", store),
            *("--key-file", str(key_file), "ui", "--port", "0", "--reviewer", "ana"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_environment(),
    )
    try:
        assert console.stdout is not None
        url = next(line.split()[1] for line in console.stdout if line.startswith("open "))
        base = url.partition("/?")[0]
        with httpx.Client(follow_redirects=True, timeout=10) as client:
            assert client.get(url).status_code == 200
            trusted = client.get(f"{base}/runs/{signed}")
            assert trusted.status_code == 200
            assert 'data-signature="verified"' in trusted.text
            refused = client.get(f"{base}/runs/{unsigned}")
            assert 'data-signature="failed"' in refused.text
            assert "unsigned" in refused.text
    finally:
        console.terminate()
        console.communicate(timeout=10)
