"""Start an HTTP server command (``bertkit serve ...``, or a baseline to compare against) on a free loopback
port and wait until its ``/health`` answers 200.

Tests, the serving benchmark and the serve-parity experiment all need this; one implementation keeps their
start-up, failure message and shutdown the same::

    with ServerProcess([sys.executable, "-m", "bertkit", "serve", "model/"], log=Path("serve.log")) as s:
        requests.post(f"{s.url}/embed", json={"texts": ["hi"]})
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health_ok(port: int, timeout: float = 5.0) -> bool:
    """True when ``GET /health`` on ``127.0.0.1:port`` answers 200; False when it refuses or fails."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


class ServerProcess:
    """``cmd --port PORT`` in a subprocess, up and healthy when the constructor returns.

    ``log``: where its stdout and stderr go (kept for reading after a failure); None sends them to an
    anonymous temporary file (a pipe nobody reads would fill and block a talkative server). ``env`` entries are added to this process's
    environment. If the process exits, or ``/health`` has not answered 200 within ``startup_timeout``
    seconds, the process is stopped and ``RuntimeError`` names the command and the last of its output.
    """

    def __init__(
        self,
        cmd: list[str],
        *,
        log: Path | None = None,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        startup_timeout: float = 180.0,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [*cmd, "--port", str(self.port)]
        self.log = log
        # closed in stop()
        self._log_file = open(log, "w+b") if log is not None else tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + startup_timeout
        while not health_ok(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                why = (
                    "exited" if self.proc.poll() is not None else f"not healthy after {startup_timeout:.0f} s"
                )
                self.stop(keep_output=True)
                raise RuntimeError(
                    f"server did not come up ({why}): {' '.join(cmd)}: {self.output()[-2000:]}"
                )
            time.sleep(0.3)

    def output(self) -> str:
        """What the process has written so far (stdout and stderr together); "" once stopped without a log."""
        if self.log is not None:
            return self.log.read_text(errors="replace")
        if self._log_file.closed:
            return ""
        fd = self._log_file.fileno()  # pread: the child shares this file's offset, which must not move
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def stop(self, grace: float = 20.0, keep_output: bool = False) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; idempotent. ``keep_output``: leave the output
        readable (the file open) for an error message."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if not keep_output:
            self._log_file.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
