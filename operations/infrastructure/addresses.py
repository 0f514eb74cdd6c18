"""Where a callback may go: which IP addresses are public, and the CALLBACK_ALLOWED_HOSTS exemptions.

Public means globally reachable per the IANA special-purpose address registries, checked here
explicitly rather than trusted to `ipaddress.is_global` alone (Python 3.11 calls `::127.0.0.1`
and `2002:7f00:1::` global). An IPv6 address that embeds an IPv4 address is judged by what it
reaches: IPv4-mapped and NAT64 (64:ff9b::/96) addresses by their IPv4 payload, 6to4 (2002::/16)
by its embedded relay address. IPv4-compatible addresses (::a.b.c.d, deprecated), the local-use
NAT64 prefix 64:ff9b:1::/48 and Teredo (2001::/32, whose client address is obfuscated) are never
public; nor is anything outside 2000::/3, the only block IANA allocates global unicast from.

CALLBACK_ALLOWED_HOSTS entries are `host:port` (`[v6]:port` for IPv6 literals); such an entry
allows http or https to exactly that host and port, whatever address it has. A bare `host`
allows only https on port 443. Nothing else about the host is exempt: any other port or scheme
of the same host is judged like any URL.

Pure: no Django, no I/O (settings.py checks the configured entries at start-up with it).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from functools import lru_cache

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv4 special-purpose registry entries that are not globally reachable, and multicast.
_NOT_PUBLIC_V4 = tuple(
    ipaddress.IPv4Network(block)
    for block in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local (cloud metadata services live here)
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast (deprecated)
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the limited broadcast address
    )
)
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# IPv6 special-purpose registry entries inside 2000::/3 that are not globally reachable.
_NOT_PUBLIC_V6 = tuple(
    ipaddress.IPv6Network(block)
    for block in (
        "2001::/23",  # IETF protocol assignments: Teredo 2001::/32, benchmarking, ORCHID
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
    )
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.-]+))(?::(?P<port>[0-9]{1,5}))?")


def is_public(ip: IPAddress) -> bool:
    """Whether a callback may be sent to this address."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip.is_global and not any(ip in block for block in _NOT_PUBLIC_V4)
    if ip.scope_id:
        return False  # a zone index names a local interface
    if ip.ipv4_mapped is not None:
        return is_public(ip.ipv4_mapped)
    if ip in _NAT64:
        return is_public(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip in _IPV4_COMPATIBLE or ip not in _GLOBAL_UNICAST_V6:
        return False
    if ip.sixtofour is not None:
        return is_public(ip.sixtofour)
    return ip.is_global and not any(ip in block for block in _NOT_PUBLIC_V6)


def normal_host(host: str) -> str:
    """One spelling per host: lower case without the final dot, IP addresses in canonical form."""
    host = host.strip().lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


@dataclass(frozen=True)
class AllowedEndpoint:
    host: str
    port: int
    # Only an entry that names its port lets plain http through.
    any_scheme: bool


@lru_cache(maxsize=16)
def allowed_endpoints(entries: tuple[str, ...]) -> frozenset[AllowedEndpoint]:
    """The CALLBACK_ALLOWED_HOSTS entries; ValueError names an entry that cannot be read."""
    found = set()
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        match = _HOST_PORT.fullmatch(entry)
        if match is None:
            raise ValueError(f"CALLBACK_ALLOWED_HOSTS entry {entry[:80]!r} is not host, host:port or [IPv6]:port")
        host = match["v6"] or match["host"]
        if match["v6"]:
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise ValueError(f"CALLBACK_ALLOWED_HOSTS entry {entry[:80]!r} is not a valid IPv6 address") from None
        port = int(match["port"]) if match["port"] else 443
        if not 1 <= port <= 65535:
            raise ValueError(f"CALLBACK_ALLOWED_HOSTS entry {entry[:80]!r} has a port outside 1-65535")
        found.add(AllowedEndpoint(host=normal_host(host), port=port, any_scheme=match["port"] is not None))
    return frozenset(found)


def allowed_by_entries(entries: tuple[str, ...], *, scheme: str, host: str, port: int | None) -> bool:
    """Whether an entry exempts this URL (scheme, host, port as written; None = the default)."""
    if scheme not in _DEFAULT_PORTS:
        return False
    effective = port if port is not None else _DEFAULT_PORTS[scheme]
    host = normal_host(host)
    return any(
        endpoint.host == host and endpoint.port == effective and (scheme == "https" or endpoint.any_scheme)
        for endpoint in allowed_endpoints(entries)
    )


def host_is_listed(entries: tuple[str, ...], *, host: str) -> bool:
    host = normal_host(host)
    return any(endpoint.host == host for endpoint in allowed_endpoints(entries))
