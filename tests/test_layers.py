"""The package is a house with floors: each layer imports only the layers below it.

cli, snakefile -> runtime -> ops -> planner -> classify, demo -> run -> slurm, store -> config
-> errors. Two rooms on one floor (``slurm`` and ``store``; ``classify`` and ``demo``;
``cli`` and ``snakefile``) do not import each other, and no set of modules imports itself
in a circle, function-local imports included (they are where circles used to hide).
Inside ``ops`` each family is a room of its own, with floors of their own (``OPS_FLOORS``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "shardwise"

#: Floor of each top-level module or folder of the package (higher imports lower).
FLOORS = {
    "__init__": 0,
    "errors": 0,
    "config": 1,
    "store": 2,
    "slurm": 2,
    "run": 3,
    "classify": 4,
    "demo": 4,
    "planner": 5,
    "ops": 6,
    "runtime": 7,
    "cli": 8,
    "snakefile": 8,
}

#: Floor of each family inside ``ops`` (a family imports only the families below it).
OPS_FLOORS = {
    "common": 0,
    "coverage": 1,
    "domains": 1,
    "walltime": 1,
    "dolma": 1,
    "jobs": 1,
    "cluster": 2,
    "verify": 2,
    "select": 2,
    "report": 2,
    "launch": 3,
}


def module_name(path: Path) -> str:
    """``shardwise.run.plan`` for ``src/shardwise/run/plan.py``."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def room(module: str) -> str:
    """The top-level module or folder a module lives in (``run`` for ``shardwise.run.plan``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def resolve(name: str) -> str | None:
    """The shardwise module an import names (a module, or the module that defines a name)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """Every shardwise module ``module`` imports, at module level or inside functions."""
    tree = ast.parse(MODULES[module].read_text("utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "shardwise":
                target = resolve(name)
                if target is not None and target != module:
                    found.add(target)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def test_every_module_lives_on_a_known_floor():
    assert {room(m) for m in MODULES} <= set(FLOORS), "a new folder needs a floor in FLOORS"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_the_floors_below_its_own(module):
    mine = room(module)
    upward = sorted(
        target
        for target in GRAPH[module]
        if room(target) != mine and target != "shardwise" and FLOORS[room(target)] >= FLOORS[mine]
    )
    assert upward == [], f"{module} imports {upward}: same floor or above ({mine})"


def family(module: str) -> str | None:
    """The ``ops`` family a module lives in (``coverage`` for ``shardwise.ops.coverage.read``)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "ops" else None


def test_ops_holds_only_families_on_a_known_floor():
    ops = [m for m in MODULES if room(m) == "ops" and m != "shardwise.ops"]
    loose = sorted(m for m in ops if MODULES[m].parent.name == "ops")
    assert loose == [], "a module of ops/ belongs in a family folder"
    assert {family(m) for m in MODULES if family(m)} <= set(OPS_FLOORS), "a family needs a floor"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if family(m)))
def test_an_ops_family_imports_only_the_families_below_its_own(module):
    mine = family(module)
    upward = sorted(
        target
        for target in GRAPH[module]
        if family(target) not in (None, mine) and OPS_FLOORS[family(target)] >= OPS_FLOORS[mine]
    )
    assert upward == [], f"{module} imports {upward}: same family floor or above ({mine})"


def test_no_modules_import_each_other_in_a_circle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert circles == []


#: The readers of one piece of a run directory: ``run/opened.open_run`` is the door every
#: command and job uses; only ``run`` itself and the planner (which writes these files,
#: and reads them before a run.json vouches for them) call the readers directly.
SIDE_READERS = {("plan", "load"), ("quarantine", "load"), ("runjson", "read_run_dir")}
SIDE_READERS_ALLOWED = ("run", "planner")


def side_reads(module: str) -> list[str]:
    """``plan.load`` and the like called in ``module`` (as ``module.function``)."""
    tree = ast.parse(MODULES[module].read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        name = (
            node.value.id
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            else None
        )
        if name is not None and (name, node.attr) in SIDE_READERS:
            found.append(f"{name}.{node.attr} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            owner = node.module.rsplit(".", 1)[-1]
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if (owner, a.name) in SIDE_READERS]  # fmt: skip
    return found


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if room(m) not in SIDE_READERS_ALLOWED)
)
def test_a_view_opens_the_run_through_the_one_door(module):
    assert side_reads(module) == [], f"{module}: open the run with run.opened.open_run"


def test_the_side_reader_check_finds_a_side_read():
    assert side_reads("shardwise.run.opened") != []  # it opens the pieces itself


#: No module grows past this (the house keeps its shape; ruff's C901 holds complexity).
MAX_MODULE_LINES = 800


def test_no_module_is_over_the_size_limit():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text("utf-8").splitlines()))
            > MAX_MODULE_LINES}  # fmt: skip
    assert long == {}, f"split these modules (over {MAX_MODULE_LINES} lines): {long}"
