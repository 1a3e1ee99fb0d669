"""The CLI shell: a reader that closes the pipe early is not an error worth a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # `nodeagent simulate ... | head -c1`: read one byte, then close our end of the pipe.
    # The trace is long enough that the output cannot fit in the pipe's buffer.
    lines = (ROOT / "examples/memory-ramp.jsonl").read_text().splitlines()
    trace = tmp_path / "long.jsonl"
    with trace.open("w") as out:
        for cycle in range(40):
            for line in lines:
                sample = json.loads(line)
                sample["time"] += cycle * 10_000
                out.write(json.dumps(sample) + "\n")
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodeagent",
            "simulate",
            "--config",
            str(ROOT / "examples/memory-ramp.yaml"),
            "--trace",
            str(trace),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read(1)
        process.stdout.close()
        stderr = process.stderr.read().decode()
        process.wait(timeout=30)
    assert "Traceback" not in stderr
    assert process.returncode == 0
