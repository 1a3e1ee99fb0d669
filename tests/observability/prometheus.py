"""A real Prometheus server (Debian's package) on loopback, for tests that scrape.

It listens on ``127.0.0.1:0``; the port the kernel chose is read from its log line
``msg="Listening on" address=127.0.0.1:PORT``. Prometheus 2.42 applies new scrape
targets only every 5 s, so the first sample takes 5-6 s: :meth:`Prometheus.wait_for`
polls ``/api/v1/query`` for a bounded time instead of sleeping. :meth:`Prometheus.start`
returns once ``/-/ready`` answers (queries get 503 until the TSDB is open).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

_LISTENING = re.compile(r'msg="Listening on" address=([0-9.]+:\d+)')


class Prometheus:
    def __init__(
        self,
        binary: str,
        workdir: Path,
        *,
        targets: list[str],
        labels: dict[str, str] | None = None,
    ) -> None:
        """Scrape ``targets`` (``HOST:PORT``) every second as job ``nodeagent``, adding
        ``labels`` to every series (``node``, as the ServiceMonitor's relabeling does)."""
        self._binary = binary
        self._workdir = workdir
        self._targets = targets
        self._labels = labels or {}
        self._process: subprocess.Popen[bytes] | None = None
        self.log = workdir / "prometheus.log"
        self.url = ""

    def start(self, timeout: float = 20.0) -> None:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {
                    "job_name": "nodeagent",
                    "static_configs": [{"targets": self._targets, "labels": self._labels}],
                }
            ],
        }
        config_file = self._workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                [
                    self._binary,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={self._workdir / 'data'}",
                    "--storage.tsdb.retention.time=1h",
                    "--web.listen-address=127.0.0.1:0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._process.poll() is None:
            if not self.url:
                match = _LISTENING.search(self.log.read_text(errors="replace"))
                if match:
                    self.url = f"http://{match.group(1)}"
            # The web server answers before the TSDB is open: queries 503 until ready.
            if self.url and self._ready():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"prometheus did not start:\n{self.log.read_text(errors='replace')}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The result vector of an instant query."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Poll until the query returns a non-empty vector, or fail with the log."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no result for {promql!r} after {timeout} s; prometheus log:\n"
                    + self.log.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.25)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
