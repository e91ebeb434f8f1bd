"""The CUDA batch budget, probed once per kind of GPU and set-up and read by later jobs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from shardwise.errors import RecordError
from shardwise.run import budgets
from shardwise.run.budgets import Budget, BudgetKey

H100 = BudgetKey(
    gpu="NVIDIA H100 80GB HBM3",
    memory=85_031_714_816,
    dtype="bfloat16",
    torch="2.13.0+cu128",
    max_length=8192,
    models=(137_000_000,) * 8,
)


class Probe:
    """A probe that counts its calls (each answer a little different, as real ones are)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> tuple[int, str, float]:
        self.calls += 1
        return 65_536 * (8 + self.calls), "efficient_attention", 2.5


def test_a_second_shard_on_the_same_kind_of_gpu_reads_the_probe(tmp_path: Path) -> None:
    probe = Probe()
    first, read = budgets.cached(tmp_path, H100, probe)
    assert not read and probe.calls == 1 and first.tokens == 589_824
    (record,) = tmp_path.iterdir()
    assert json.loads(record.read_text())["key"]["gpu"] == "NVIDIA H100 80GB HBM3"
    second, read = budgets.cached(tmp_path, H100, probe)  # the next shard job
    assert read and probe.calls == 1 and second == first


@pytest.mark.parametrize(
    "change",
    [
        {"gpu": "NVIDIA A100-SXM4-40GB"},
        {"memory": 42_949_672_960},
        {"dtype": "float16"},
        {"torch": "2.14.0+cu128"},
        {"max_length": 4096},
        {"models": (137_000_000,) * 4},
    ],
)
def test_another_gpu_or_set_up_is_probed_again(tmp_path: Path, change) -> None:
    probe = Probe()
    budgets.cached(tmp_path, H100, probe)
    other = dataclasses.replace(H100, **change)
    budget, read = budgets.cached(tmp_path, other, probe)
    assert not read and probe.calls == 2 and budget.key == other
    assert budgets.cached(tmp_path, H100, probe)[1]  # the first kind's record is still there
    assert len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize(
    "damage", ["{", '{"key": {}, "tokens": 1}', "[]", '{"tokens": -3}', "\udcff"]
)
def test_a_damaged_record_is_probed_again_and_rewritten(tmp_path: Path, damage) -> None:
    probe = Probe()
    target = tmp_path / H100.name()
    target.write_text(damage, "utf-8", errors="surrogateescape")
    budget, read = budgets.cached(tmp_path, H100, probe)
    assert not read and probe.calls == 1
    assert Budget.from_json(target.read_text(), str(target)) == budget


def test_a_record_is_read_field_by_field(tmp_path: Path) -> None:
    good = Budget(key=H100, tokens=524_288, kernel="efficient_attention", probe_s=2.0)
    assert Budget.from_json(good.to_json(), "b.json") == good
    bad = json.loads(good.to_json())
    bad["tokens"] = "many"
    with pytest.raises(RecordError, match="tokens"):
        Budget.from_json(json.dumps(bad), "b.json")


def test_a_run_directory_it_cannot_write_probes_every_time(tmp_path: Path) -> None:
    blocked = tmp_path / "budgets"
    blocked.write_text("a file where the directory would go")  # unwritable, even for root
    probe = Probe()
    assert not budgets.cached(blocked, H100, probe)[1]
    assert not budgets.cached(blocked, H100, probe)[1]
    assert probe.calls == 2


def test_without_a_directory_it_probes(tmp_path: Path) -> None:
    probe = Probe()
    assert not budgets.cached(None, H100, probe)[1] and not budgets.cached(None, H100, probe)[1]
    assert probe.calls == 2


def test_a_padded_verdict_is_read_back_for_its_kind_of_gpu_only(tmp_path: Path) -> None:
    """``auto``'s padded verdict (a failed self-check, a kernel the GPU lacks), recorded by
    the first job of a kind of GPU: later jobs of that kind read it, others do not."""
    assert budgets.verdict(tmp_path, H100, "attention") is None
    why = "the packed self-check failed (topic: 3 label(s) differ)"
    where = budgets.record_verdict(tmp_path, H100, "attention", why, "2026-12-06T23:00:00+00:00")
    assert where is not None and where.name.startswith("attention-")
    got = budgets.verdict(tmp_path, H100, "attention")
    assert got is not None and got.reason == why
    other = dataclasses.replace(H100, gpu="Tesla V100-SXM2-32GB")
    assert budgets.verdict(tmp_path, other, "attention") is None
    assert budgets.verdict(tmp_path, H100, "compile") is None  # each kind its own record
    with pytest.raises(ValueError, match="verdict kind 'speed'"):
        budgets.verdict_path(tmp_path, H100, "speed")
    assert budgets.cached(tmp_path, H100, Probe())[1] is False  # not a budget record
    where.write_text("{not json")
    assert budgets.verdict(tmp_path, H100, "attention") is None  # damaged: decided again
    assert budgets.record_verdict(None, H100, "attention", why, "") is None  # nowhere to keep it
