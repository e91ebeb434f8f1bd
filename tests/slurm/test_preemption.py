"""Preemption, node failure and lost jobs on the real cluster: the run never waits forever.

The cluster is restarted with preemption (``cluster.sh`` with ``SHARDWISE_SLURM_PREEMPT=1``:
``PreemptType=preempt/partition_prio``, partition ``main`` at PriorityTier 1 and ``urgent``
at 10 over the same node, a requeued job held 8 s, not 120). The run's jobs go to
``main`` through the production profile (only the partition and sizes changed); another
job asks ``urgent`` for both GPUs while two of the run's jobs stand at the test gate, after
their first file. One cell per row of :data:`CELLS`, each a covering of the matrix: modes
CANCEL and REQUEUE, GraceTime 0 and 60, a shard preempted once and twice, one and two
shards per job; and on top, in one cell each: the jobs vanishing from squeue before the
plugin saw their end (MinJobAge 6 s while the plugin's status query is blinded), the node
failing under the requeued jobs (``State=DOWN``, then back), and a ``kill -9`` of the
workflow during a preemption, followed by the same command. In every cell:

* the run ends 0 with no operator command; ``verify --complete`` passes; nothing of the
  run stays queued;
* one SLURM job per shard group was ever submitted (sacct): preemption spent no retry and
  never put a second job on a shard; each file was labelled once (the progress journals);
* the console says what happened, one line per job and event.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import slurmrun as sr
from e2e import Gate, gated_shardwise

from shardwise.cli.main import main
from shardwise.run import journal, markers

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

HOST = os.uname().nodename.split(".")[0]


@dataclass(frozen=True)
class Cell:
    mode: str  # the partition's PreemptMode
    grace: int  # its GraceTime, seconds
    k: int  # shards per SLURM job
    times: int  # how often the run's two running jobs are preempted
    extra: str = ""  # "vanish", "node_fail" or "kill"

    @property
    def shards(self) -> int:
        """Two jobs, both running at once on the two GPUs: the same ones are preempted."""
        return 2 * self.k


#: CANCEL with GraceTime 0 and one shard per job, once: the preemptible campaign of the
#: benchmark's preemption cell (test_the_benchmarks_preemption_cell below).
CELLS = [
    Cell("REQUEUE", 60, 2, 1, "vanish"),
    Cell("REQUEUE", 0, 2, 2, "kill"),
    Cell("CANCEL", 60, 1, 2, "node_fail"),
]


@pytest.fixture(scope="module")
def preemptive(slurm_cluster):
    """The cluster with preemption for this module; back as it was afterwards."""
    with slurm_cluster.exclusive():
        start = subprocess.run(
            ["bash", str(slurm_cluster.cluster_sh), "start"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**sr.env(), "SHARDWISE_SLURM_PREEMPT": "1"},
        )
        assert start.returncode == 0, start.stderr[-3000:]
        try:
            yield slurm_cluster
        finally:
            back = subprocess.run(
                ["bash", str(slurm_cluster.cluster_sh), "start"],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
                env=sr.env(),
            )
            assert back.returncode == 0, back.stderr[-3000:]


def _scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True)


def _preempt(seconds: int = 5) -> str:
    """Another job asks ``urgent`` for both GPUs (it runs ``seconds``)."""
    return subprocess.run(
        [
            "sbatch",
            "--parsable",
            "-p",
            "urgent",
            "--gpus=2",
            "-t",
            "1",
            "-o",
            "/dev/null",
            "--wrap",
            f"sleep {seconds}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _at_gate(gate: Gate) -> dict[int, str]:
    """shard -> pid of the process standing at the gate (the file the gate writes)."""
    out = {}
    for path in gate.directory.glob("*.waiting"):
        out[int(path.name.split(".")[0])] = path.read_text().split()[0]
    return out


def _new_at_gate(gate: Gate, before: dict[int, str]) -> int:
    """How many processes stand at the gate that were not there ``before`` (a requeued
    group job may resume with another of its shards)."""
    return sum(1 for shard, pid in _at_gate(gate).items() if before.get(shard) != pid)


def _said(t0: float, what: str) -> None:
    print(f"  {time.monotonic() - t0:6.1f} s  {what}", file=sys.stderr)


def _blind_squeue(folder: Path, flag: Path) -> None:
    """A ``squeue`` first on PATH that fails the plugin's status query (by job name) while
    ``flag`` exists: the plugin then misses its jobs' ends, as with a poll gap longer than
    MinJobAge. Every other squeue call (the job keeper's) is the real one."""
    script = folder / "squeue"
    script.write_text(
        "#!/bin/bash\n"
        f'if [[ -e {flag} && " $* " == *" --name "* ]]; then\n'
        '  echo "squeue: error: blinded by the test" >&2; exit 1\nfi\n'
        'exec /usr/bin/squeue "$@"\n'
    )
    script.chmod(0o755)


def _restarted(work: Path) -> bool:
    """Some job of the run has been requeued (its restart count is above 0)."""
    out = subprocess.run(
        ["squeue", "-h", "-u", "root", "-O", "JobID:|,RestartCnt:|,WorkDir:|"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return any(r[2] == str(work) and r[1].strip() not in ("", "0") for r in rows if len(r) > 2)


@pytest.mark.race
@pytest.mark.parametrize(
    "cell", CELLS, ids=lambda c: f"{c.mode}-grace{c.grace}-k{c.k}-x{c.times}-{c.extra or 'plain'}"
)
def test_a_preempted_campaign_finishes_with_no_operator(preemptive, tmp_path, cell):
    configfile = sr.demo(tmp_path, total_shards=cell.shards)
    run_dir = tmp_path / "demo" / "run"
    work = tmp_path / "work"
    work.mkdir()
    overlay = sr.overlay(
        tmp_path / "main",
        {
            "default-resources": {
                "slurm_partition": "'main'",
                "slurm_account": "'shardwise'",
                "mem_mb": 500,
                "cpus_per_task": 1,
                "runtime": 10,
            },
        },
    )
    gate = Gate(tmp_path / "gate", after_files=1)
    env = gated_shardwise(tmp_path / "bin", tmp_path / "ledger", gate)
    blind = tmp_path / "blind"
    _blind_squeue(tmp_path / "bin", blind)
    _scontrol("update", "PartitionName=main", f"PreemptMode={cell.mode}", f"GraceTime={cell.grace}")
    cmd = sr.snakemake(
        work,
        configfile,
        sr.PROFILE,
        sr.PROFILE_CI,
        overlay,
        extra=("--jobs", "2", "--group-components", f"classify={cell.k}"),
    )
    logs = [tmp_path / "first.log"]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=logs[0].open("w"), stderr=subprocess.STDOUT, env=env)
    try:
        gate.wait(2, alive=lambda: proc.poll() is None, timeout=300)
        _said(t0, "two jobs at the gate")
        for round_ in range(cell.times):
            before = _at_gate(gate)
            _preempt()
            if cell.extra == "kill" and round_ == cell.times - 1:
                sr.wait_for(lambda: _restarted(work), 120, "the preempted jobs requeued")
                os.kill(proc.pid, signal.SIGKILL)  # the workflow dies during the preemption
                proc.wait()
                logs.append(tmp_path / "second.log")
                proc = subprocess.Popen(
                    cmd, stdout=logs[-1].open("w"), stderr=subprocess.STDOUT, env=env
                )
            sr.wait_for(
                lambda b=before: _new_at_gate(gate, b) >= 2,
                300,
                f"the requeued jobs back at the gate ({logs[-1]})",
            )
            _said(t0, f"round {round_ + 1}: the requeued jobs are back at the gate")
        if cell.extra == "node_fail":
            before = _at_gate(gate)
            _scontrol("update", f"NodeName={HOST}", "State=DOWN", "Reason=shardwise-test")
            subprocess.run(
                ["scontrol", "update", f"NodeName={HOST}", "State=RESUME"],
                capture_output=True,
                check=False,
            )
            sr.wait_for(
                lambda: _new_at_gate(gate, before) >= 2,
                300,
                f"the jobs requeued after the node failure back at the gate ({logs[-1]})",
            )
            _said(t0, "the jobs requeued after the node failure are back at the gate")
        if cell.extra == "vanish":
            _vanish(preemptive, work, gate, blind)
        gate.open()
        assert proc.wait(timeout=600) == 0, logs[-1].read_text()[-5000:]
        _said(t0, "the run ended")
    finally:
        blind.unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
        sr.scancel_workdir(work)
        subprocess.run(["scancel", "-p", "urgent"], check=False, capture_output=True)
        subprocess.run(
            ["bash", str(preemptive.cluster_sh), "min-job-age", "300"],
            check=False,
            capture_output=True,
        )
    console = "\n".join(p.read_text() for p in logs)
    _check_the_run(run_dir, work, console, cell)


def _vanish(cluster, work: Path, gate: Gate, blind: Path) -> None:
    """The jobs end and SLURM forgets them while the plugin cannot look (the event: squeue
    no longer lists them); then the plugin may look again and never sees their end."""
    ids = [j["id"] for j in sr.squeue_of(work)]
    subprocess.run(
        ["bash", str(cluster.cluster_sh), "min-job-age", "6"], check=True, capture_output=True
    )
    blind.touch()
    gate.open()

    def forgotten() -> bool:
        out = subprocess.run(
            ["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", "%i"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        return not out.split()

    sr.wait_for(forgotten, 240, "SLURM to purge the finished jobs")
    blind.unlink()


def _check_the_run(run_dir: Path, work: Path, console: str, cell: Cell) -> None:
    assert main(["verify", "--run-dir", str(run_dir), "--complete"]) == 0
    assert sr.squeue_of(work) == []
    per_shard = sr.jobs_per_shard(work)
    if cell.extra == "kill":  # an adopted shard's own job follows its adopted one (labelling
        # nothing where that finished it: the journals below say each file is labelled once)
        assert set(per_shard) == set(range(cell.shards)) and set(per_shard.values()) <= {1, 2}
    else:
        assert per_shard == dict.fromkeys(range(cell.shards), 1), per_shard  # no retry
    for shard in range(cell.shards):  # each finished file kept: labelled once
        lines = journal.journal_path(run_dir, shard).read_text().splitlines()
        files = Counter(journal.Line.from_json(line, "journal").file for line in lines)
        assert files and max(files.values()) == 1, (shard, files)
    assert "is claimed by" not in console and "Traceback" not in console
    assert "Trying to restart job" not in console  # no Snakemake retry was needed
    preempted = re.findall(r"shardwise: job (\d+) \(shards [\d,-]+\) was preempted", console)
    if cell.extra != "kill":  # the killed workflow may not have said the last one
        assert len(preempted) == 2 * cell.times, console[-5000:]
    else:
        assert console.count("of an earlier invocation (shards") == 2  # each adopted job
        assert "cleared Snakemake's lock" in console
    if cell.extra == "vanish":
        lost = re.findall(
            r"job \d+ \(shards [\d,-]+\) has left squeue before its end was seen", console
        )
        assert len(lost) == 2 and "2 of 2 shard(s) done" in console, console[-5000:]
    if cell.extra == "node_fail":
        assert (
            len(re.findall(r"lost its node \(NODE_FAIL\) and was requeued by SLURM", console)) == 2
        )
    status = sr.json_doc(
        sr.shardwise("cluster", "status", "--run-dir", str(run_dir), "--format", "json")
    )
    fates = status["job_fates"]
    assert fates["preemptions"] == 2 * cell.times, fates
    print(f"\n--- {cell}: {fates}", file=sys.stderr)
    assert markers.done_shards(run_dir) == set(range(cell.shards))


@pytest.mark.race
def test_the_benchmarks_preemption_cell_labels_every_file_once_with_and_without_scavenger(
    preemptive, tmp_path
):
    """bench/campaign.py --preempt's smoke run: a fair share of one GPU in ``main``, and a
    second GPU lent through ``scavenger`` (CANCEL, GraceTime 0, one shard per job), which
    another user takes back mid-run; no operator command in either campaign."""
    out = tmp_path / "preempt.json"
    argv = [sys.executable, str(sr.REPO / "bench" / "campaign.py"), "--preempt",
            "--docs-per-file", "20", "--preempt-after", "3", "--others-seconds", "10",
            "--json", str(out)]  # fmt: skip
    env = {**sr.env(), "SHARDWISE_SLURM_PREEMPT": "1"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(proc.stdout, file=sys.stderr)
    campaigns = json.loads(out.read_text())["campaigns"]
    for name, c in campaigns.items():
        assert (c["exit"], c["files_lost"], c["files_labelled_twice"]) == (0, 0, 0), (name, c)
    assert campaigns["guaranteed"]["preemptions"] == 0
    assert campaigns["preemptible"]["preemptions"] >= 1
