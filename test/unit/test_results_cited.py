"""Every results file that the code cites stays in test/kernels/glm53/results/.

Scans the .py, .sh and .md files under sgl_amd_mono/ and test/, and the top-level README.md, for
`results/NAME` (NAME of [A-Za-z0-9_.*-], a trailing sentence dot dropped; only names that look like a
file, with an extension or a `*`, so "results/ncu notes" is prose). A NAME with `*` is a glob: at least
one file must match it. Not scanned: test/kernels/glm53/results/README.md, whose "Superseded sets"
section names files removed on purpose (they stay in git history), and this module (its examples).
"""

from __future__ import annotations

import fnmatch
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "test" / "kernels" / "glm53" / "results"
CITE = re.compile(r"results/([A-Za-z0-9_.*-]+)")


def cited(text: str) -> set[str]:
    """The results-folder names a text cites."""
    names = {m.rstrip(".") for m in CITE.findall(text)}
    return {n for n in names if "." in n or "*" in n}


def missing(text: str, files: list[str]) -> list[str]:
    """The names `text` cites that none of `files` (the results folder's names) matches."""
    return sorted(n for n in cited(text) if not fnmatch.filter(files, n))


def _scanned() -> list[pathlib.Path]:
    out = [ROOT / "README.md"]
    for top in ("sgl_amd_mono", "test"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.suffix in (".py", ".sh", ".md") and p.is_file() and RESULTS not in p.parents \
                    and "__pycache__" not in p.parts and p != pathlib.Path(__file__).resolve():
                out.append(p)
    return out


def test_cited_results_exist():
    files = [p.name for p in RESULTS.iterdir()]
    bad = {str(p.relative_to(ROOT)): m for p in _scanned()
           if (m := missing(p.read_text(encoding="utf-8"), files))}
    assert not bad, f"cited but absent from {RESULTS.relative_to(ROOT)}: {bad}"


def test_missing_citation_is_reported():
    files = ["final10_h200_trace.log", "final10_h200_summary.txt"]
    text = "see results/final10_h200_trace.log and results/does_not_exist.log; results/final10_h200_*."
    assert missing(text, files) == ["does_not_exist.log"]
    assert missing("results/nothing_like_this_*", files) == ["nothing_like_this_*"]
