"""Helpers for the server tests: tiny model dirs and a real ``bertkit serve`` process."""

from __future__ import annotations

import http.client
import json
import os
import select
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from bertkit.config import BertConfig
from bertkit.serving.launch import ServerProcess
from bertkit.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]
WORDS = "the a cat dog sat on mat good bad movie was very".split()
# request bodies above this go headers-first (see Server._send_large)
EARLY_ANSWER_BYTES = 1 << 16
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


def tiny_dir(cls: Any, out: Path, **overrides: Any) -> Path:
    """A one-layer tiny model of class ``cls`` with the toy vocabulary, saved to ``out``."""
    torch.manual_seed(0)
    config = BertConfig.preset(
        "tiny", vocab_size=len(VOCAB), max_position_embeddings=32, num_hidden_layers=1, **overrides
    )
    cls(config).save_pretrained(out)
    Tokenizer.from_vocab(VOCAB).save_pretrained(out)
    return out


class Server(ServerProcess):
    """``bertkit serve MODEL_DIR ARGS...`` in a subprocess; its output goes to a file for inspection."""

    def __init__(self, model_dir: Path, log_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", "bertkit", "serve", str(model_dir), "--log-level", "warning", *args]
        fd, log = tempfile.mkstemp(prefix="server-", suffix=".log", dir=log_dir)  # a fresh name per server
        os.close(fd)
        log = Path(log)
        super().__init__(cmd, log=log, env=env, cwd=ROOT, startup_timeout=120)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        raw: bytes | None = None,
        headers: dict | None = None,
        timeout: float = 60,
    ) -> tuple[int, Any, dict[str, str]]:
        """(status, parsed JSON or text, headers)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            h = {"Content-Type": "application/json", **(headers or {})}
            if data is not None and len(data) > EARLY_ANSWER_BYTES:
                self._send_large(conn, method, path, data, h)
            else:
                conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            text = r.read().decode("utf-8", "replace")
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = text
            return r.status, parsed, dict(r.getheaders())
        finally:
            conn.close()

    @staticmethod
    def _send_large(conn: http.client.HTTPConnection, method: str, path: str, data: bytes, h: dict) -> None:
        """Headers first; the body only if the server has not answered yet (what curl does for large bodies
        with ``Expect: 100-continue``). A server that refuses on Content-Length answers and closes at once;
        sending the body anyway would race its close (a broken pipe, or a reset that loses the answer)."""
        conn.putrequest(method, path)
        for k, v in {**h, "Content-Length": str(len(data))}.items():
            conn.putheader(k, v)
        conn.endheaders()
        if select.select([conn.sock], [], [], 0.5)[0]:
            return  # answered already: read the answer, do not send the body
        try:
            conn.send(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed while the body was on its way: the answer is read next

    def peak_rss_mb(self) -> float:
        """The process's peak resident set (VmHWM) in MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmHWM")
