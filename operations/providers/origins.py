"""Provider origins: where a provider request goes, as scheme, host and port (docs/DESIGN.md section 2).

An origin is what a URL's scheme and authority name (RFC 6454): `HTTPS://API.acme.example.:443/x`
and `https://api.acme.example/y` share the origin `https://api.acme.example` (case, one final dot
and a default port spelled out change nothing; IP addresses compare in canonical form). A URL
whose authority is anything but a plain host and port — user info (`https://api.acme.example@evil`),
percent-encoding, a placeholder such as `{job_id}`, a zone index, a backslash — has no origin here
and is refused rather than normalised: URL parsers disagree about such authorities, and the one
that sends must go where the one that checked looked.

`PROVIDER_CREDENTIAL_ORIGINS` binds each credential variable to the origins it may be sent to
(`NAME=https://api.acme.example[,origin…][;NAME2=…]`); `PROVIDER_ALLOWED_ORIGINS` lists origins
that profiles without a credential may use although they are not public https addresses. Neither
message of a refused setting quotes what was written: an operator may have pasted a secret there.

`watch_key` is a provider job as the provider sees it: which credential asks for which URL — the
status URL with the job id filled in, its origin canonical — whatever account label, profile,
template or job id a watch was registered with. A job id fills `{job_id}` as exactly one path
segment (`job_id_problem` refuses `/`, `?`, `#`, `%`, a backslash, `.`, `..` and nothing), and the
profile's template has `{job_id}` as a whole path segment (`placeholder_problem`), so a job id can
neither point a request at another path nor reach one URL under two names.

Pure: no Django, no I/O (settings.py parses the operator's values at start-up with it).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from urllib.parse import quote

DEFAULT_PORTS = {"http": 80, "https": 443}
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")
_AUTHORITY = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+))(?::(?P<port>[0-9]{1,5}))?")
_LABEL = re.compile(r"[a-z0-9-]{1,63}")
_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,99}")
PLACEHOLDER = "{job_id}"
# Characters that end or re-read a path segment: a separator, a query, a fragment, an escape.
_NOT_IN_A_SEGMENT = frozenset("/?#%\\")
SEGMENT_RULE = "must be one path segment: not empty, not . or .., without / ? # % or a backslash"


class OriginError(ValueError):
    """The URL has no plain origin; the message says why without quoting it."""


@dataclass(frozen=True, order=True)
class Origin:
    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        if DEFAULT_PORTS[self.scheme] == self.port:
            return f"{self.scheme}://{host}"
        return f"{self.scheme}://{host}:{self.port}"


def _split(url: object) -> tuple[str, str, str]:
    """(scheme, authority, the rest) of an http(s) URL, or OriginError."""
    if not isinstance(url, str) or not _VISIBLE_ASCII.fullmatch(url):
        raise OriginError("must be plain ASCII without spaces or control characters (IDNs in punycode)")
    if "\\" in url:
        raise OriginError("must not contain a backslash")
    scheme, separator, rest = url.partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in DEFAULT_PORTS:
        raise OriginError("must start with http:// or https://")
    end = next((index for index, char in enumerate(rest) if char in "/?#"), len(rest))
    return scheme, rest[:end], rest[end:]


def _host(match: re.Match[str]) -> str:
    if match["v6"]:
        try:
            return str(ipaddress.IPv6Address(match["v6"]))
        except ValueError:
            raise OriginError("has an IPv6 address that cannot be read") from None
    host = match["host"].lower()
    # One final dot names the same host (an absolute DNS name); anything else with empty labels is no host.
    host = host[:-1] if host.endswith(".") else host
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    if not host or not all(_LABEL.fullmatch(label) for label in host.split(".")):
        raise OriginError("has no valid host name")
    return host


def origin_of(url: object) -> Origin:
    """The origin a URL sends to; OriginError when its authority is not a plain host[:port]."""
    scheme, authority, _rest = _split(url)
    if "@" in authority:
        raise OriginError("must not carry user info (user@host): name the credential with credential_env")
    if "%" in authority:
        raise OriginError("must not percent-encode its host")
    if "{" in authority or "}" in authority:
        raise OriginError("may hold {job_id} only in the path or query, never in the host or port")
    match = _AUTHORITY.fullmatch(authority)
    if match is None:
        raise OriginError("has no plain host[:port] after the scheme")
    port = int(match["port"]) if match["port"] else DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise OriginError("has a port outside 1-65535")
    return Origin(scheme=scheme, host=_host(match), port=port)


def parse_origin(text: str) -> Origin:
    """An origin as a setting writes it: scheme://host[:port], at most a final "/" after it."""
    origin = origin_of(text)
    if _split(text)[2] not in ("", "/"):
        raise OriginError("must be an origin only (scheme://host[:port]), without a path, query or fragment")
    return origin


@lru_cache(maxsize=8)
def parse_credential_origins(text: str) -> Mapping[str, frozenset[Origin]]:
    """PROVIDER_CREDENTIAL_ORIGINS read: credential variable -> the origins it may be sent to.

    ValueError names the entry (by position and variable name, never by value) that cannot be read.
    """
    bindings: dict[str, frozenset[Origin]] = {}
    for position, raw in enumerate(text.split(";"), start=1):
        entry = raw.strip()
        if not entry:
            continue
        name, separator, listed = entry.partition("=")
        name = name.strip()
        if not separator or not _NAME.fullmatch(name):
            raise ValueError(
                f"PROVIDER_CREDENTIAL_ORIGINS entry {position} is not NAME=origin[,origin…] with NAME a "
                "variable name like PROVIDER_ACME_TOKEN"
            )
        if name in bindings:
            raise ValueError(f"PROVIDER_CREDENTIAL_ORIGINS binds {name} twice: list all its origins in one entry")
        origins = set()
        for index, value in enumerate(listed.split(","), start=1):
            if not value.strip():
                continue
            try:
                origins.add(parse_origin(value.strip()))
            except OriginError as exc:
                raise ValueError(f"PROVIDER_CREDENTIAL_ORIGINS: origin {index} of {name} {exc}") from None
        if not origins:
            raise ValueError(f"PROVIDER_CREDENTIAL_ORIGINS: {name} lists no origin")
        bindings[name] = frozenset(origins)
    return MappingProxyType(bindings)


@lru_cache(maxsize=8)
def parse_allowed_origins(entries: tuple[str, ...]) -> frozenset[Origin]:
    """PROVIDER_ALLOWED_ORIGINS read; ValueError names the entry (by position) that cannot be read."""
    origins = set()
    for position, raw in enumerate(entries, start=1):
        if not raw.strip():
            continue
        try:
            origins.add(parse_origin(raw.strip()))
        except OriginError as exc:
            raise ValueError(f"PROVIDER_ALLOWED_ORIGINS entry {position} {exc}") from None
    return frozenset(origins)


def job_id_problem(job_id: object) -> str | None:
    """Why `job_id` cannot fill a profile's `{job_id}`, or None: it must be exactly one path segment."""
    if not isinstance(job_id, str) or not job_id or job_id in {".", ".."}:
        return SEGMENT_RULE
    if _NOT_IN_A_SEGMENT.intersection(job_id):
        return SEGMENT_RULE
    return None


def placeholder_problem(template: str) -> str | None:
    """Why a URL template's `{job_id}` is not a whole path segment (`…/{job_id}`, `…/{job_id}/…`,
    `…/{job_id}?…`), or None. Half a segment (`job-{job_id}`, `{job_id}.json`) or a query value
    would let a job id and a template together spell a path another profile reaches otherwise."""
    rest = template.partition("://")[2]
    end = next((index for index, char in enumerate(rest) if char in "/?#"), len(rest))
    path = re.split(r"[?#]", rest[end:], maxsplit=1)[0]
    if PLACEHOLDER not in path:
        return "{job_id} must be a whole path segment, never in the query or fragment"
    before, _, after = path.partition(PLACEHOLDER)
    if not before.endswith("/") or after[:1] not in ("", "/"):
        return "{job_id} must be a whole path segment (…/{job_id} or …/{job_id}/…), not part of one"
    return None


def expand(template: str, job_id: str) -> str:
    """The URL a template names for `job_id`: the id percent-encoded into its one path segment."""
    return template.replace(PLACEHOLDER, quote(job_id, safe=""))


def watch_key(*, credential_env: str, status_url: str, job_id: str) -> str:
    """One provider job as the provider sees it: (credential variable, the expanded status URL), hashed.

    `status_url` is the profile's template; the key is taken after `job_id` fills it, with the
    origin in canonical form, so two watches with one key poll — and a cancel would end — the same
    URL, whatever account label, profile, template or job id each was registered with. A URL without
    a plain origin (a row written around the profile checks; it is never sent) stands for itself.
    """
    url = expand(status_url, job_id)
    try:
        where = str(origin_of(url)) + _split(url)[2]
    except OriginError:
        where = url
    canonical = json.dumps([credential_env, where], ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
