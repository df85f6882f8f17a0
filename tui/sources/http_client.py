"""The HTTP client policy of every bmoe-top source that speaks HTTP: the ``/metrics`` poller
(:mod:`bmoe_top.tui.sources.metrics_poll`) and the Prometheus client
(:mod:`bmoe_top.tui.sources.prometheus`). One place decides which URLs are usable, whether a
request goes through a proxy, and which headers it carries.

Proxies: a loopback URL (``localhost``, ``127.0.0.0/8``, ``::1``) never goes through a proxy
(``trust_env=False``). Other hosts honour ``HTTP(S)_PROXY``/``ALL_PROXY``/``NO_PROXY``; a
malformed ``NO_PROXY`` (which makes ``httpx.Client`` raise) does not stop start-up: the
entries that parse are applied by hand and the note :func:`make_client` returns says what was
ignored. No Textual.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

import httpx

__all__ = ["check_url", "is_loopback_host", "make_client"]


def check_url(url: str) -> str | None:
    """``None`` when ``url`` is a usable http(s) URL, else why not (one line)."""
    if not url or not url.strip():
        return "empty URL"
    try:
        u = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        return f"not a valid URL ({exc})"
    if u.scheme not in ("http", "https"):
        return f"not an http(s) URL (scheme {u.scheme or 'missing'!r}); e.g. http://127.0.0.1:8080/metrics"
    if not u.host:
        return "URL has no host; e.g. http://127.0.0.1:8080/metrics"
    return None


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` (and ``*.localhost``) and loopback IPv4/IPv6 literals."""
    h = host.strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _env(name: str) -> str | None:
    return os.environ.get(name) or os.environ.get(name.lower()) or None


def _no_proxy_match(host: str, no_proxy: str) -> tuple[bool, list[str]]:
    """Tolerant NO_PROXY matching: returns (bypass, entries that could not be understood)."""
    bad: list[str] = []
    h = host.strip("[]").lower()
    try:
        hip = ipaddress.ip_address(h)
    except ValueError:
        hip = None
    for raw in no_proxy.split(","):
        e = raw.strip().lower()
        if not e:
            continue
        if e == "*":
            return True, bad
        if "://" in e:
            e = e.split("://", 1)[1]
        e = e.strip("/")
        try:
            net = ipaddress.ip_network(e.strip("[]"), strict=False)
        except ValueError:
            net = None
        if net is not None:
            if hip is not None and hip in net:
                return True, bad
            continue
        if e.startswith("["):  # [v6]:port
            inner, _, _ = e[1:].partition("]")
            try:
                eip = ipaddress.ip_address(inner)
            except ValueError:
                bad.append(raw.strip())
                continue
            if hip is not None and hip == eip:
                return True, bad
            continue
        name, _, port = e.partition(":")
        if port and not port.isdigit():
            bad.append(raw.strip())
            continue
        name = name.lstrip("*").lstrip(".")
        if not name:
            bad.append(raw.strip())
            continue
        if h == name or h.endswith("." + name):
            return True, bad
    return False, bad


def make_client(url: str, timeout: float, api_key: str | None = None) -> tuple[httpx.Client, str]:
    """An ``httpx.Client`` for ``url`` and a note about the proxy decision (``""`` if none).

    Loopback never uses a proxy. A malformed proxy environment never raises."""
    headers = {"Accept": "text/plain;version=0.0.4, */*;q=0.1", "User-Agent": "bmoe-top"}
    if check_url(url):
        return httpx.Client(trust_env=False, timeout=httpx.Timeout(timeout), headers=headers), ""
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    to = httpx.Timeout(timeout)
    host = urlsplit(url).hostname or ""
    if is_loopback_host(host):
        return httpx.Client(trust_env=False, timeout=to, headers=headers), ""
    try:
        return httpx.Client(trust_env=True, timeout=to, headers=headers), ""
    except Exception as exc:  # httpx.InvalidURL / ValueError from a malformed proxy environment
        first = f"proxy environment not usable as is ({exc})"
    scheme = urlsplit(url).scheme or "http"
    proxy = _env(f"{scheme.upper()}_PROXY") or _env("ALL_PROXY")
    bypass, bad = _no_proxy_match(host, _env("NO_PROXY") or "")
    note = first
    if bad:
        note += f"; NO_PROXY entries ignored: {', '.join(bad)}"
    if proxy and not bypass:
        try:
            client = httpx.Client(trust_env=False, timeout=to, headers=headers, proxy=proxy)
            return client, note + f"; using proxy {proxy}"
        except Exception as exc:
            note += f"; proxy {proxy!r} unusable ({exc}), connecting directly"
    return httpx.Client(trust_env=False, timeout=to, headers=headers), note + "; connecting directly"
