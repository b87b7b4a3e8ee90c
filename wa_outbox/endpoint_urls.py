"""Which URLs an endpoint may have: the workers POST to them from inside the deployment's network, so an endpoint URL
must not be a way into it (server-side request forgery).

The rule: `https` only; a host name or a public address, never loopback, private (RFC 1918, unique-local),
link-local (which holds cloud metadata services, 169.254.169.254), unspecified, multicast or reserved ranges; no
credentials in the URL; redirects are never followed (a 3xx is a failed attempt). A host name is checked again on
every delivery, on the addresses it resolves to then, and the connection goes to an address that was checked (a name
that resolved to a public address at `endpoints add` may resolve to 10.0.0.5 later). WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE
lifts the rule for development and tests (plain http, 127.0.0.1); `wa-outbox dev` sets it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2048


def address_problem(address: str) -> str | None:
    """Why a workers' connection to this IP address is refused, or None when it is a public address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is a link-local address"
    if ip.is_private:
        return f"{ip} is a private address"
    if ip.is_unspecified or ip.is_multicast or ip.is_reserved or not ip.is_global:
        return f"{ip} is not a public address"
    return None


def url_problem(url: str, *, allow_private: bool) -> str | None:
    """Why `url` cannot be an endpoint's URL, or None. Checks what the URL itself says (scheme, credentials, a
    literal address); a host name's addresses are checked at each delivery (`addresses_problem`)."""
    if not isinstance(url, str) or not url:
        return "the URL must be a non-empty string"
    if len(url) > MAX_URL_LENGTH:
        return f"the URL is longer than {MAX_URL_LENGTH} characters"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return "the URL contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"the URL cannot be parsed: {exc}"
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed:
        return ("the URL must be https" if not allow_private else "the URL must be http or https") + (
            "" if allow_private else " (WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true allows http, for development)")
    if not parts.hostname:
        return "the URL has no host"
    if parts.username is not None or parts.password is not None:
        return "the URL must not carry credentials (the deliveries are signed instead)"
    if port == 0:
        return "the URL's port must be 1-65535"
    if parts.fragment:
        return "the URL must not have a fragment"
    if not allow_private:
        try:
            ipaddress.ip_address(parts.hostname.split("%", 1)[0])
        except ValueError:
            host = parts.hostname.rstrip(".").lower()
            if host == "localhost" or host.endswith(".localhost"):
                return f"{parts.hostname} is a loopback name"
            return None
        problem = address_problem(parts.hostname)
        if problem:
            return problem + " (WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true allows it, for development)"
    return None


def addresses_problem(addresses: Iterable[str], *, allow_private: bool) -> str | None:
    """Why a delivery must not connect to a host that resolved to these addresses (any refused one refuses all:
    the resolver's order is not ours to trust), or None."""
    found = list(addresses)
    if not found:
        return "the host resolved to no address"
    if allow_private:
        return None
    for address in found:
        problem = address_problem(address)
        if problem:
            return problem
    return None
