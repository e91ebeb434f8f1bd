"""The demo transcripts the README and its docs quote are what a newcomer sees.

The demo is built as the quick start builds it (``shardwise demo``, in two processes: their
models and tokenizers are byte-identical), labelled in process (what ``snakemake
--profile profiles/local`` runs), and every other command of the demo
transcripts runs in a scratch directory as written; its output must read as the page
quotes it. In a quoted output a line ``...`` stands for any lines, ``...`` in a line for
any text, a dolma log's timestamp for any time, and a probability for any within 1e-5 of
it (float32 sums differ between CPUs in the seventh decimal). A command quoted without output
is run, its output not held.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from shardwise.classify.shard_job import run_shard
from shardwise.planner.prepare import prepare_run
from shardwise.run import plan

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Step:
    """One ``$ command`` of a quoted transcript and the output lines quoted under it."""

    command: str
    quoted: tuple[str, ...]


#: The pages that quote demo transcripts: the front page and the docs it links to.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def transcript(first: str) -> list[Step]:
    """The steps of the fenced block (on the one page that quotes ``$ first``) in which
    ``$ first`` starts, from there on."""
    found = [p for p in PAGES if f"$ {first}" in p.read_text("utf-8").splitlines()]
    assert len(found) == 1, f"$ {first}: quoted on {len(found)} pages, not one"
    lines = found[0].read_text("utf-8").splitlines()
    start = lines.index(f"$ {first}")
    steps: list[Step] = []
    command, quoted = None, []
    for line in lines[start:]:
        if line.startswith("```"):
            break
        if line.startswith("$ "):
            if command is not None:
                steps.append(Step(command, tuple(quoted)))
            command, quoted = line[2:], []
        elif command is not None and command.endswith("\\"):
            command = command[:-1] + line.strip()
        else:
            quoted.append(line)
    steps.append(Step(str(command), tuple(quoted)))
    return steps


#: The parts of a quoted line that stand for something else (module docstring).
_WILD = re.compile(r"\.\.\.|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|\d\.\d{10,}")
#: How far a quoted probability may be from the one printed: float32 sums differ between
#: CPUs (another GEMM kernel) in the seventh decimal.
_PROB_TOLERANCE = 1e-5


def _line_pattern(line: str, probs: list[float]) -> str:
    """A regular expression for one quoted line; each probability becomes a group and its
    quoted value is appended to ``probs``."""
    out, at = [], 0
    for m in _WILD.finditer(line):
        out.append(re.escape(line[at : m.start()]))
        part = m.group()
        if part == "...":
            out.append(".*")
        elif "T" in part:
            out.append(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
        else:
            out.append(r"(\d\.\d+(?:e-\d+)?)")
            probs.append(float(part))
        at = m.end()
    return "".join(out) + re.escape(line[at:])


def reads_as_quoted(output: str, quoted: tuple[str, ...]) -> bool:
    """Whether ``output`` reads as the page quotes it (module docstring)."""
    probs: list[float] = []
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if q.strip() == "..." else _line_pattern(q, probs) + r"\n" for q in quoted
    )
    match = re.fullmatch(pattern, output.rstrip("\n") + "\n")
    if match is None:
        return False
    printed = [float(g) for g in match.groups()]
    return all(abs(a - b) <= _PROB_TOLERANCE for a, b in zip(printed, probs, strict=True))


def label(config: Path, shards: list[int] | None = None) -> None:
    """Plan and label ``shards`` (default all) of ``config``'s run in process: what
    ``snakemake --configfile CONFIG [targets] --profile profiles/local`` runs."""
    cfg = yaml.safe_load(config.read_text())
    prepare_run(cfg, main_process=True, dryrun=True)
    run_dir = Path(cfg["run_dir"])
    for shard in shards if shards is not None else sorted(plan.nonempty_shards(plan.load(run_dir))):
        run_shard(run_dir, shard, progress=False)


def play(steps: list[Step], cwd: Path) -> None:
    """Run each step in ``cwd`` (``snakemake`` as :func:`label`) and hold its output."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for step in steps:
        words = shlex.split(step.command)
        if words[0] == "snakemake":
            label(cwd / words[words.index("--configfile") + 1])
            continue
        proc = subprocess.run(
            step.command,
            shell=True,
            cwd=cwd,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
        assert proc.returncode == 0, f"$ {step.command}\n{proc.stdout[-3000:]}"
        if step.quoted:
            assert reads_as_quoted(proc.stdout, step.quoted), (
                f"$ {step.command}\nthe page quotes:\n"
                + "\n".join(step.quoted)
                + f"\nit printed:\n{proc.stdout}"
            )


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory, dolma_cli) -> Path:
    """A scratch directory laid out as the quick start's: ``.venv-dolma/bin/dolma`` is the real
    dolma, ``demo`` is the plain demo (built here, in another process than the Dolma
    demo the transcript builds)."""
    cwd = tmp_path_factory.mktemp("newcomer")
    (cwd / ".venv-dolma" / "bin").mkdir(parents=True)
    (cwd / ".venv-dolma" / "bin" / "dolma").symlink_to(dolma_cli)
    subprocess.run(
        [Path(sys.executable).parent / "shardwise", "demo", "demo"],
        cwd=cwd,
        check=True,
        capture_output=True,
    )
    return cwd


def test_the_quick_start_s_dolma_transcript_and_the_selection_read_as_quoted(newcomer):
    play(transcript("shardwise demo demo-dolma --dolma"), newcomer)
    for built in ("models", "tokenizer"):  # two builds, two processes: the same bytes
        plain, dolma = newcomer / "demo" / built, newcomer / "demo-dolma" / built
        files = sorted(p.relative_to(plain) for p in plain.rglob("*") if p.is_file())
        assert files and files == sorted(
            p.relative_to(dolma) for p in dolma.rglob("*") if p.is_file()
        )
        assert all((plain / f).read_bytes() == (dolma / f).read_bytes() for f in files), built
    play(
        transcript(
            "shardwise domains --run-dir demo-dolma/run --format weborganizer > weights.json"
        ),
        newcomer,
    )


def test_the_domain_tables_of_the_half_done_and_the_finished_demo_read_as_quoted(newcomer):
    config = newcomer / "demo" / "config.yaml"
    label(config, [0, 1, 2, 3])  # snakemake demo/run/shards/{0,1,2,3}.done
    play(transcript("shardwise domains --run-dir demo/run --top 8"), newcomer)
    label(config)
    play(
        transcript(
            "shardwise domains --run-dir demo/run --classifier topic --weight tokens --top 3"
        ),
        newcomer,
    )


def test_a_quoted_output_is_matched_line_by_line_with_its_wildcards():
    quoted = ("a 0.3107982277870178 b", "...", "[2026-12-02T12:12:12Z INFO x] Done!", "n ... m")
    assert reads_as_quoted(
        "a 0.31079822 b\nmore\nlines\n[2027-01-01T00:00:00Z INFO x] Done!\nn anything m\n", quoted
    )
    assert reads_as_quoted("a 0.3107982 b\n[2027-01-01T00:00:00Z INFO x] Done!\nn x m", quoted)
    other_cpu = "a 0.3107978403568268 b\n[2027-01-01T00:00:00Z INFO x] Done!\nn x m"
    assert reads_as_quoted(other_cpu, quoted)  # seen: the seventh decimal on another CPU
    assert not reads_as_quoted("a 0.3108182 b\n[2027-01-01T00:00:00Z INFO x] Done!\nn x m", quoted)
    assert not reads_as_quoted("a 0.3107982 b\n[2027-01-01T00:00:00Z INFO x] Done!\n", quoted)
    assert not reads_as_quoted("97\n", ("96",))
