"""The Containerfile, read as the build would read it (no image can be built here:
no registry but PyPI is reachable): its base image, what it copies, its user and its
entrypoint, which must agree with the DaemonSet."""

from __future__ import annotations

import json
import shlex

from tests.deploy import files


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = files.CONTAINERFILE.read_text().replace("\\\n", " ")
    result = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return result


def test_both_stages_are_python_311_slim() -> None:
    bases = [args.split()[0] for keyword, args in instructions() if keyword == "FROM"]
    assert bases == ["python:3.11-slim", "python:3.11-slim"]


def test_everything_copied_from_the_context_exists() -> None:
    for keyword, args in instructions():
        if keyword == "COPY" and not args.startswith("--from"):
            *sources, _ = shlex.split(args)
            for source in sources:
                assert (files.REPO / source).exists(), source


def test_runs_nodeagent_run_as_an_unprivileged_user_by_default() -> None:
    found = dict(instructions())
    assert json.loads(found["ENTRYPOINT"]) == ["nodeagent", "run"]
    user = found["USER"].split(":")[0]
    assert user.isdigit()
    assert int(user) != 0


def test_exposes_the_daemonsets_port() -> None:
    [port] = files.agent_container()["ports"]
    assert dict(instructions())["EXPOSE"] == str(port["containerPort"])


def test_image_compiles_bytecode_for_a_read_only_root() -> None:
    runs = " ".join(args for keyword, args in instructions() if keyword == "RUN")
    assert "--compile" in runs
    assert "PYTHONDONTWRITEBYTECODE=1" in dict(instructions())["ENV"]
