"""One side of `attnbench ab` in its own process, under a watchdog: its Python, its checkout.

workers/pool.py's workers are multiprocessing children of this interpreter, which re-import
this interpreter's attnbench; a side of ab may be another venv and another checkout, so its
worker is a plain subprocess running workers/ab_serve.py under the side's own Python, speaking
JSON lines. The watchdog is pool.py's: a side silent past the point timeout is killed and the
point is a `timeout` row; one that dies is `crashed`; a failed point is its verdict and reason.
A lost worker is started afresh for the next point (and reports its versions again, which must
not change).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import time
from pathlib import Path

from attnbench.errors import AttnbenchError
from attnbench.workers.envs import Side
from attnbench.workers.pool import START_S, Lost, Outcome

SERVE = Path(__file__).resolve().with_name("ab_serve.py")


SOFTWARE = ("attnbench_version", "git_sha", "attnbench_path", "python", "torch", "torch_cuda", "libraries",
            "backend_libraries")  # what a restarted worker must still run (its load and clocks may differ)


def software(versions: dict) -> dict:
    return {key: versions.get(key) for key in SOFTWARE}


class SideWorker:
    """A worker of one side, started on first use and restarted after it is lost."""

    def __init__(self, side: Side, spec: dict, timeout: float):
        self.side, self.spec, self.timeout = side, spec, timeout
        self.process: subprocess.Popen | None = None
        self.versions: dict | None = None
        self.waiting = False  # launched, its "ready" not read yet

    def __enter__(self) -> SideWorker:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(kill=exc_type is not None)  # an error or Ctrl-C: the point in flight is abandoned

    def launch(self) -> None:
        """Start the worker's process (it imports and sets up while the other side's does too)."""
        self.close()
        try:
            self.process = subprocess.Popen([str(self.side.python), str(SERVE)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, env=self.side.environ(), text=True, bufsize=1,
                                            start_new_session=True)  # Ctrl-C is the parent's to handle
        except OSError as exc:
            raise AttnbenchError(f"--{self.side.name}: cannot start {self.side.python}: {exc.strerror or exc}") \
                from None
        self._send(self.spec)
        self.waiting = True

    def start(self) -> dict:
        """The versions the worker reports, once it is ready (launched first if it is not running)."""
        if self.process is None or self.process.poll() is not None:
            self.launch()
        if not self.waiting:
            return self.versions
        self.waiting = False
        try:
            message = self._receive(max(self.timeout, START_S), "start")
        except Lost as lost:
            raise AttnbenchError(f"--{self.side.name}: the worker did not start: {lost.reason}") from None
        if "ready" not in message:
            self.close()
            raise AttnbenchError(f"--{self.side.name}: {message.get('failed', ['', 'no answer'])[1]} "
                                 f"({self.side.python}, src={self.side.src})")
        if self.versions is not None and software(message["ready"]) != software(self.versions):
            raise AttnbenchError(f"--{self.side.name}: a restarted worker reports other versions than the first")
        self.versions = message["ready"]
        return self.versions

    def run(self, point: dict) -> Outcome:
        """The point's rows, or its failure (timeout, crashed, or the point's own verdict)."""
        self.start()
        self._send(point)
        try:
            message = self._receive(self.timeout, "point")
        except Lost as lost:
            return Outcome(failure=(lost.verdict, lost.reason))
        if "rows" in message:
            return Outcome(items=message["rows"])
        return Outcome(failure=tuple(message["failed"]))

    def _send(self, message: dict) -> None:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except OSError:  # it has just died: _receive says how
            pass

    def _receive(self, timeout: float, what: str) -> dict:
        start = time.monotonic()
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                self.close(kill=True)
                raise Lost("timeout", f"no {what} result within {timeout:g} s; the worker was killed")
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait(timeout=30)
            self.close()
            raise Lost("crashed", f"the worker exited with code {code} after {time.monotonic() - start:.1f} s")
        try:
            return json.loads(line)
        except ValueError:
            self.close(kill=True)
            raise Lost("error", f"the worker answered something that is not a message: {line[:80]!r}") from None

    def close(self, kill: bool = False) -> None:
        """Stop the worker: end of input, then a kill if it lingers (at once with kill)."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=0 if kill else 5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        process.stdout.close()
