"""``shardwise select``'s pure parts: budgets, weights, rates and the per-document draw."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from e2e import tiny_model_dir
from inproc import label, plan_run

from shardwise.cli.main import main
from shardwise.errors import ConfigError
from shardwise.ops.select import plan as select
from shardwise.planner.extend import extend
from shardwise.run import journal, markers, quarantine, selection


def test_budgets_read_with_their_suffix_and_bad_ones_are_named():
    assert select.parse_budget("100B") == 100 * 10**9
    assert select.parse_budget("2.5M") == 2_500_000
    assert select.parse_budget("20000") == 20_000
    with pytest.raises(ConfigError, match="--tokens 'lots': give a token count"):
        select.parse_budget("lots")


def test_weights_that_do_not_sum_to_one_or_repeat_a_domain_are_refused(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps([{"domain": [0, 1], "weight": 0.5}, {"domain": 3, "weight": 0.2}]))
    with pytest.raises(ConfigError, match="sum to 0.7, not 1"):
        select.read_weights(path)
    path.write_text(json.dumps([{"domain": "Health", "weight": 0.5}] * 2))
    with pytest.raises(ConfigError, match="listed twice"):
        select.read_weights(path)
    path.write_text(json.dumps([{"domain": "Health", "weight": -1}]))
    with pytest.raises(ConfigError, match="entry 0: weight -1 is not a number >= 0"):
        select.read_weights(path)


def test_rates_hit_the_targets_and_a_capped_domain_is_short_unless_redistributed():
    weights, tokens = [0.5, 0.3, 0.2], [1_000, 1_000, 50]
    target, rate = select.rates(weights, tokens, 1_000, cap=2, redistribute=False)
    assert np.allclose(target, [500, 300, 200]) and np.allclose(rate, [0.5, 0.3, 2.0])
    assert rate[2] * tokens[2] == 100  # 100 short of its 200
    target, rate = select.rates(weights, tokens, 1_000, cap=2, redistribute=True)
    assert np.isclose((rate * np.array(tokens)).sum(), 1_000)
    assert np.isclose(rate[0] / rate[1], 0.5 / 0.3)  # the shortfall in the weights' ratio
    _, rate = select.rates([0.5, 0.5], [100, 0], 100, cap=1, redistribute=False)
    assert rate.tolist() == [0.5, 0.0]  # an empty domain takes nothing


def test_each_document_is_taken_at_its_rate_within_binomial_tolerance_and_by_its_seed():
    ids = [f"doc-{i}" for i in range(200_000)]
    for rate in (0.1, 0.5, 1.7):
        k = selection.repeats(np.full(len(ids), rate), selection.uniform(ids, 7, "f"))
        assert set(np.unique(k).tolist()) <= {int(rate), int(rate) + 1}
        frac = rate - int(rate)
        sd = np.sqrt(frac * (1 - frac) / len(ids))
        assert abs(k.mean() - rate) < 4 * sd
    again = selection.uniform(ids[:1000], 7, "f")
    assert np.array_equal(again, selection.uniform(ids[:1000], 7, "other-file"))  # by id only
    assert not np.array_equal(again, selection.uniform(ids[:1000], 8, "f"))
    assert selection.uniform([None], 7, "a")[0] != selection.uniform([None], 7, "b")[0]


def test_a_file_selection_keeps_only_taken_rows_with_their_counts():
    k = np.array([0, 2, 0, 1], np.int16)
    table = selection.file_table(["a", "b", "c", "d"], k)
    assert table.to_pydict() == {"row": [1, 3], "id": ["b", "d"], "repeats": [2, 1]}
    back = pq.read_table(pa.BufferReader(selection.file_bytes(table)))
    assert back.equals(table)


def test_a_selection_over_a_run_extended_since_says_so_and_how_to_select_anew(tmp_path, capsys):
    cfg = plan_run(tmp_path, total_shards=3, domains={"tokenizer": str(tiny_model_dir("topic"))})
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps([{"domain": "a", "weight": 1.0}]))  # the fake engine's label
    ask = ["select", "--run-dir", str(run_dir), "--name", "s1", "--weights", str(weights),
           "--tokens", "50", "--classifier", "topic"]  # fmt: skip
    assert main(ask) == 0
    assert "made before the run changed" not in capsys.readouterr().out
    corpus = tmp_path / "corpus"
    for rel in ("cc/new/a.jsonl", "cc/new/b.jsonl"):
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(corpus / "wiki/technology/part-0000.jsonl", corpus / rel)
    extend(cfg)
    label(run_dir)

    assert main(["select", "--run-dir", str(run_dir), "--name", "s1"]) == 0
    out = capsys.readouterr().out
    said = "! made before the run changed (1 input change(s) by `shardwise plan --extend` since: "
    assert said + "2 task(s) added): the files added since are in no shard of it" in out, out
    command = re.search(r"select anew: `([^`]+)`", out).group(1)
    assert "--name s1-2" in command and "--tokens 50 --classifier topic" in command
    assert main(ask) == 1  # the same request again: refused for the run's change, by name
    err = capsys.readouterr().err
    assert "made before the run changed" in err and "other settings" not in err, err
    assert main(shlex.split(command)[1:]) == 0  # the advised command selects anew
    assert "made before the run changed" not in capsys.readouterr().out


def _output_root(run_dir: Path) -> Path:
    return Path(
        json.loads((run_dir / "run.json").read_text())["output_uri"].removeprefix("file://")
    )


def _output_files(run_dir: Path, suffix: str) -> list[Path]:
    return sorted(_output_root(run_dir).rglob(f"*{suffix}"))


def test_a_selection_is_stale_by_name_when_a_file_it_read_changes(tmp_path, capsys):
    """Quarantined, relabelled, repaired: each file named with its cause; the report stays
    stale, the same request is refused, the advised command selects anew."""
    cfg = plan_run(tmp_path, total_shards=2, domains={"tokenizer": str(tiny_model_dir("topic"))})
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps([{"domain": "a", "weight": 1.0}]))
    ask = ["select", "--run-dir", str(run_dir), "--name", "s1", "--weights", str(weights),
           "--tokens", "50", "--classifier", "topic", "--format", "json"]  # fmt: skip
    assert main(ask) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["run_changed"] is None and first["stale_files"] == {}
    records = [selection.load_shard(run_dir, "s1", s) for s in (0, 1)]
    read = {rel: v for r in records if r for rel, v in (r.read or {}).items()}
    assert len(read) >= 3, read  # every file it took documents from, by identity
    output = _output_root(run_dir)
    quarantined, relabelled, repaired = sorted(read)[:3]
    # a quarantine made while a job labelled the file: its marker came after
    marker = output / f"{quarantined}.done"
    kept = marker.read_bytes()
    marker.unlink()
    quarantine.add(run_dir, [quarantined], "bad")
    marker.write_bytes(kept)
    sidecar = output / f"{relabelled}.labels.parquet"
    sidecar.write_bytes(sidecar.read_bytes())  # rewritten in place: another version
    (output / f"{repaired}.done").unlink()  # what verify --repair does first
    capsys.readouterr()
    assert main(["select", "--run-dir", str(run_dir), "--name", "s1", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stale_files"] == {
        quarantined: "quarantined since",
        relabelled: "relabelled since",
        repaired: "its marker is gone (repaired or being relabelled)",
    }, report["stale_files"]
    assert "3 file(s) it read changed since" in report["run_changed"], report["run_changed"]
    assert report["mix_config"] is None
    assert main(ask) == 1  # the same request: refused, by name
    err = capsys.readouterr().err
    assert "no longer describes the run's labels" in err and quarantined in err, err
    command = re.search(r"select anew: `([^`]+)`", report["run_changed"]).group(1)
    assert main(shlex.split(command)[1:]) == 0  # over the run as it is: fresh
    out = capsys.readouterr().out
    assert "changed since" not in out, out
    assert f"1 file(s) left out, as their labels are not the run's ({repaired}; " in out, out


def test_select_leaves_out_files_whose_labels_verify_rejects_and_names_them(tmp_path, capsys):
    cfg = plan_run(tmp_path, total_shards=2, domains={"tokenizer": str(tiny_model_dir("topic"))})
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    stats = _output_files(run_dir, ".stats.json")
    other = stats[0]
    body = json.loads(other.read_text())
    body["models"]["topic"]["content_hash"] = "0" * 64  # another model's labels, copied in
    other.write_text(json.dumps(body))
    assert main(["verify", "--run-dir", str(run_dir)]) != 0
    said = capsys.readouterr().out
    assert "labelled with another 'topic' model than run.json pins" in said, said
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps([{"domain": "a", "weight": 1.0}]))
    ask = ["select", "--run-dir", str(run_dir), "--name", "s9", "--weights", str(weights),
           "--tokens", "20", "--classifier", "topic"]  # fmt: skip
    assert main(ask) == 0
    out = capsys.readouterr().out
    rel = next(r for r in json.loads(main_json(run_dir, "s9"))["left_out"])
    assert other.name.startswith(Path(rel).name), (rel, other)
    assert "1 file(s) left out, as their labels are not the run's" in out, out
    assert "labelled with another 'topic' model than run.json pins" in out, out
    assert f"shardwise verify --run-dir {run_dir} --repair" in out, out
    files = selection.root(run_dir, "s9") / selection.FILES_DIR
    assert not (files / f"{rel}.parquet").exists()
    records = [selection.load_shard(run_dir, "s9", s) for s in (0, 1)]
    assert all(rel not in (r.read or {}) for r in records if r)
    # domains: its shard's summary made again from the files as they are (a job that
    # finds them done, without the journal of the job that labelled them)
    shard = body["shard"]
    markers.shard_marker_path(run_dir, shard).unlink()
    journal.journal_path(run_dir, shard).unlink()
    label(run_dir, [shard])
    capsys.readouterr()
    assert main(["domains", "--run-dir", str(run_dir), "--format", "json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    said = [n for n in notes if "left out, as their labels are not the run's" in n]
    assert len(said) == 1 and f"({rel}; {rel}: " in said[0], notes
    assert "labelled with another 'topic' model than run.json pins" in said[0], said


def main_json(run_dir: Path, name: str) -> str:
    """The JSON report of selection ``name``."""
    path = selection.root(run_dir, name) / "report.json"
    return path.read_text()


def test_two_selects_of_one_name_at_once_one_is_planned_the_other_refused(
    tmp_path, capsys, monkeypatch
):
    """Both look before either writes (the race): the second finds the first's plan at
    its write, and is refused naming it, never told to continue it."""
    cfg = plan_run(tmp_path, total_shards=3, domains={"tokenizer": str(tiny_model_dir("topic"))})
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    weights = tmp_path / "w.json"
    weights.write_text(json.dumps([{"domain": "a", "weight": 1.0}]))  # the fake engine's label
    asks = [["select", "--run-dir", str(run_dir), "--name", "x", "--weights", str(weights),
             "--tokens", tokens, "--classifier", "topic"] for tokens in ("50", "40")]  # fmt: skip
    real_plan = select.plan

    def racing(run_dir, request):  # the second select has looked (none yet) and plans ...
        new = real_plan(run_dir, request)
        monkeypatch.setattr(select, "plan", real_plan)
        assert main(asks[0]) == 0  # ... while the first plans and writes the name
        return new

    monkeypatch.setattr(select, "plan", racing)
    assert main(asks[1]) == 1
    err = capsys.readouterr().err
    assert "selection 'x' of" in err and "was planned with other settings" in err, err
    assert selection.load_plan(run_dir, "x").budget_tokens == 50  # the first request, whole
