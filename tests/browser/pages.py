"""Helpers shared by the browser tests."""

from __future__ import annotations

from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def shoot(page: object, artifacts: Path, name: str) -> Path:
    """A full-page screenshot under test-artifacts/ (look at them: they are the visual check)."""
    path = artifacts / f"{name}.png"
    # caret="initial": hiding the caret writes a style attribute on every input, which htmx then
    # copies onto the swapped-in element and the CSP (no inline styles) rightly refuses.
    page.screenshot(path=str(path), full_page=True, caret="initial")  # type: ignore[attr-defined]
    return path
