"""The forms on a decision card, written once: `{% card_form "escalation_acknowledge" %}…{% endcard_form %}`.

Every act on a card (acknowledging, handing over, a note, an option) posts to its URL for the card
in the context (`esc`) with the CSRF token; htmx posts it and swaps the answer, the card as it is
now, in place of the card, and says which page the card is on (`where`), so the answer fits it.
Without JavaScript the same form posts normally.

An option's form (`option=o index=forloop.counter`) also carries the option's id and the card
version it was chosen on. Its shape follows the option (operations/cards/option_types.py):
"inspect" posts without htmx, in a new tab when the provider has a console, and records the look
on the way there; the others post with htmx, and an option confirmed in two steps takes the card's
shared comment box along (an option confirmed explicitly has its own box in its panel).
"""

from __future__ import annotations

from django import template
from django.template.base import FilterExpression, Node, NodeList, Parser, Token
from django.template.context import Context
from django.template.defaulttags import CsrfTokenNode
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from operations.cards.options import Confirm, Kind, Option

register = template.Library()

_ARGUMENTS = {"class", "option", "index"}


@register.tag("card_form")
def card_form(parser: Parser, token: Token) -> CardFormNode:
    """`{% card_form "<url name>" [class="…"] [option=o index=n] %}…{% endcard_form %}`."""
    name, *bits = token.split_contents()
    if not bits:
        raise template.TemplateSyntaxError(f"{name} needs the URL name of the act")
    url_name, arguments = parser.compile_filter(bits[0]), {}
    for bit in bits[1:]:
        key, sep, value = bit.partition("=")
        if not sep or key not in _ARGUMENTS or key in arguments:
            raise template.TemplateSyntaxError(f"{name}: {bit!r} is not one of {sorted(_ARGUMENTS)} given once")
        arguments[key] = parser.compile_filter(value)
    body = parser.parse(("endcard_form",))
    parser.delete_first_token()
    return CardFormNode(url_name=url_name, arguments=arguments, body=body)


class CardFormNode(Node):
    def __init__(self, *, url_name: FilterExpression, arguments: dict[str, FilterExpression], body: NodeList) -> None:
        self.url_name, self.arguments, self.body = url_name, arguments, body

    def render(self, context: Context) -> SafeString:
        given = {key: value.resolve(context) for key, value in self.arguments.items()}
        esc, option = context["esc"], given.get("option")
        url = reverse(str(self.url_name.resolve(context)), args=[esc.pk])
        attributes: list[tuple[str, object]] = [("class", given.get("class")), ("method", "post"), ("action", url)]
        hidden: list[tuple[str, object]] = []
        if isinstance(option, Option):
            hidden = [("option", option.id), ("version", esc.version)]
        if isinstance(option, Option) and option.kind is Kind.INSPECT:
            # Recorded, then on to the provider's console (escalations/views/cards.py: decide).
            console = context["card"].console_url
            attributes += [("target", "_blank" if console else ""), ("data-inspect", True)]
        else:
            attributes += [("hx-post", url), ("hx-target", f"#card-{esc.pk}"), ("hx-swap", "outerHTML")]
            hidden.append(("where", context.get("where", "")))
            if isinstance(option, Option):
                if option.confirm is Confirm.TWO_STEP:
                    attributes.append(("hx-include", f"#comment-{esc.pk}"))
                attributes.append(("hx-disabled-elt", "find button"))
        if "index" in given:
            attributes.append(("data-option-index", given["index"]))
        return format_html(
            "<form{}>\n{}{}{}</form>",
            _attributes(attributes),
            CsrfTokenNode().render(context),
            format_html_join("", '<input type="hidden" name="{}" value="{}">', hidden),
            self.body.render(context),  # safe: the template engine escaped what it rendered
        )


def _attributes(pairs: list[tuple[str, object]]) -> SafeString:
    """name="value" pairs; a True value is a bare attribute, an empty one is left out."""
    shown = [(name, value) for name, value in pairs if value not in ("", None, False)]
    return format_html_join("", "{}", ((_attribute(name, value),) for name, value in shown))


def _attribute(name: str, value: object) -> SafeString:
    return format_html(" {}", name) if value is True else format_html(' {}="{}"', name, value)
