"""Several exec-servers behind one object: environment id -> (URL, credentials).

The scale-out story: one execserver per devbox or container (Kubernetes: one
Service each), and an agent host that routes every call by environment id.
Each environment gets its own lazily connected :class:`ExecServerClient`; the
credentials are asked for on every (re)connect, so rotated token files and
short-lived JWTs keep working across reconnects.

    router = EnvironmentRouter.from_mapping({
        "devbox-1": {"url": "ws://devbox-1.ns.svc:8765", "tokenFile": "/run/secrets/devbox-1"},
        "gpu": {"url": "ws://gpu.ns.svc:8765", "sharedSecretFile": "/run/secrets/jwt",
                "audience": "execserver"},
    })
    async with router:
        status = await router.environment_status("devbox-1")
        client = await router.client("gpu")
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt

from execserver.client.connection import (
    CONNECT_TIMEOUT,
    DEFAULT_CLIENT_NAME,
    ClientState,
    ExecServerClient,
)
from execserver.client.errors import ExecServerError

__all__ = [
    "DEFAULT_JWT_TTL_S",
    "Environment",
    "EnvironmentRouter",
    "TokenSource",
    "UnknownEnvironment",
    "signed_bearer_token",
    "static_token",
    "token_file",
]

# Called on every (re)connect; returns the bearer token, or None for no auth.
TokenSource = Callable[[], str | None]

DEFAULT_JWT_TTL_S = 300


class UnknownEnvironment(ExecServerError, KeyError):
    def __init__(self, env_id: str) -> None:
        super().__init__(f"unknown exec-server environment {env_id!r}")
        self.env_id = env_id

    def __str__(self) -> str:
        return str(self.args[0])


def static_token(token: str) -> TokenSource:
    return lambda: token


def token_file(path: str | Path) -> TokenSource:
    """Re-read on every connect (Kubernetes updates mounted Secrets in place); trimmed
    like the server trims its own copy."""
    return lambda: Path(path).read_text(encoding="utf-8").strip()


def signed_bearer_token(
    secret: bytes | str | Path,
    *,
    ttl_s: int = DEFAULT_JWT_TTL_S,
    issuer: str | None = None,
    audience: str | None = None,
    subject: str | None = None,
    clock: Callable[[], float] = time.time,
) -> TokenSource:
    """Mint a fresh HS256 JWT for each connect (``--ws-auth signed-bearer-token``).
    ``secret`` is the key itself (bytes) or the path of the shared secret file."""

    def key() -> bytes:
        if isinstance(secret, bytes):
            return secret
        return Path(secret).read_bytes().strip()

    def mint() -> str:
        now = int(clock())
        claims: dict[str, Any] = {"exp": now + ttl_s, "iat": now}
        if issuer is not None:
            claims["iss"] = issuer
        if audience is not None:
            claims["aud"] = audience
        if subject is not None:
            claims["sub"] = subject
        return jwt.encode(claims, key(), algorithm="HS256")

    return mint


@dataclass(frozen=True)
class Environment:
    id: str
    url: str
    token: TokenSource | None = None
    client_name: str = DEFAULT_CLIENT_NAME

    @classmethod
    def from_mapping(cls, env_id: str, spec: Mapping[str, Any]) -> Environment:
        """Keys: url, and at most one of token, tokenFile, sharedSecretFile (with
        optional issuer, audience, ttlSeconds, subject); clientName."""
        sources = [k for k in ("token", "tokenFile", "sharedSecretFile") if k in spec]
        if len(sources) > 1:
            raise ValueError(f"environment {env_id}: give only one of {', '.join(sources)}")
        token: TokenSource | None = None
        if "token" in spec:
            token = static_token(str(spec["token"]))
        elif "tokenFile" in spec:
            token = token_file(spec["tokenFile"])
        elif "sharedSecretFile" in spec:
            token = signed_bearer_token(
                Path(spec["sharedSecretFile"]),
                ttl_s=int(spec.get("ttlSeconds", DEFAULT_JWT_TTL_S)),
                issuer=spec.get("issuer"),
                audience=spec.get("audience"),
                subject=spec.get("subject"),
            )
        return cls(
            env_id,
            str(spec["url"]),
            token,
            str(spec.get("clientName", DEFAULT_CLIENT_NAME)),
        )


@dataclass
class _Slot:
    env: Environment
    client: ExecServerClient | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EnvironmentRouter:
    """Routes calls to the exec-server of an environment id; one client per environment."""

    def __init__(
        self,
        environments: Iterable[Environment] = (),
        *,
        connect_timeout: float | None = CONNECT_TIMEOUT,
        **client_options: Any,
    ) -> None:
        self._slots: dict[str, _Slot] = {}
        self._connect_timeout = connect_timeout
        self._client_options = client_options
        for env in environments:
            self.add(env)

    @classmethod
    def from_mapping(
        cls, spec: Mapping[str, Mapping[str, Any]], **options: Any
    ) -> EnvironmentRouter:
        return cls((Environment.from_mapping(k, v) for k, v in spec.items()), **options)

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> EnvironmentRouter:
        """A JSON file ``{"environments": {id: {url, tokenFile, ...}}}``."""
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls.from_mapping(doc["environments"], **options)

    def add(self, env: Environment) -> None:
        if env.id in self._slots:
            raise ValueError(f"environment {env.id!r} already registered")
        self._slots[env.id] = _Slot(env)

    async def remove(self, env_id: str) -> None:
        slot = self._slots.pop(env_id, None)
        if slot is not None and slot.client is not None:
            await slot.client.close()

    def ids(self) -> list[str]:
        return list(self._slots)

    def environment(self, env_id: str) -> Environment:
        return self._slot(env_id).env

    def _slot(self, env_id: str) -> _Slot:
        slot = self._slots.get(env_id)
        if slot is None:
            raise UnknownEnvironment(env_id)
        return slot

    async def client(self, env_id: str) -> ExecServerClient:
        """The environment's client, connecting on first use or after it failed."""
        slot = self._slot(env_id)
        async with slot.lock:  # one connect per environment at a time
            current = slot.client
            if current is not None and current.state not in (
                ClientState.FAILED,
                ClientState.CLOSED,
            ):
                return current
            slot.client = await self._connect(slot.env)
            return slot.client

    async def _connect(self, env: Environment) -> ExecServerClient:
        # A callable token is asked again on every reconnect (fresh JWTs,
        # rotated token files), not only for this first connect.
        return await ExecServerClient.connect(
            env.url,
            token=env.token,
            client_name=env.client_name,
            connect_timeout=self._connect_timeout,
            **self._client_options,
        )

    async def call(self, env_id: str, method: str, params: object = None) -> Any:
        """Any request, routed by environment id; the result is decoded as the
        contract's result type (see :meth:`ExecServerClient.call_any`)."""
        return await (await self.client(env_id)).call_any(method, params)

    async def environment_status(self, env_id: str) -> str:
        return await (await self.client(env_id)).environment_status()

    async def close(self) -> None:
        clients = [slot.client for slot in self._slots.values() if slot.client is not None]
        for slot in self._slots.values():
            slot.client = None
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

    async def __aenter__(self) -> EnvironmentRouter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
