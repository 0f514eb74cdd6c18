"""Templates stay readable: no line over 160 characters (docs/architecture.md, "Templates").

A line that long hides its markup from review. A long one is broken inside a tag, between
attributes, or where the text already has a space; a long sentence of business wording belongs in
operations/cards/words.py, and a form every card act repeats in {% card_form %}.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The project's templates: the site's own folder and any app's templates/ folder (not the test apps').
APPS = ("accounts", "escalations", "operations", "demo")
TEMPLATE_DIRS = [ROOT / "templates", *(ROOT / app / "templates" for app in APPS)]
LONGEST = 160


def long_lines(folders: list[Path], *, longest: int = LONGEST) -> list[str]:
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.html")) if folder.is_dir() else []:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if len(line) > longest:
                    found.append(f"{path.relative_to(folder.parent)}:{number}: {len(line)} characters")
    return found


def test_no_template_line_is_longer_than_160_characters() -> None:
    assert (ROOT / "templates" / "base.html").is_file()  # the scan looks where the templates are
    assert long_lines(TEMPLATE_DIRS) == []


def test_the_check_finds_a_long_line(tmp_path: Path) -> None:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "ok.html").write_text("<p>short</p>\n" + "x" * LONGEST + "\n")
    (folder / "long.html").write_text("<p>\n" + "y" * (LONGEST + 1) + "\n")
    found = long_lines([folder])
    assert len(found) == 1 and found[0].endswith("long.html:2: 161 characters")
