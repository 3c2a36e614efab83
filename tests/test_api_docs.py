"""The API reference: every public name has a docstring, pdoc renders it, and its examples run.

``scripts/docs.sh`` renders ``lowwater`` (the names of ``import lowwater as
lw``) and the ``lowwater.api`` modules they come from with pdoc. The examples
(``>>>``) of modules that need no session run here; those building from a
streaming DataFrame (:data:`SPARK_DOCTESTS`) run in tests/spark/test_api.py on
the shared session.
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pdoc.doc

import lowwater as lw

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTED = ("lowwater", "lowwater.api", "lowwater.api.pipeline", "lowwater.api.stream", "lowwater.api.specs",
              "lowwater.api.tools", "lowwater.api.running", "lowwater.api.foreach")
PURE_DOCTESTS = ("lowwater.api.specs", "lowwater.api.args", "lowwater.api.join", "lowwater.api.toml_text")
SPARK_DOCTESTS = ("lowwater.api", "lowwater.api.pipeline", "lowwater.api.stream")
DOCTEST_FLAGS = doctest.ELLIPSIS


def undocumented(module_name: str) -> list[str]:
    """The public names of a module (its ``__all__``, else what it defines) and of their classes without a
    docstring, as pdoc sees them (a core dataclass's fields are described by its class docstring)."""
    module = importlib.import_module(module_name)
    doc = pdoc.doc.Module(module)
    names = getattr(module, "__all__", None) or [
        n for n, v in vars(module).items() if not n.startswith("_") and getattr(v, "__module__", None) == module_name]
    missing = []
    for name in names:
        d = doc.get(name)
        if d is None or not d.docstring.strip():
            missing.append(f"{module_name}.{name}")
        if isinstance(d, pdoc.doc.Class):
            core = d.obj.__module__.startswith("lowwater.core")
            missing += [f"{module_name}.{name}.{m.name}" for m in d.own_members if not m.name.startswith("_")
                        and not (core and isinstance(m, pdoc.doc.Variable)) and not m.docstring.strip()]
    return missing


def test_every_public_name_has_a_docstring():
    assert [m for name in DOCUMENTED for m in undocumented(name)] == []
    assert {"whatif", "reconcile", "stream"} <= set(lw.__all__) and callable(lw.Pipeline.interval_join)
    script = (ROOT / "scripts" / "docs.sh").read_text()
    assert all(f" {name} " in script or f" {name}\n" in script for name in DOCUMENTED[1:])  # what it renders


def test_the_api_reference_renders(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "docs.sh"), str(tmp_path / "api")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "api" / "lowwater.html").read_text()
    assert all(f'id="{name}"' in page for name in lw.__all__), [n for n in lw.__all__ if f'id="{n}"' not in page]
    assert "Pairs of this stream" in page and "lowwater whatif --config" in page  # interval_join, whatif
    assert not (tmp_path / "api" / "lowwater" / "reconcile.html").exists()  # lw.reconcile is the function
    handle = (tmp_path / "api" / "lowwater" / "api" / "running.html").read_text()
    assert 'id="LowwaterQuery.last_progress"' in handle and 'id="LowwaterQuery.await_termination"' in handle


def test_the_docstring_examples_run():
    for name in PURE_DOCTESTS:
        failed, attempted = doctest.testmod(importlib.import_module(name), extraglobs={"lw": lw},
                                            optionflags=DOCTEST_FLAGS, report=True)
        assert failed == 0 and attempted > 0, name
    with_examples = {f"lowwater.{'.'.join(p.relative_to(ROOT / 'src' / 'lowwater').with_suffix('').parts)}"
                     .removesuffix(".__init__") for p in (ROOT / "src" / "lowwater" / "api").glob("*.py")
                     if re.search(r"^\s*>>> ", p.read_text(), re.M)}
    assert with_examples == set(PURE_DOCTESTS) | set(SPARK_DOCTESTS)  # every module's examples run somewhere
