"""Option labels quoted in running text (the group page's bulk results) read as one quotation."""

from __future__ import annotations

from escalations.templatetags.dash import quoted


def test_a_label_is_quoted_with_double_marks() -> None:
    assert quoted("Extend 15 min / 4 checks") == "“Extend 15 min / 4 checks”"


def test_a_label_that_quotes_a_provider_state_is_quoted_with_single_marks() -> None:
    label = "Treat “needs_payment” as pending: 15 min / 4 checks"
    assert quoted(label) == "‘Treat “needs_payment” as pending: 15 min / 4 checks’"
