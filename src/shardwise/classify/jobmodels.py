"""The models a shard job labels with are the models run.json pins: each classifier's
model resolved once to a real directory, its identity checked against the pin before the
load, and again after it (a model rewritten while it loaded stops the shard)."""

import dataclasses
from pathlib import Path

from shardwise.classify.modelcheck import identities, pin_refusal, source_of
from shardwise.errors import ModelError
from shardwise.run import modelpin
from shardwise.run.modelpin import ModelIdentity
from shardwise.run.opened import OpenRun


def model_sources(ctx: OpenRun) -> dict[str, Path | None]:
    """Each classifier's model resolved once to a real directory (a symlink followed, a hub
    id's cached snapshot): the job checks and loads that directory, never the name again."""
    return {model: source_of(model) for _, model, _ in ctx.meta.classifiers}


def model_identities(
    ctx: OpenRun, sources: dict[str, Path | None] | None = None
) -> dict[str, ModelIdentity]:
    """Each classifier's model identity (content hash, hub revision) for the stats."""
    return identities(ctx.meta.classifiers, sources)


def check_models(
    ctx: OpenRun,
    models: dict[str, ModelIdentity],
    sources: dict[str, Path | None] | None = None,
) -> None:
    """ModelError (the shard stops before its first file) when a classifier's model is
    not the one run.json pins: replaced in place, or a hub snapshot that moved."""
    if ctx.meta.models is None:
        return  # pinned by the next dry run (from the files' stats)
    wrong = modelpin.mismatched(ctx.meta.models, models)
    if wrong:
        names = {name: model for name, model, _ in ctx.meta.classifiers}
        raise ModelError(
            " ".join(
                pin_refusal(n, names[n], d, _named(names[n], sources)) for n, d in wrong.items()
            )
        )


def check_loaded(
    ctx: OpenRun, checked: dict[str, ModelIdentity], sources: dict[str, Path | None]
) -> None:
    """ModelError when a model's files changed while the job loaded them (written in place:
    a symlink repointed meanwhile does not move the resolved directory): its identity
    now differs from the one checked before the load. Cheap when nothing changed (the
    identity cache answers from each file's size, mtime, inode and ctime)."""
    after = model_identities(ctx, sources)
    changed = modelpin.mismatched(modelpin.pins(checked), after)
    if changed:
        paths = {name: _named(model, sources) for name, model, _ in ctx.meta.classifiers}
        text = " ".join(
            f"classifier {n!r}: the model at {paths[n]} changed while this job loaded it "
            f"({modelpin.describe(d)})."
            for n, d in changed.items()
        )
        raise ModelError(text + " Nothing was labelled; the shard runs again with what is there")


def loading_from(ctx: OpenRun, sources: dict[str, Path | None]) -> OpenRun:
    """``ctx`` whose classifiers name the resolved directories (what the engine loads)."""
    specs = tuple(
        (n, str(sources[m]) if sources.get(m) is not None else m, i)
        for n, m, i in ctx.meta.classifiers
    )
    return dataclasses.replace(ctx, meta=dataclasses.replace(ctx.meta, classifiers=specs))


def _named(model: str, sources: dict[str, Path | None] | None) -> str:
    """``models/topic (-> /data/models/topic-v2)`` when the name resolves elsewhere."""
    source = (sources or {}).get(model)
    if source is None or str(source) == model:
        return model
    return f"{model} (-> {source})"
