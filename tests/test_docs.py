"""The docs stay reference: design.md within its size, no dated measurement tables, every decision
record indexed, and the README's layout naming the code as it is (issue 34)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ADR = DOCS / "adr"
PKG = ROOT / "src" / "lowwater"
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b\d\d-\d\d \d\d:\d\d\b")


def test_design_is_reference_sized():
    assert len((DOCS / "design.md").read_text(encoding="utf-8").splitlines()) <= 450


def test_no_dated_measurement_tables_in_docs():
    for path in [*DOCS.glob("*.md"), *ADR.glob("*.md")]:
        text = path.read_text(encoding="utf-8")
        if path.name == "performance.md":  # its generated table has a "measured at" column
            text = re.sub(r"<!-- results:begin -->.*?<!-- results:end -->", "", text, flags=re.S)
        dated = [ln for ln in text.splitlines() if ln.lstrip().startswith("|") and DATE.search(ln)]
        assert not dated, f"{path.relative_to(ROOT)}: dated table rows (put figures in bench/results): {dated[:3]}"


def test_every_decision_record_is_indexed_once_and_has_its_sections():
    index = (ADR / "README.md").read_text(encoding="utf-8")
    linked = re.findall(r"\]\((\d{4}-[^)]+\.md)\)", index)
    records = sorted(p.name for p in ADR.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert sorted(linked) == records, "docs/adr/README.md: one line per record, each record listed"
    assert len({name[:4] for name in records}) == len(records), "two records share a number"
    for name in records:
        text = (ADR / name).read_text(encoding="utf-8")
        first = text.splitlines()[0] if text else ""
        assert first.startswith("#") and name[:4] in first, f"{name}: the title names its number"
        for section in ("Context", "Decision", "Consequences"):  # a heading or a bold label
            assert re.search(rf"(?im)^(#+ *|\*\*){section}\b", text), f"{name}: no {section} section"


def _layout() -> dict[str, str]:
    """The README's layout block: each entry (``src/lowwater/``'s packages indented by two) -> its text."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    name = ""
    for ln in block.splitlines():
        m = re.match(r"^( {0,2})(\S+)(.*)$", ln)
        if m:
            name = ("src/lowwater/" if m.group(1) else "") + m.group(2)
            entries[name] = m.group(3)
        elif name:
            entries[name] += " " + ln.strip()
    return entries


def test_readme_layout_names_what_exists_and_every_module():
    entries = _layout()
    for name in entries:
        assert (ROOT / name).exists(), f"README layout names {name}, which does not exist"
    for pkg in sorted(p for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        text = entries.get(f"src/lowwater/{pkg.name}/")
        assert text is not None, f"README layout: no entry for src/lowwater/{pkg.name}/"
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
        for tok in re.findall(r"(?<![\w/.])([a-z_]+)/(?!\w)", text):  # sub-packages it names: watermarks/
            assert (pkg / tok).is_dir() or tok in {"results", "late", "alerts"}, f"{pkg.name}/{tok}/ named"
        for mod in sorted(pkg.rglob("*.py")):
            if mod.stem not in {"__init__", "__main__"}:
                assert mod.stem in words, f"README layout, {pkg.name}/: {mod.relative_to(PKG)} not named"
    for mod in sorted(PKG.glob("*.py")):
        if mod.stem != "__init__":
            assert f"src/lowwater/{mod.name}" in entries, f"README layout: {mod.name} not named"
