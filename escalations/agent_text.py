"""Text an agent wrote or a provider sent, quoted in a message people act on (the on-call email,
chat and pager).

An agent's purpose, job id or callback address, and a provider's words (a state no table lists,
quoted in why a card stopped and in the option that would accept it), are data, never
instructions: a notification shows them after pollerdash's own link, on one line, capped, inside
quotes they cannot close, with every link defanged so no mail client, chat or pager makes it
clickable ("http://evil.example" becomes "hxxp://evil[.]example"). Pure functions, no I/O.
"""

from __future__ import annotations

import re

AGENT_TEXT_MAX = 200

_HTTP_SCHEME = re.compile(r"(?i)\bh(?:tt|xx)p(s?)://")
_OTHER_SCHEME = re.compile(r"(?i)\b(?!hxxps?://)([a-z][a-z0-9+.-]*)://")
_BARE_SCHEME = re.compile(r"(?i)\b(mailto|javascript|data|file|tel|sms|callto|skype|ftp):")
# A dot inside a name ("evil.example", "www.x") but not inside a number ("1.5"); dotted-quad
# addresses are handled on their own.
_NAME_DOT = re.compile(r"(?<=[^\W\d_])\.(?=[^\W_])|(?<=\d)\.(?=[^\W\d_])")
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")
# Quote marks the text could use to close our quotes and write outside them.
_QUOTES = str.maketrans({"“": "'", "”": "'", '"': "'", "«": "'", "»": "'", "„": "'"})


def defang(text: str) -> str:
    """The text with every URL, domain and address made unclickable but still readable."""
    text = _HTTP_SCHEME.sub(lambda m: f"hxxp{m.group(1)}://", text)
    text = _OTHER_SCHEME.sub(r"\1[:]//", text)
    text = _BARE_SCHEME.sub(r"\1[:]", text)
    text = _IPV4.sub(lambda m: m.group().replace(".", "[.]"), text)
    return _NAME_DOT.sub("[.]", text)


def one_line(text: str) -> str:
    """Every run of whitespace, line breaks included (Unicode ones too), as one space."""
    return " ".join(text.split())


def quoted(value: object, *, limit: int = AGENT_TEXT_MAX) -> str:
    """VALUE as one defanged, capped line in quotes it cannot close: “…”."""
    text = defang(one_line(str(value)).translate(_QUOTES))
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return f"“{text}”"


def inert(value: object, *, limit: int) -> str:
    """pollerdash's words that embed untrusted text (an option label naming the provider's state,
    a decision's words quoting that label): one defanged, capped line, its own quotes kept."""
    text = defang(one_line(str(value)))
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def slack_escaped(text: str) -> str:
    """Slack's three control characters escaped: the text cannot form a link or a mention."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
