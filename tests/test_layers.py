"""Imports go down: no module imports a package above its own, and no two packages import each other.

Read from the source with ``ast`` (imports inside functions and under
``TYPE_CHECKING`` count too), so it takes milliseconds and starts no Spark.
The order, lowest first (docs/adr/0030-layers-and-registries.md):

    time < core < config < runtime < io < spark < observe, advisor, reconcile, report, testing
         < demo, api < cli, lowwater (the package's __init__: the Python API's and the core's names)

``time`` (integer microseconds) is below the core, which uses it; ``runtime``
holds the Spark helpers io and spark share; ``report`` (terminal output) and
``testing`` (scenario runners, throwaway servers) drive the engine like the
other tools of their layer; ``demo`` runs them all, ``api`` (``import lowwater as lw``) builds and
starts pipelines as the CLI does; ``cli`` and the package's ``__init__`` are the top.
Packages of one layer may import each other, never in a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "src" / "lowwater"

LAYERS: list[set[str]] = [
    {"time"},
    {"core"},
    {"config"},
    {"runtime"},
    {"io"},
    {"spark"},
    {"observe", "advisor", "reconcile", "report", "testing"},
    {"demo", "api"},
    {"cli", "lowwater"},  # lowwater: the package's own __init__, the public names (the Python API's, the core's)
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def unit_of(module: str) -> str:
    """The layered unit of a dotted module name: its package under lowwater, a top-level module, or the root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "lowwater"


def module_name(path: Path, root: Path = PKG) -> str:
    """``src/lowwater/spark/engine.py`` -> ``lowwater.spark.engine`` (a package's ``__init__`` is the package)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, is_package: bool = False) -> Iterator[str]:
    """Every lowwater module ``source`` imports, at any depth (inside functions too), relative ones resolved."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "lowwater")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != "lowwater":
                continue
            if target == "lowwater":  # ``from lowwater import spark`` names a package; ``__version__`` the root
                yield from (f"lowwater.{a.name}" if (PKG / a.name).exists() or (PKG / f"{a.name}.py").exists()
                            else "lowwater" for a in node.names)
            else:
                yield target


@cache  # the two checks of the package share one walk of its source (a few seconds); nothing mutates the result
def edges(root: Path = PKG) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the imports that make that edge, for every pair of distinct units."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        for target in imports(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            a, b = unit_of(module), unit_of(target)
            if a != b:
                found.setdefault((a, b), []).append(f"{module} -> {target}")
    return found


def upward(found: dict[tuple[str, str], list[str]]) -> list[str]:
    """The imports of a unit above the importer's layer."""
    return [imp for (a, b), imps in sorted(found.items()) if RANK[b] > RANK[a] for imp in imps]


def cycles(found: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """Every cycle of the unit graph, each as the units along it (depth-first search for back edges)."""
    graph: dict[str, set[str]] = {}
    for a, b in found:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                out.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return out


def test_every_package_and_top_level_module_has_a_layer():
    units = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in PKG.glob("*.py") if p.stem != "__init__"} | {"lowwater"}
    assert units - set(RANK) == set(), "place the new package in LAYERS (and in ADR 0030's order)"
    assert set(RANK) - units == set(), "LAYERS names a package that no longer exists"


def test_no_module_imports_a_package_above_it():
    found = edges()
    assert ("spark", "io") in found and ("cli", "spark") in found  # the walk sees the imports it judges
    assert upward(found) == []


def test_no_import_cycles_between_packages():
    assert cycles(edges()) == []


def test_the_check_sees_what_it_must_refuse(tmp_path):
    """An upward import inside a function, a relative one and a cycle of one layer are all caught."""
    root = tmp_path / "lowwater"
    for pkg, text in {
        "core": "def f():\n    from lowwater.spark.engine import Engine\n",
        "io": "from ..config import x\nfrom . import sink\n",
        "advisor": "import lowwater.reconcile.job\n",
        "reconcile": "from lowwater.advisor import sweep\n",
        "config": "",
        "spark": "",
    }.items():
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
        (root / pkg / "mod.py").write_text(text)
    found = edges(root)
    assert found[("io", "config")] == ["lowwater.io.mod -> lowwater.config"]
    assert upward(found) == ["lowwater.core.mod -> lowwater.spark.engine"]
    assert cycles(found) == [["advisor", "reconcile", "advisor"]]
