"""The classifiers' identity is part of the pin: a model that changes under a run that has
labelled files (weights replaced in place, a hub snapshot moved to a new revision) is
refused before anything is labelled with it, and a run made before the pin existed gets
one from its files' stats, the files of another model named and relabelled."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest
from e2e import tiny_model_dir
from inproc import label, plan_run

from shardwise.errors import ModelError, RunMismatchError
from shardwise.ops.verify import check as verify
from shardwise.ops.verify import repair as verify_repair
from shardwise.run import markers, outputs, plan
from shardwise.snakefile import prepare_run

NAMES = ("topic", "topic_nourl", "format", "format_nourl")


def dry_run(cfg: dict):
    return prepare_run(cfg, main_process=True, dryrun=True, report=False)


def own_models(tmp_path: Path) -> dict[str, Path]:
    """Copies of the tiny models the test may change."""
    return {n: Path(shutil.copytree(tiny_model_dir(n), tmp_path / "models" / n)) for n in NAMES}


def classifiers(models: dict[str, str]) -> list[dict]:
    kinds = {"topic": "url_text", "topic_nourl": "text", "format": "url_text"}
    return [{"name": n, "model": m, "input": kinds.get(n, "text")} for n, m in models.items()]


def pinned(run_dir: Path, name: str) -> dict:
    return json.loads((run_dir / "run.json").read_text())["models"][name]


def marked(run_dir: Path) -> set[str]:
    return outputs.marked(outputs_root(run_dir))


def outputs_root(run_dir: Path):
    from shardwise.run.opened import open_run

    return open_run(run_dir).output


def test_weights_replaced_in_place_are_refused_before_anything_is_labelled_with_them(tmp_path):
    models = own_models(tmp_path)
    cfg = plan_run(tmp_path, classifiers=classifiers({n: str(p) for n, p in models.items()}))
    run_dir = Path(cfg["run_dir"])
    shards = sorted(plan.nonempty_shards(plan.load(run_dir)))
    label(run_dir, shards[:1])
    before = pinned(run_dir, "topic")
    assert len(before["content_hash"]) == 64 and len(before["tokenizer_hash"]) == 64
    weights = models["topic"] / "model.safetensors"
    original = weights.read_bytes()
    weights.write_bytes((models["topic_nourl"] / "model.safetensors").read_bytes())  # in place
    with pytest.raises(RunMismatchError) as refused:
        dry_run(cfg)
    (line,) = str(refused.value).splitlines()
    assert line.startswith(f"classifier 'topic': the model at {models['topic']} is not the one")
    assert f"content_hash pinned {before['content_hash'][:12]}, found " in line
    assert "Restore the pinned model" in line and "under a new run_dir and output.uri" in line
    done = marked(run_dir)
    with pytest.raises(ModelError, match="classifier 'topic': the model at"):
        label(run_dir, shards[1:2])  # a job started anyway: refused before its first file
    assert marked(run_dir) == done and pinned(run_dir, "topic") == before
    weights.write_bytes(original)  # restored (a new mtime: hashed again, the same content)
    dry_run(cfg)
    label(run_dir)
    assert verify.verify_run(run_dir, complete=True).ok


def test_a_hub_snapshot_that_moved_to_another_revision_is_refused(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    repo = hub / "models--acme--topic"

    def snapshot(revision: str, source: str) -> None:
        shutil.copytree(tiny_model_dir(source), repo / "snapshots" / revision)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(revision)

    first, second = "1" * 40, "2" * 40
    snapshot(first, "topic")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    models = {n: str(tiny_model_dir(n)) for n in NAMES} | {"topic": "acme/topic"}
    cfg = plan_run(tmp_path, classifiers=classifiers(models))
    run_dir = Path(cfg["run_dir"])
    assert pinned(run_dir, "topic")["revision"] == first
    shards = sorted(plan.nonempty_shards(plan.load(run_dir)))
    label(run_dir, shards[:1])
    snapshot(second, "topic_nourl")  # `hf download` again: refs/main moves
    with pytest.raises(RunMismatchError, match=f"revision pinned {first}, found {second}"):
        dry_run(cfg)
    done = marked(run_dir)
    named = rf"acme/topic \(-> {re.escape(str(repo))}/snapshots/{second}\) is not the one"
    with pytest.raises(ModelError, match=named) as job:  # the name and what it resolves to
        label(run_dir, shards[1:2])
    assert marked(run_dir) == done
    # every way back the refusal names works, in the cache's own layout
    with pytest.raises(RunMismatchError) as refused:
        dry_run(cfg)
    ways = f"the pinned snapshot is cached ({repo}/snapshots/{first}): set `model: acme/topic@"
    ways += f"{first}` for this classifier (or its directory), or point the cache back: "
    ways += f"`printf %s {first} > {repo}/refs/main`"
    assert ways in str(refused.value) and ways in str(job.value), str(refused.value)
    for spelling in (str(repo / "snapshots" / first), f"acme/topic@{first}"):
        cfg["classifiers"] = classifiers(models | {"topic": spelling})
        info = dry_run(cfg)
        note = f"note: classifier 'topic' now names {spelling} (was "
        assert any(m.startswith(note) for m in info.messages), info.messages
        assert json.loads((run_dir / "run.json").read_text())["classifiers"][0]["model"] == spelling
    cfg["classifiers"] = classifiers(models | {"topic": str(repo / "snapshots" / second)})
    with pytest.raises(RunMismatchError, match="pins a different run"):
        dry_run(cfg)  # another model under a new name: refused as another run
    command = ways.rpartition("`printf %s ")[2].rstrip("`")  # the edit, as the line gives it
    value, _, target = command.partition(" > ")
    Path(target).write_text(value)
    cfg["classifiers"] = classifiers(models)  # the hub id again: refs/main points back
    dry_run(cfg)
    label(run_dir)
    assert verify.verify_run(run_dir, complete=True).ok
    shutil.rmtree(repo / "snapshots" / first)
    (repo / "refs" / "main").write_text(second)
    with pytest.raises(RunMismatchError) as gone:
        dry_run(cfg)
    fetch = f"fetch the pinned snapshot: `hf download acme/topic --revision {first}` (it leaves "
    assert fetch + f"{repo}/refs/main where it is), then set `model: acme/topic@{first}`" in str(
        gone.value
    )


def test_a_run_pinned_before_gets_its_pin_from_its_files_and_mixed_files_are_relabelled(
    tmp_path,
):
    cfg = plan_run(tmp_path)
    run_dir = Path(cfg["run_dir"])
    label(run_dir)
    labels = tmp_path / "labels"
    for copy in (run_dir / "run.json", labels / "run.json"):  # as an older shardwise wrote it
        data = json.loads(copy.read_text())
        del data["models"]
        copy.write_text(json.dumps(data))
    odd = sorted(labels.rglob("*.stats.json"))[0]
    stats = json.loads(odd.read_text())
    stats["models"]["topic"]["content_hash"] = "0" * 64  # labelled with other weights
    odd.write_text(json.dumps(stats))
    rel = str(odd.relative_to(labels)).removesuffix(".stats.json")
    info = dry_run(cfg)
    said = [m for m in info.messages if "labelled with another" in m]
    assert said == [
        f"note: pinned the 'topic' model this run's files were labelled with; 1 file(s) were "
        f"labelled with another ({rel}): `shardwise verify --run-dir {run_dir} --repair` "
        "relabels them"
    ], info.messages
    assert pinned(run_dir, "topic")["content_hash"] != "0" * 64  # the model of the others
    report = verify.verify_run(run_dir)
    (problem,) = report.problems
    assert problem.where == str(odd) and "labelled with another 'topic' model" in problem.what
    verify_repair.repair(run_dir, report)
    label(run_dir)
    assert verify.verify_run(run_dir, complete=True).ok
    assert markers.done_shards(run_dir)


def test_labelled_means_a_marker_in_the_output_not_a_journal_in_the_run_dir(tmp_path):
    """The journals are bookkeeping (a run directory rebuilt, another cluster's jobs): a
    model that changed under files with markers is refused all the same."""
    models = own_models(tmp_path)
    cfg = plan_run(tmp_path, classifiers=classifiers({n: str(p) for n, p in models.items()}))
    run_dir = Path(cfg["run_dir"])
    label(run_dir, sorted(plan.nonempty_shards(plan.load(run_dir)))[:1])
    shutil.rmtree(run_dir / "progress")
    weights = models["topic"] / "model.safetensors"
    weights.write_bytes((models["topic_nourl"] / "model.safetensors").read_bytes())
    with pytest.raises(RunMismatchError, match="classifier 'topic': the model at"):
        dry_run(cfg)
