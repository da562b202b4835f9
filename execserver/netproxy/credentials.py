"""``credentialMasking`` / ``credentialProviders``: secrets the child never sees.

With ``credentialMasking: true`` every variable a provider names (``env``) that
is present in the child's environment - from the request or inherited from
the executor through ``envPolicy`` - and whose value matches one of the
provider's ``patterns`` (any value when it lists none) is replaced by a
random placeholder before the child starts. The proxy keeps the real value
and swaps it back into the headers of *allowed* plain-HTTP requests whose URL
starts with one of the provider's ``url_prefixes`` (or the URL / host named
by the variable ``url_prefix_from_env``). Anywhere else the placeholder
travels as it is, so the secret only ever reaches its own destination.

Header values are rewritten wherever the placeholder occurs, including inside
``Authorization: Basic`` (base64 of ``user:secret``). With no placeholder in
the request, a provider's ``auth`` list says what to add: ``bearer``
(``Authorization: Bearer …``), ``token`` (``Authorization: token …``),
``basic`` (``Authorization: Basic base64(secret)``) or ``header``
(``<header>: <prefix><secret>``).

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
from urllib.parse import urlsplit

import msgspec

from execserver.netproxy.policy import is_local_address, normalize_host
from execserver.wire.network import NetworkPolicyDecisionNotification
from execserver.wire.process import CredentialProviderConfig, RemoteNetworkProxyConfig

Notifier = Callable[[NetworkPolicyDecisionNotification], Awaitable[None]]

__all__ = ["CredentialVault", "credential_vault"]

log = logging.getLogger(__name__)

PLACEHOLDER_PREFIX = "codex-masked-"


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
        return cls(scheme, normalize_host(parts.hostname), port, parts.path or "/")

    def covers(self, scheme: str, host: str, port: int, path: str) -> bool:
        if (scheme, host, port) != (self.scheme, self.host, self.port):
            return False
        return path.startswith(self.path) or self.path.rstrip("/") == path.rstrip("/")


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

    def inject(
        self, scheme: str, host: str, port: int, path: str, headers: list[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """``headers`` of an allowed request, with the secrets bound to this
        URL put in place of their placeholders."""
        host = normalize_host(host)
        bound = [
            s
            for s in self._secrets
            if any(d.covers(scheme, host, port, path) for d in s.destinations)
        ]
        if not bound:
            return headers
        out = [(k, self._swap(v, bound)) for k, v in headers]
        if out != headers:
            return out
        for secret in bound:
            added = _auth_header(secret)
            if added is not None:
                out = [(k, v) for k, v in out if k.lower() != added[0].lower()]
                return [*out, added]
        return out

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
