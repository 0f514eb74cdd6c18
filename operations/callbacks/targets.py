"""Where a callback may go: https on a public address (operations/infrastructure/addresses.py), unless the exact host
and port are listed in CALLBACK_ALLOWED_HOSTS.

Checked at registration (`callback_url_problem`) and again at send time (`resolve_target`, the
`callback` purpose's address rule of operations.infrastructure.outbound), which resolves the name, checks every
address it resolves to, and sends to the checked address (DNS rebinding cannot swap it afterwards).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from django.conf import settings

from operations.infrastructure.addresses import allowed_by_entries, host_is_listed, is_public
from operations.infrastructure.outbound import Purpose, Refused, Target

URL_MAX = 2048
ALLOWED_PORTS = (None, 443, 8443)
_HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")
_INTERNAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa", ".lan", ".intranet")


def _allowed(*, scheme: str, host: str, port: int | None) -> bool:
    return allowed_by_entries(tuple(settings.CALLBACK_ALLOWED_HOSTS), scheme=scheme, host=host, port=port)


def _host_of(url: str) -> tuple[str, str, int | None] | str:
    """(scheme, host, port) or the reason the URL cannot even be read."""
    if not isinstance(url, str) or not url:
        return "must be a non-empty string"
    if len(url) > URL_MAX:
        return f"is longer than {URL_MAX} characters"
    if any(not 0x21 <= ord(ch) <= 0x7E for ch in url):
        return "must be plain ASCII without spaces or control characters (IDNs in punycode)"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "is not a valid URL (host or port)"
    if "@" in parts.netloc:
        return "must not contain user info (user:password@)"
    if parts.fragment or "#" in url:
        return "must not have a #fragment"
    host = (parts.hostname or "").rstrip(".")
    if not host:
        return "has no host"
    return parts.scheme.lower(), host.lower(), port


def callback_url_problem(url: str) -> str | None:
    """Why this callback URL is refused at registration, or None when it is acceptable."""
    read = _host_of(url)
    if isinstance(read, str):
        return read
    scheme, host, port = read
    if _allowed(scheme=scheme, host=host, port=port):
        return None
    problem = public_url_problem(scheme=scheme, host=host, port=port)
    if problem is not None and host_is_listed(tuple(settings.CALLBACK_ALLOWED_HOSTS), host=host):
        # The exemption is for the listed port (and scheme) only; say so rather than puzzle the agent.
        return f"{problem} (CALLBACK_ALLOWED_HOSTS exempts {host} on its listed port only)"
    return problem


def public_url_problem(*, scheme: str, host: str, port: int | None) -> str | None:
    """Why this is no public https address (port as written, None for the default), or None.

    Judged from the URL alone; `pinned` judges the addresses a name resolves to when it is sent.
    """
    if scheme != "https":
        return "must use https"
    if port not in ALLOWED_PORTS:
        return "must use port 443 or 8443"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        return None if is_public(ip) else f"points at a non-public address ({ip})"
    labels = host.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]) or all(_NUMERIC_LABEL.fullmatch(label) for label in labels):
        return "uses an alternate IP address encoding (decimal, hex or octal); write a public DNS name"
    if not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return "does not have a valid DNS host name"
    if len(labels) < 2 or host == "localhost" or host.endswith(_INTERNAL_SUFFIXES):
        return "names an internal host; use a public DNS name"
    return None


class TargetRefused(Refused):
    """A callback URL refused (or, with Unresolvable, not resolved): nothing is sent."""


def resolve_target(url: str) -> Target:
    """Where to send, checked now: every address the name resolves to must be public."""
    problem = callback_url_problem(url)
    if problem is not None:
        raise TargetRefused(f"callback URL {problem}")
    # The URL passed the check above, so _host_of answers a tuple, not a refusal.
    scheme, host, port = _host_of(url)  # type: ignore[misc]
    if _allowed(scheme=scheme, host=host, port=port):
        return Target(purpose=Purpose.CALLBACK, url=url)
    return pinned(url, host=host, port=port, purpose=Purpose.CALLBACK)


class Unresolvable(TargetRefused):
    """The name did not resolve (no address to check, none to send to)."""


def pinned(url: str, *, host: str, port: int | None, purpose: Purpose) -> Target:
    """`url` (whose host is `host`, already judged public by name) sent to an address checked now.

    Every address the name resolves to must be public (TargetRefused otherwise; Unresolvable when it
    resolves to none), and the request goes to the checked address, so DNS rebinding cannot swap it
    afterwards. An IP literal was judged by `public_url_problem` already.
    """
    try:
        ipaddress.ip_address(host)
        return Target(purpose=purpose, url=url)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port or 443, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Unresolvable(f"cannot resolve {host}: {exc.strerror or exc}") from None
    addresses = []
    for info in infos:
        try:
            addresses.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            raise TargetRefused(f"{host} resolved to an unreadable address") from None
    if not addresses:
        raise Unresolvable(f"{host} resolved to no address")
    private = [str(ip) for ip in addresses if not is_public(ip)]
    if private:
        raise TargetRefused(f"{host} resolves to a non-public address ({private[0]}); not sent")
    ip = addresses[0]
    netloc = f"[{ip}]" if ip.version == 6 else str(ip)
    if port:
        netloc += f":{port}"
    parts = urlsplit(url)
    pinned_url = parts._replace(netloc=netloc).geturl()
    host_header = host if not port else f"{host}:{port}"
    # TLS still verifies the certificate against the name, while the socket goes to the checked IP.
    return Target(purpose=purpose, url=pinned_url, headers={"Host": host_header}, extensions={"sni_hostname": host})
