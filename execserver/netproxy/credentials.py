"""``credentialMasking`` / ``credentialProviders``: secrets the child never sees.

With ``credentialMasking: true`` every variable a provider names (``env``) that
is present in the child's environment - from the request or inherited from
the executor through ``envPolicy`` - and whose value matches one of the
provider's ``patterns`` (any value when it lists none) is replaced by a
random placeholder before the child starts. The proxy keeps the real value
and swaps it back into *allowed* plain-HTTP requests whose URL is under one
of the provider's ``url_prefixes`` (or the URL / host named by the variable
``url_prefix_from_env``). Anywhere else the placeholder travels as it is, so
the secret only ever reaches its own destination.

Where the secret may go, exactly:

* **Which URL.** Scheme, host and port must equal the prefix's, and the path
  must be under the prefix's path *segment by segment* (``/api`` covers
  ``/api`` and ``/api/v1``, not ``/apiX``), compared after normalising the
  request's path: percent-encoded unreserved characters are decoded
  (``%2e`` is a dot) and dot segments removed (``/api/../public`` is
  ``/public``). The normalised path is what is forwarded, so the destination
  routes exactly what was matched. A path that would still hold a dot
  segment once *everything* is decoded (``%2f..%2f``, ``..%5c``, ``..;``) is
  refused (400) on a credential's destination: servers disagree on those.
* **Which header.** Only the header the provider's ``auth`` names:
  ``Authorization`` for ``bearer``/``token``/``basic`` (and for a provider
  with no ``auth``), the ``header`` member for ``header``. The placeholder is
  replaced wherever it occurs in that header's value, including inside
  ``Authorization: Basic`` (base64 of ``user:secret``). Another header
  carrying a placeholder on a request the secret is bound to is dropped: it
  would hand the secret to whatever the destination does with that header
  (an echo). With no placeholder in the request, ``auth`` says what to add:
  ``bearer`` (``Authorization: Bearer …``), ``token`` (``Authorization: token
  …``), ``basic`` (``Authorization: Basic base64(secret)``) or ``header``
  (``<header>: <prefix><secret>``).
* **Which site.** The proxy always sends ``Host`` from the URL it decided on
  (the child's own ``Host`` is dropped), so a shared front end cannot route
  the secret to another site.
* **What comes back.** The response to a request that carried a secret is
  scrubbed before the child sees it (``Scrubber``): the secret (raw,
  percent-encoded, JSON-escaped) and the exact header values it was put in
  are replaced by what the child sent, in response headers and in the body as
  it streams. ``Accept-Encoding: identity`` is asked for (and ``Range`` is
  dropped: pieces shorter than the secret would each pass), and an encoded
  (compressed) response is refused (502) since it cannot be searched. A
  destination that transforms the secret otherwise (hashes, re-encodes,
  splits it, serves it later to another request) is not caught: an allowed
  destination that reflects what it is sent is trusted with the secret.

HTTPS goes through CONNECT tunnels the proxy cannot read (no TLS
interception): an HTTPS request carries the placeholder, never the secret.

The real values are scrubbed from anything the proxy reports or logs: the
placeholders are what a reader of notifications or logs can see.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import secrets
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

import msgspec

from execserver.netproxy.policy import is_local_address, normalize_host
from execserver.wire.network import NetworkPolicyDecisionNotification
from execserver.wire.process import CredentialProviderConfig, RemoteNetworkProxyConfig

Notifier = Callable[[NetworkPolicyDecisionNotification], Awaitable[None]]

__all__ = [
    "CredentialScopeError",
    "CredentialVault",
    "Prepared",
    "Scrubber",
    "credential_vault",
    "normalise_path",
]

log = logging.getLogger(__name__)

PLACEHOLDER_PREFIX = "codex-masked-"

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# Request headers that would make a response impossible to scrub.
_UNSCRUBBABLE_ASKS = frozenset({"accept-encoding", "range", "if-range"})


class CredentialScopeError(ValueError):
    """A request to a credential's destination whose path cannot be placed
    inside or outside the credential's scope unambiguously."""


def _decode_unreserved(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 for an absolute path."""
    out: list[str] = []
    segments = path.split("/")[1:]
    for segment in segments:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments and segments[-1] in (".", ".."):
        out.append("")  # "/a/b/.." is "/a/", a directory
    return "/" + "/".join(out)


def normalise_path(path: str, *, strict: bool = True) -> str:
    """``path`` as scopes are compared (and as it is forwarded): unreserved
    escapes decoded (RFC 3986 6.2.2.2: ``%2e`` is ``.``), other escapes in
    upper case, dot segments removed. ``strict``: refuse a path that would
    still have a dot segment after decoding every escape and reading ``\\``
    as ``/`` or ``;`` as the end of a segment (``..%2f``, ``..%5c``, ``..;``):
    servers differ on those, so no scope check can be right for all of them."""
    if not path.startswith("/"):
        path = "/" + path
    normal = _remove_dot_segments(_ESCAPE.sub(_decode_unreserved, path))
    if strict:
        # Decoded as often as a careless server might (``%252e`` is ``%2e``
        # after one pass, ``.`` after two).
        decoded, previous = normal, ""
        for _ in range(4):
            if decoded == previous:
                break
            previous, decoded = decoded, unquote(decoded)
        for segment in decoded.replace("\\", "/").split("/"):
            if segment.split(";", 1)[0] in (".", ".."):
                raise CredentialScopeError(
                    "ambiguous path (an encoded or parameterised dot segment) "
                    "to a destination of a masked credential"
                )
    return normal


@dataclass(frozen=True)
class _Prefix:
    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, text: str) -> _Prefix | None:
        text = text.strip()
        if not text:
            return None
        if "://" not in text:
            host = normalize_host(text.split("/", 1)[0].rsplit(":", 1)[0])
            # Bare loopback hosts imply HTTP, other bare hosts HTTPS (as the reference).
            local = host == "localhost" or is_local_address(host)
            text = ("http://" if local else "https://") + text
        parts = urlsplit(text)
        if not parts.hostname:
            return None
        scheme = parts.scheme.lower()
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            return None
        path = normalise_path(parts.path or "/", strict=False)
        return cls(scheme, normalize_host(parts.hostname), port, path)

    def names(self, scheme: str, host: str, port: int) -> bool:
        """The prefix's origin is this (scheme, host, port)."""
        return (scheme, host, port) == (self.scheme, self.host, self.port)

    def covers(self, scheme: str, host: str, port: int, path: str) -> bool:
        """``path`` (normalised) is under the prefix, segment by segment:
        ``/api`` and ``/api/`` cover ``/api`` and ``/api/x``, never ``/apiX``."""
        if not self.names(scheme, host, port):
            return False
        base = self.path.rstrip("/")
        return not base or path == base or path.startswith(base + "/")


@dataclass(frozen=True)
class _Secret:
    provider: str
    variable: str
    real: str
    placeholder: str
    destinations: tuple[_Prefix, ...]
    auth: tuple[str, ...]
    header: str | None
    prefix: str | None

    @property
    def headers(self) -> frozenset[str]:
        """The (lower-case) header names this secret may be put into."""
        names = set()
        for method in self.auth or ("bearer",):
            if method in ("bearer", "token", "basic"):
                names.add("authorization")
            elif method == "header" and self.header:
                names.add(self.header.lower())
        return frozenset(names)


@dataclass(frozen=True)
class Prepared:
    """A request to forward: the path to send, its headers, and the scrubber
    for its response when a secret was put in (None otherwise)."""

    path: str
    headers: list[tuple[str, str]]
    scrubber: Scrubber | None


class Scrubber:
    """Replaces each real value with what the child knows instead, in header
    values and in a body fed in pieces. A window of the longest needle's
    length minus one byte is held back between pieces, so a needle cut across
    two pieces is still found (a needle that starts before the held-back
    window ends within the data already seen)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        found: dict[bytes, bytes] = {}
        for real, shown in pairs:
            if real and real != shown:
                for encode in ("utf-8", "latin-1"):
                    try:
                        found.setdefault(real.encode(encode), shown.encode(encode))
                    except UnicodeEncodeError:
                        pass
        # Longest first: a header value is replaced whole before the secret in it.
        self._pairs = sorted(found.items(), key=lambda p: -len(p[0]))
        self._keep = max((len(n) for n, _ in self._pairs), default=1) - 1
        self._tail = b""

    def scrub_bytes(self, data: bytes) -> bytes:
        for needle, shown in self._pairs:
            if needle in data:
                data = data.replace(needle, shown)
        return data

    def feed(self, data: bytes) -> bytes:
        buffer = self.scrub_bytes(self._tail + data)
        if self._keep == 0:
            self._tail = b""
            return buffer
        self._tail = buffer[-self._keep :]
        return buffer[: -self._keep]

    def flush(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail


def _forms(real: str, shown: str) -> list[tuple[str, str]]:
    """The spellings of ``real`` a reflecting server may plausibly send back."""
    pairs = [(real, shown), (quote(real, safe=""), quote(shown, safe=""))]
    pairs.append((real.replace("/", "\\/"), shown.replace("/", "\\/")))  # JSON
    return pairs


def _compile(patterns: Iterable[str]) -> tuple[list[re.Pattern[str]], bool]:
    compiled, broken = [], False
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error:
            broken = True
    return compiled, broken


class CredentialVault:
    """The secrets of one process's proxy (real value <-> placeholder)."""

    def __init__(self, providers: Mapping[str, CredentialProviderConfig]) -> None:
        self._providers = dict(providers)
        self._secrets: list[_Secret] = []

    @property
    def secrets(self) -> tuple[_Secret, ...]:
        return tuple(self._secrets)

    def mask_environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """The placeholders to put into the child's environment (variable ->
        placeholder) for the secrets found in ``env``, its final environment."""
        overrides: dict[str, str] = {}
        for name, provider in sorted(self._providers.items()):
            patterns, broken = _compile(provider.patterns)
            destinations = [_Prefix.parse(p) for p in provider.url_prefixes]
            if provider.url_prefix_from_env:
                destinations.append(_Prefix.parse(env.get(provider.url_prefix_from_env, "")))
            for variable in provider.env:
                real = env.get(variable, "")
                if not real.strip() or variable in overrides:
                    continue
                # A pattern that does not compile counts as matching: a typo
                # must not hand the secret to the child.
                if provider.patterns and not (broken or any(p.search(real) for p in patterns)):
                    continue
                placeholder = f"{PLACEHOLDER_PREFIX}{secrets.token_hex(16)}"
                self._secrets.append(
                    _Secret(
                        name,
                        variable,
                        real,
                        placeholder,
                        tuple(d for d in destinations if d is not None),
                        tuple(method.value for method in provider.auth),
                        provider.header,
                        provider.prefix,
                    )
                )
                overrides[variable] = placeholder
        if overrides:
            _install_log_scrubber(self)
            log.info("credential masking: %d variable(s) masked", len(overrides))
        return overrides

    def scrubbing(self, notify: Notifier) -> Notifier:
        """``notify`` with the real secrets scrubbed from every report."""

        async def scrubbed(note: NetworkPolicyDecisionNotification) -> None:
            if self._secrets:
                note = msgspec.structs.replace(
                    note,
                    host=self.scrub(note.host),
                    method=self.scrub(note.method) if note.method is not None else None,
                    client=self.scrub(note.client) if note.client is not None else None,
                )
            await notify(note)

        return scrubbed

    def prepare(
        self, scheme: str, host: str, port: int, path: str, headers: list[tuple[str, str]]
    ) -> Prepared:
        """An allowed request, with the secrets bound to its URL put in place of
        their placeholders (see the module's docstring for exactly where).
        Raises ``CredentialScopeError`` for an ambiguous path to a credential's
        destination."""
        host = normalize_host(host)
        if not any(d.names(scheme, host, port) for s in self._secrets for d in s.destinations):
            return Prepared(path, headers, None)  # not a credential's origin: untouched
        path = normalise_path(path)
        bound = [
            s
            for s in self._secrets
            if any(d.covers(scheme, host, port, path) for d in s.destinations)
        ]
        if not bound:
            return Prepared(path, headers, None)
        out: list[tuple[str, str]] = []
        injected: list[tuple[str, str]] = []  # (value sent upstream, value the child sent)
        for name, value in headers:
            carried = [s for s in bound if _carries(value, s)]
            if not carried:
                out.append((name, value))
                continue
            usable = [s for s in carried if name.lower() in s.headers]
            if len(usable) < len(carried):
                log.debug("credential masking: %s carried a placeholder; dropped", name)
                continue  # a placeholder outside its own header: the header goes
            swapped = self._swap(value, usable)
            out.append((name, swapped))
            injected.append((swapped, value))
        if not injected:
            for secret in bound:
                added = _auth_header(secret)
                if added is not None:
                    out = [(k, v) for k, v in out if k.lower() != added[0].lower()]
                    out.append(added)
                    injected.append((added[1], secret.placeholder))
                    break
        if not injected:
            return Prepared(path, out, None)
        # The response can only be scrubbed whole and uncompressed: no
        # compression, and no ranges (pieces shorter than the secret, asked
        # for one by one, would each pass the scrubber and add up to it).
        out = [(k, v) for k, v in out if k.lower() not in _UNSCRUBBABLE_ASKS]
        out.append(("Accept-Encoding", "identity"))
        pairs: list[tuple[str, str]] = []
        for sent, shown in injected:
            pairs.append((sent, shown))
            scheme_word, _, token = sent.partition(" ")
            if scheme_word.lower() == "basic" and token:
                pairs.append((token, shown.partition(" ")[2] or token))
        for secret in bound:
            pairs += _forms(secret.real, secret.placeholder)
            pairs += _forms(base64.b64encode(secret.real.encode()).decode(), secret.placeholder)
        return Prepared(path, out, Scrubber(pairs))

    @staticmethod
    def _swap(value: str, bound: list[_Secret]) -> str:
        for secret in bound:
            value = value.replace(secret.placeholder, secret.real)
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "basic" and token:
            try:
                decoded = base64.b64decode(token, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return value
            swapped = decoded
            for secret in bound:
                swapped = swapped.replace(secret.placeholder, secret.real)
            if swapped != decoded:
                return f"{scheme} {base64.b64encode(swapped.encode()).decode()}"
        return value

    def scrub(self, text: str) -> str:
        """``text`` with every real secret replaced by its placeholder."""
        for secret in self._secrets:
            text = text.replace(secret.real, secret.placeholder)
        return text


def _carries(value: str, secret: _Secret) -> bool:
    """The header value holds the secret's placeholder, plainly or inside a
    Basic pair."""
    if secret.placeholder in value:
        return True
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "basic" or not token:
        return False
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return secret.placeholder in decoded


def _auth_header(secret: _Secret) -> tuple[str, str] | None:
    for method in secret.auth:
        if method == "bearer":
            return "Authorization", f"Bearer {secret.real}"
        if method == "token":
            return "Authorization", f"token {secret.real}"
        if method == "basic":
            return "Authorization", f"Basic {base64.b64encode(secret.real.encode()).decode()}"
        if method == "header" and secret.header:
            return secret.header, f"{secret.prefix or ''}{secret.real}"
    return None


def credential_vault(config: RemoteNetworkProxyConfig) -> CredentialVault | None:
    """The vault of a proxy config; None unless ``credentialMasking`` is on and
    there are providers."""
    if not config.credential_masking or not config.credential_providers:
        return None
    return CredentialVault(config.credential_providers)


# Every vault holding secrets, for the log scrubber (weak: a closed proxy's
# vault goes away with it).
_VAULTS: weakref.WeakSet[CredentialVault] = weakref.WeakSet()
_previous_factory: Callable[..., logging.LogRecord] | None = None


def _install_log_scrubber(vault: CredentialVault) -> None:
    """Every log record is rendered once and scrubbed of the live vaults'
    secrets before any handler sees it (a record factory: handlers and
    propagation cannot bypass it)."""
    global _previous_factory
    _VAULTS.add(vault)
    if _previous_factory is not None:
        return
    previous = logging.getLogRecordFactory()
    _previous_factory = previous

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        vaults = list(_VAULTS)
        if vaults:
            message = record.getMessage()
            scrubbed = message
            for live in vaults:
                scrubbed = live.scrub(scrubbed)
            if scrubbed != message:
                record.msg, record.args = scrubbed, None
        return record

    logging.setLogRecordFactory(factory)
