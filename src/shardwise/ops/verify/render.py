"""What ``shardwise verify`` found: each :class:`Finding`, and the :class:`VerifyReport`
that collects them with the run's counts, as text lines and as the JSON document."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from shardwise.ops.coverage.render import fidelity_lines, quality_lines
from shardwise.run import (
    fidelity,
)


@dataclass(frozen=True, order=True)
class Finding:
    """One problem or warning: where (a URL or path) and what is wrong."""

    where: str
    what: str

    def line(self, level: str) -> str:
        """The one-line form the CLI prints."""
        return f"{level}: {self.where}: {self.what}"


@dataclass(kw_only=True)
class VerifyReport:
    """What ``verify_run`` found; ``ok`` is the exit decision."""

    run_dir: str
    sample: float = 1.0
    shards_total: int = 0
    shards_done: int = 0
    files_planned: int = 0
    files_marked: int = 0
    files_checked: int = 0
    rows_checked: int = 0
    orphans: int = 0
    files_quarantined: int = 0
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    quarantined: list[Finding] = field(default_factory=list)
    data_quality: dict[str, int] = field(default_factory=dict)  # over the checked files
    labelled_by: dict[str, int] = field(default_factory=dict)  # site -> checked files (campaign)
    fidelity: list[fidelity.Fidelity] = field(default_factory=list)  # over the checked files
    #: What ``--repair`` resets: files and shards whose marker vouches for something broken.
    broken_files: set[str] = field(default_factory=set)
    broken_shards: set[int] = field(default_factory=set)
    repairable: int = 0  # problems that removing those markers (or rebuilding) resolves
    #: Labelled files whose derived outputs are broken: rewritten from the sidecar.
    rebuild: set[str] = field(default_factory=set)
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # file -> (planned, now)
    inputs_gone: list[str] = field(default_factory=list)  # labelled, input gone (--extend)
    input_drift: dict[str, Any] = field(default_factory=dict)  # added and gone files
    retired: int = 0  # outputs of files retired with --gone keep: no orphans
    copies: str = ""  # the two run.json copies disagree: how, and which to keep
    measured_on_replaced: bool = False  # ... and the run directory's, checked against, goes

    @property
    def ok(self) -> bool:
        """True when nothing contradicts the markers."""
        return not self.problems

    @property
    def unrepairable(self) -> int:
        """Problems ``--repair`` does not resolve (they need another fix)."""
        return len(self.problems) - self.repairable

    def problem(
        self,
        where: str,
        what: str,
        *,
        file: str | None = None,
        shard: int | None = None,
        rebuild: str | None = None,
    ) -> None:
        """Record a contradiction; ``file``/``shard``: the marker ``--repair`` removes (the
        next run redoes exactly that); ``rebuild``: the file whose derived outputs it rewrites."""
        self.problems.append(Finding(where, what))
        if file is not None:
            self.broken_files.add(file)
        if shard is not None:
            self.broken_shards.add(shard)
        if rebuild is not None:
            self.rebuild.add(rebuild)
        if file is not None or shard is not None or rebuild is not None:
            self.repairable += 1

    def warn(self, where: str, what: str) -> None:
        """Record a state that a retry clears by itself."""
        self.warnings.append(Finding(where, what))

    def summary(self) -> str:
        """The last line the CLI prints."""
        verdict = "OK" if self.ok else "FAILED"
        sampled = f" (sample {self.sample:g})" if self.sample < 1 else ""
        text = f"verify {verdict}: {len(self.problems)} problem(s), {len(self.warnings)} "
        text += f"warning(s) in {self.run_dir}; shards done {self.shards_done}/"
        text += f"{self.shards_total}, files marked {self.files_marked}/{self.files_planned}, "
        text += f"quarantined {self.files_quarantined}, contents checked {self.files_checked}"
        gone = f", {len(self.inputs_gone)} input(s) gone" if self.inputs_gone else ""
        return text + f"{sampled} ({self.rows_checked} rows{gone}), orphans {self.orphans}"

    def lines(self) -> list[str]:
        """Every finding as one line (problems first), the data totals, then the summary."""
        out = [f.line("problem") for f in self.problems]
        out += [f.line("warning") for f in self.warnings]
        out += [f.line("quarantined") for f in self.quarantined]
        over = f"data: over the {self.files_checked} checked file(s): "
        quality = quality_lines(self.data_quality, self.rows_checked)
        data = [*quality, *fidelity_lines(self.fidelity)]
        out += [line.replace("data     ", over, 1) for line in data]
        if self.labelled_by:
            sites = ", ".join(f"site {s} {n:,}" for s, n in sorted(self.labelled_by.items()))
            out.append(
                f"campaign: of the {self.files_checked} checked file(s), labelled by {sites}"
            )
        out.append(self.summary())
        return out

    def to_json(self) -> dict[str, Any]:
        """A machine-readable form (``--format json``; docs/schemas/verify.schema.json)."""
        return {
            **asdict(self),
            "format_version": 1,
            "broken_files": sorted(self.broken_files),
            "broken_shards": sorted(self.broken_shards),
            "rebuild": sorted(self.rebuild),
            "ok": self.ok,
        }
