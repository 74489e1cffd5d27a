"""A real OpenAI-compatible judge server for tests: llama-cpp-python serving SmolLM2-135M.

:func:`ensure_built` runs ``testkit/build_judge_server.sh`` (idempotent: a machine builds
it once, into its cache); :class:`JudgeServer` starts the server as a child process on a
free port and stops it. Nobody here wrote that server: what it refuses and how it words
it is what a user's self-hosted judge does (see docs/judges.md).
"""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from testkit.process import wait_until

#: The build script (prints the server's virtual environment).
BUILD_SCRIPT = Path(__file__).with_name("build_judge_server.sh")

#: The model name the server answers to.
MODEL = "smollm2"

#: Longest wait for the server to answer ``/v1/models`` after it starts, in seconds.
START_TIMEOUT_S = 60.0


def ensure_built() -> Path:
    """Build the server's environment unless this machine has it (many minutes the first
    time, under nice; a moment after).

    Returns:
        The environment's directory (``bin/python``, ``model.gguf``).

    Raises:
        RuntimeError: The build failed (its output is in the message).
    """
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the judge server failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class JudgeServer:
    """llama-cpp-python's server on a free port.

    Args:
        log_path: Where its output goes.
        n_ctx: The model's context, in tokens (llama-cpp-python's default is 2,048;
            a prompt and its ``max_tokens`` beyond it are refused with
            ``context_length_exceeded``).
        n_threads: CPU threads it computes with, for prompts and answers alike. One:
            llama.cpp's threads spin while they wait for each other, so beside the
            suite's own processes on two cores more of them burn CPU the tests need (the
            real-judge module under three busy processes: 689 s of CPU and 690 s of
            wall time with llama-cpp-python's defaults of one thread for answers and
            two for prompts, 115 s and 144 s with one for both; alone 92 s and 140 s).
    """

    def __init__(self, *, log_path: Path, n_ctx: int = 4096, n_threads: int = 1) -> None:
        env_dir = ensure_built()
        self.n_ctx = n_ctx
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [str(env_dir / "bin" / "python"), "-m", "llama_cpp.server",
             "--model", str(env_dir / "model.gguf"), "--model_alias", MODEL,
             "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
             "--n_threads_batch", str(n_threads),
             # Keep evaluated prompts in RAM: a metric's fixed text ahead of the sample is
             # evaluated once, not once per job (the prompt dominates a CPU judge's time).
             "--cache", "true",
             "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        try:
            wait_until(self._ready, timeout_s=START_TIMEOUT_S, what="the judge server")
        except AssertionError:
            self.stop()
            raise

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"the judge server exited ({self.process.returncode}); "
                                 f"see {self.log_path}")
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
