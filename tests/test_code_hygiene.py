"""Suppressions say why, and only where they suppress something (issue 26 item 7).

mypy checks the app packages and `examples/` is written to be checked by its readers; a `type: ignore`
there carries its reason on the same line or in the comment just above (a run of consecutive
ignores may share one). The tests and benchmarks are not type-checked, so an ignore there would
suppress nothing and is refused. Inert `noqa` codes (rules ruff does not run) are refused by ruff's
RUF100 in `make lint`; a test here keeps RUF100 selected.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ("operations", "escalations", "accounts", "demo", "pollerdash", "examples")
UNCHECKED = ("tests", "bench")
IGNORE = re.compile(r"#\s*type:\s*ignore(?:\[[^\]]*\])?(?P<rest>.*)$")


def python_files(*roots: str) -> list[Path]:
    return [p for root in roots for p in sorted((ROOT / root).rglob("*.py")) if "migrations" not in p.parts]


def unexplained_ignores(path: Path, *, root: Path = ROOT) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for number, line in enumerate(lines):
        match = IGNORE.search(line)
        if match is None or match.group("rest").strip().lstrip("#").strip():
            continue
        above = number - 1
        while above >= 0 and IGNORE.search(lines[above]) and not lines[above].lstrip().startswith("#"):
            above -= 1
        if above < 0 or not lines[above].lstrip().startswith("#"):
            found.append(f"{path.relative_to(root)}:{number + 1}: {line.strip()}")
    return found


def test_every_type_ignore_says_why():
    missing = [where for path in python_files(*CHECKED) for where in unexplained_ignores(path)]
    assert not missing, "a type: ignore without its reason:\n" + "\n".join(missing)


def test_no_type_ignore_where_mypy_does_not_look():
    inert = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in python_files(*UNCHECKED)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if IGNORE.search(line)
    ]
    assert not inert, "mypy does not check these files; the ignore suppresses nothing:\n" + "\n".join(inert)


def test_unused_and_inert_noqa_are_lint_errors():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "RUF100" in config["tool"]["ruff"]["lint"]["select"]


def test_the_hygiene_check_sees_a_bare_ignore(tmp_path):
    sample = tmp_path / "sample.py"
    ignore = "# type" + ": ignore[assignment]"
    sample.write_text(f"x: int = 'a'  {ignore}\n# why\ny: int = 'b'  {ignore}\n")
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in unexplained_ignores(sample, root=tmp_path)] == ["1"]
