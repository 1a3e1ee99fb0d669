"""``nodeagent simulate`` and ``nodeagent config check`` as an operator runs them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from nodeagent.cli import main

from .builders import Gi, Mi

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write_trace(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def memory_line(time: int, available: int, pods: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "time": time,
        "signals": {"memory.available": {"available": available, "capacity": 8 * Gi}},
        "pods": pods,
    }


HOG = {"name": "hog", "usage": {"memory": 2 * Gi}}
IDLE = {"name": "idle", "priority": 5, "usage": {"memory": Mi}}


def test_simulate_prints_one_json_decision_per_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            "simulate",
            "--config",
            str(EXAMPLES / "memory-ramp.yaml"),
            "--trace",
            str(EXAMPLES / "memory-ramp.jsonl"),
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert len(out) == len((EXAMPLES / "memory-ramp.jsonl").read_text().splitlines())
    records = [json.loads(line) for line in out]
    assert set(records[0]) == {
        "time",
        "thresholdsMet",
        "pressure",
        "conditions",
        "taints",
        "evictions",
        "nodeReclaim",
    }
    acted = [r for r in records if r["evictions"]]
    assert acted
    eviction = acted[0]["evictions"][0]
    assert set(eviction) == {"pod", "signal", "gracePeriodSeconds", "message", "reclaimEstimate"}
    assert eviction["signal"] == "memory.available"
    met = acted[0]["thresholdsMet"][0]
    assert set(met) == {"signal", "hard", "graceSatisfied", "available", "threshold"}
    assert acted[0]["pressure"] == {"memory": True, "disk": False, "pid": False}
    assert acted[0]["conditions"][0]["status"] == "True"
    assert acted[0]["taints"] == [{"key": "nodeagent.io/memory-pressure", "effect": "NoSchedule"}]


def test_simulate_table_is_one_row_per_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "simulate",
            "--config",
            str(EXAMPLES / "soft-oscillation.yaml"),
            "--trace",
            str(EXAMPLES / "soft-oscillation.jsonl"),
            "--output",
            "table",
        ]
    )
    header, *rows = capsys.readouterr().out.splitlines()
    assert code == 0
    assert header.split() == ["TIME", "memory.available", "PRESSURE", "ACTION"]
    assert len(rows) == len((EXAMPLES / "soft-oscillation.jsonl").read_text().splitlines())
    assert rows[2].split()[:6] == ["40", "900Mi", "<", "1Gi", "soft", "memory"]
    evicting = [row for row in rows if "evict" in row]
    assert len(evicting) == 1
    assert "soft*" in evicting[0] and "default/worker-6b8d" in evicting[0]


def test_simulate_reads_stdin_and_overrides_the_strategy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pods = [{"name": f"p{i}", "usage": {"memory": 400 * Mi}} for i in range(4)]
    text = json.dumps(memory_line(0, 300 * Mi, pods)) + "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = main(
        [
            "simulate",
            "--eviction-hard",
            "memory.available<1Gi",
            "--trace",
            "-",
            "--strategy",
            "relief",
        ]
    )
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    # 1Gi - 300Mi = 724Mi to free: two pods of 400Mi
    assert [e["pod"] for e in record["evictions"]] == ["default/p0", "default/p1"]


def test_the_trace_is_authoritative_unless_reclaim_is_modelled(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lines = [memory_line(t, 500 * Mi, [HOG, IDLE]) for t in (0, 10, 20)]
    path = write_trace(tmp_path / "t.jsonl", lines)
    base = ["simulate", "--eviction-hard", "memory.available<1Gi", "--trace", str(path)]

    assert main(base) == 0
    recorded = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [[e["pod"] for e in r["evictions"]] for r in recorded] == [["default/hog"]] * 3

    assert main([*base, "--model-reclaim"]) == 0
    modelled = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [[e["pod"] for e in r["evictions"]] for r in modelled] == [["default/hog"], [], []]
    assert modelled[1]["thresholdsMet"] == []  # 500Mi + 2Gi credited back


def test_a_bad_trace_line_stops_with_code_2_after_the_good_ones(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(memory_line(0, 3 * Gi, [])) + "\n\n" + '{"time": 1, "pods": [{}]}\n')
    code = main(["simulate", "--trace", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    assert len(captured.out.splitlines()) == 1
    assert "trace line 3: pods.0.name: Field required" in captured.err


def test_a_trace_going_back_in_time_stops_with_code_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_trace(tmp_path / "t.jsonl", [memory_line(t, 3 * Gi, []) for t in (0, 10, 5)])
    assert main(["simulate", "--trace", str(path)]) == 2
    captured = capsys.readouterr()
    assert [json.loads(line)["time"] for line in captured.out.splitlines()] == [0, 10]
    assert "trace line 3: time 5 is earlier than the previous line's 10" in captured.err


def test_simulate_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["simulate", "--trace", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read trace" in capsys.readouterr().err
    binary = tmp_path / "t.bin"
    binary.write_bytes(b'{"time": 0}\n\xff\xfe\n')
    assert main(["simulate", "--trace", str(binary)]) == 2
    assert f"cannot read trace {binary}: not UTF-8 text" in capsys.readouterr().err
    trace = write_trace(tmp_path / "t.jsonl", [memory_line(0, Gi, [])])
    assert main(["simulate", "--trace", str(trace), "--eviction-hard", "memory.available<1GB"]) == 2
    assert "config field 'evictionHard'" in capsys.readouterr().err


def test_config_check_json_prints_the_effective_thresholds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "evictionHard: {memory.available: 150Mi, nodefs.available: 10%}\n"
        "evictionSoft: {nodefs.available: 15%}\n"
        "evictionSoftGracePeriod: {nodefs.available: 1m30s}\n"
        "evictionMinimumReclaim: {nodefs.available: 5%, memory.available: '0'}\n"
    )
    assert main(["config", "check", "--config", str(config), "--output", "json"]) == 0
    thresholds = json.loads(capsys.readouterr().out)["thresholds"]
    by_signal = {(t["signal"], t["hard"]): t for t in thresholds}
    assert by_signal["memory.available", True] == {
        "signal": "memory.available",
        "operator": "LessThan",
        "value": {"quantity": 157286400},
        "gracePeriodSeconds": 0,
        "minReclaim": {"quantity": 0},
        "hard": True,
    }
    assert by_signal["nodefs.available", False] == {
        "signal": "nodefs.available",
        "operator": "LessThan",
        "value": {"percentage": 0.15},
        "gracePeriodSeconds": 90,
        "minReclaim": {"percentage": 0.05},
        "hard": False,
    }
    assert by_signal["allocatableMemory.available", True]["derivedFrom"] == "memory.available"
    assert {t["signal"] for t in thresholds} == {
        "memory.available",
        "nodefs.available",
        "allocatableMemory.available",
        "containerfs.available",
    }


def test_config_check_text_and_invalid_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["config", "check"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == [
        "SIGNAL",
        "OP",
        "VALUE",
        "GRACE",
        "MIN",
        "RECLAIM",
        "KIND",
        "FROM",
    ]
    assert "imagefs.inodesFree" in out and "pressure transition period: 5m0s" in out
    assert "max pod grace period (soft): 0s" in out
    assert "local-storage limits (localStorageCapacityIsolation): enforced" in out
    assert "active page cache (activePageCache): workingSet (used memory" in out

    assert main(["config", "check", "--local-storage-capacity-isolation=false"]) == 0
    out = capsys.readouterr().out
    assert "local-storage limits (localStorageCapacityIsolation): off" in out

    assert main(["config", "check", "--active-page-cache=reclaimable"]) == 0
    out = capsys.readouterr().out
    assert "active page cache (activePageCache): reclaimable (its clean part" in out
    assert "warning: activePageCache: reclaimable" in out

    assert main(["config", "check", "--eviction-max-pod-grace-period=-1"]) == 0
    out = capsys.readouterr().out
    assert "max pod grace period (soft): each pod's terminationGracePeriodSeconds" in out

    assert main(["config", "check", "--eviction-soft", "memory.available<1Gi"]) == 2
    err = capsys.readouterr().err
    assert "grace period must be specified for the soft eviction threshold memory.available" in err


def test_config_check_against_the_nodes_kubelet(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "config",
        "check",
        "--config",
        str(EXAMPLES / "memory-ramp.yaml"),
        "--kubelet-config",
        str(EXAMPLES / "kubelet-config.yaml"),
        "--output",
        "json",
    ]
    assert main(args) == 0
    findings = json.loads(capsys.readouterr().out)["kubelet"]
    warnings = [f["message"] for f in findings if f["severity"] == "warning"]
    # kubelet hard 750Mi > agent hard 500Mi: the kubelet evicts first.
    assert any("memory.available<750Mi (hard)" in w and "<500Mi (hard)" in w for w in warnings)
    notes = {f["signal"] for f in findings if f["severity"] == "note"}
    assert {"nodefs.available", "imagefs.available"} <= notes  # only the kubelet watches them
    assert main([*args, "--strict"]) == 1
    capsys.readouterr()


@pytest.mark.parametrize(
    ("agent", "kubelet", "severity", "fragment"),
    [
        pytest.param("memory.available<1Gi", "memory.available: 1Gi", "note", "a tie", id="tie"),
        pytest.param(
            "memory.available<1Gi", "memory.available: 2Gi", "warning", "acts first", id="laxer"
        ),
        pytest.param("memory.available<2Gi", "memory.available: 1Gi", None, "", id="stricter"),
        pytest.param(
            "nodefs.available<10Gi",
            "nodefs.available: 10%",
            "warning",
            "capacity above 100Gi the kubelet acts first",
            id="percentage-vs-quantity",
        ),
    ],
)
def test_kubelet_comparison(  # noqa: PLR0917 - one parameter per table column
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    agent: str,
    kubelet: str,
    severity: str | None,
    fragment: str,
) -> None:
    kubelet_file = tmp_path / "kubelet.yaml"
    kubelet_file.write_text(f"kind: KubeletConfiguration\nevictionHard: {{{kubelet}}}\n")
    args = ["config", "check", "--eviction-hard", agent, "--kubelet-config", str(kubelet_file)]
    assert main([*args, "--output", "json"]) == 0
    findings = json.loads(capsys.readouterr().out)["kubelet"]
    relevant = [f for f in findings if f["signal"] == agent.split("<", maxsplit=1)[0]]
    if severity is None:
        assert relevant == []
    else:
        assert [f["severity"] for f in relevant] == [severity]
        assert fragment in relevant[0]["message"]


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        pytest.param(
            "kind: KubeletConfiguration\nevictionHard: {memory.available: '-1'}\n",
            "must be positive",
            id="invalid-threshold",
        ),
        pytest.param(
            "kind: KubeletConfiguration\nevictionSoft: {memory.available: 1Gi}\n",
            "grace period must be specified",
            id="soft-without-grace",
        ),
        pytest.param(
            "evictionHard: {memory.available: 1Gi}\nevictionStrategy: relief\n",
            "is not a KubeletConfiguration (kind: None)",
            id="the-agents-own-config-by-mistake",
        ),
        pytest.param("- a\n- b\n", "expected a KubeletConfiguration mapping", id="a-list"),
        pytest.param("evictionHard: [\n", "is not valid YAML", id="broken-yaml"),
        pytest.param("kind: \udcff\n", "is not valid YAML", id="not-utf-8"),
    ],
)
def test_kubelet_config_errors_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, document: str, fragment: str
) -> None:
    bad = tmp_path / "kubelet.yaml"
    bad.write_bytes(document.encode(errors="surrogateescape"))
    assert main(["config", "check", "--kubelet-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"kubelet config {bad}" in err
    assert fragment in err


def test_a_reclaimable_page_cache_notes_the_kubelets_memory_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet_file = tmp_path / "kubelet.yaml"
    kubelet_file.write_text("kind: KubeletConfiguration\nevictionHard: {memory.available: 100Mi}\n")
    base = ["config", "check", "--eviction-hard", "memory.available<500Mi"]
    tail = ["--kubelet-config", str(kubelet_file), "--output", "json"]
    assert main([*base, *tail]) == 0
    findings = json.loads(capsys.readouterr().out)["kubelet"]
    assert not [f for f in findings if "page cache" in f["message"]]
    assert main([*base, "--active-page-cache=reclaimable", *tail]) == 0
    findings = json.loads(capsys.readouterr().out)["kubelet"]
    (note,) = [f for f in findings if "page cache" in f["message"]]
    assert note["severity"] == "note" and note["signal"] == "memory.available"
    assert "memory.available<100Mi (hard)" in note["message"]
