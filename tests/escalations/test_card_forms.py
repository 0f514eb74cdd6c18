"""The forms on a card, written once ({% card_form %}, escalations/templatetags/card_forms.py): every
act posts to its own URL for this card with the CSRF token; with htmx the answer replaces this card
and knows which page it is on; an option carries its id and the card version it was chosen on."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.template import Context, Template, TemplateSyntaxError
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db


class Forms(HTMLParser):
    """Each <form>'s attributes and the name=value of its hidden inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[dict[str, str | None], dict[str, str | None]]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag == "form":
            self.forms.append((found, {}))
        elif tag == "input" and found.get("type") == "hidden" and self.forms:
            self.forms[-1][1][str(found["name"])] = found.get("value")


def test_every_form_on_a_card_posts_for_this_card_and_swaps_it_in_place(stopped, alice, bob, client: Client) -> None:
    esc = stopped()
    client.force_login(alice)
    html = client.get(reverse("escalation_card", args=[esc.pk]), {"where": "inbox"}, headers={"HX-Request": "true"})
    page = Forms()
    page.feed(html.content.decode())
    acts = {reverse(name, args=[esc.pk]) for name in ("escalation_decide", "escalation_acknowledge", "escalation_note")}
    acts.add(reverse("escalation_reassign", args=[esc.pk]))
    options = {}
    assert len(page.forms) >= 6
    for attributes, hidden in page.forms:
        assert attributes["method"] == "post" and attributes["action"] in acts
        assert hidden["csrfmiddlewaretoken"]
        if "data-inspect" in attributes:
            # Recorded, then on to the provider's console in a new tab: no swap.
            assert "hx-post" not in attributes and attributes["target"] == "_blank"
        else:
            assert attributes["hx-post"] == attributes["action"] and attributes["hx-target"] == f"#card-{esc.pk}"
            assert attributes["hx-swap"] == "outerHTML" and hidden["where"] == "inbox"
        if "option" in hidden:
            assert hidden["version"] == str(esc.version)
            options[hidden["option"]] = attributes
    # Extensions are confirmed by a second click and take the card's comment box along; a cancel has its own.
    assert options["extend:15m:4"]["hx-include"] == f"#comment-{esc.pk}" and f"comment-{esc.pk}" in page.ids
    assert "hx-include" not in options["cancel_at_provider"] and "hx-include" not in options["close"]
    assert set(options) >= {"extend:15m:4", "cancel_at_provider", "inspect", "close"}


def test_a_card_form_with_an_argument_it_does_not_know_is_refused_when_the_template_is_read() -> None:
    with pytest.raises(TemplateSyntaxError, match="colour"):
        Template('{% load card_forms %}{% card_form "escalation_note" colour="red" %}{% endcard_form %}')
    with pytest.raises(TemplateSyntaxError, match="URL name"):
        Template("{% load card_forms %}{% card_form %}{% endcard_form %}")


def test_a_card_form_keeps_what_it_wraps_escaped(stopped) -> None:
    esc = stopped()
    rendered = Template(
        '{% load card_forms %}{% card_form "escalation_note" class="note-form" %}<p>{{ text }}</p>{% endcard_form %}'
    ).render(Context({"esc": esc, "where": "operation", "text": "<b>bold</b>"}))
    assert "<p>&lt;b&gt;bold&lt;/b&gt;</p>" in rendered and 'class="note-form"' in rendered
