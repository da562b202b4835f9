"""Several interchangeable executors (replicas) behind one object, sessions pinned.

The scale-out story for a shared devbox on Kubernetes: a StatefulSet of N
executors behind a headless Service, so every replica has a stable DNS name
(``execserver-0.execserver.NS.svc``, ...). A session lives in one executor
process, so it must stay on the replica that created it for its whole life,
resumes included; only *new* sessions may go anywhere.

:class:`ExecutorPool` picks the replica of a new session by rendezvous
(highest-random-weight) hashing of a caller-chosen session key -- a
conversation or task id -- over the replica ids: the same key lands on the same
replica while it is up, keys spread evenly, and removing one replica moves only
the keys that were on it. When the chosen replica cannot take a new session
(unreachable, refusing the upgrade, or draining before a rolling update), the
next one in the key's ranking is tried. The placement (replica id + session id)
is remembered; :meth:`ExecutorPool.resume` goes back to exactly that replica and
fails with :class:`ReplicaUnavailable` -- never silently elsewhere -- when it is
gone. Placements can be saved and restored (:meth:`placement`,
:meth:`restore`) so a restarted agent host finds its sessions again.

    pool = ExecutorPool.for_statefulset(
        "execserver", service="execserver", namespace="dev", replicas=3,
        token=token_file("/run/secrets/execserver/token"),
    )
    async with pool:
        client = await pool.session("conversation-42")   # an ExecServerClient
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from execserver.client.connection import (
    CONNECT_TIMEOUT,
    DEFAULT_CLIENT_NAME,
    ClientState,
    ExecServerClient,
)
from execserver.client.environments import Environment, TokenSource
from execserver.client.errors import (
    ExecServerError,
    ExecServerRpcError,
    ExecServerUnavailable,
    SessionAttached,
)
from execserver.wire.errors import EXECUTOR_DRAINING

__all__ = [
    "ExecutorPool",
    "NoReplicaAvailable",
    "Placement",
    "ReplicaUnavailable",
    "UnknownSessionKey",
    "rendezvous_rank",
]

_ATTACHED_GRACE_S = 5.0
_ATTACHED_RETRY_S = 0.05


class NoReplicaAvailable(ExecServerError):
    """No replica could open a new session; the message names each one's reason."""


class ReplicaUnavailable(ExecServerUnavailable):
    """The replica holding a session cannot be reached: the session cannot be resumed
    anywhere else (its processes live in that executor). Raised by the pool's
    resumes, and by every call on a pool client once its replica refuses the
    reconnect: at once, not after the client's recovery deadline."""

    def __init__(self, message: str, *, replica: str, session_id: str) -> None:
        super().__init__(message)
        self.replica = replica
        self.session_id = session_id


class UnknownSessionKey(ExecServerError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class Placement:
    """Where a session lives: save it to resume after an agent-host restart."""

    replica: str
    session_id: str


@dataclass
class _Pinned:
    placement: Placement
    client: ExecServerClient | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def rendezvous_rank(key: str, replica_ids: Iterable[str]) -> list[str]:
    """Replica ids ordered by preference for ``key`` (highest random weight first)."""

    def weight(replica: str) -> bytes:
        return hashlib.sha256(f"{key}\0{replica}".encode()).digest()

    return sorted(replica_ids, key=weight, reverse=True)


def _is_alive(client: ExecServerClient | None) -> bool:
    return client is not None and client.state not in (ClientState.FAILED, ClientState.CLOSED)


class ExecutorPool:
    """New sessions spread over replicas by session key; every session stays on its replica."""

    def __init__(
        self,
        replicas: Iterable[Environment],
        *,
        connect_timeout: float | None = CONNECT_TIMEOUT,
        **client_options: Any,
    ) -> None:
        self._replicas: dict[str, Environment] = {}
        for replica in replicas:
            if replica.id in self._replicas:
                raise ValueError(f"replica {replica.id!r} given twice")
            self._replicas[replica.id] = replica
        if not self._replicas:
            raise ValueError("an executor pool needs at least one replica")
        self._connect_timeout = connect_timeout
        self._client_options = client_options
        self._pinned: dict[str, _Pinned] = {}

    @classmethod
    def for_statefulset(
        cls,
        name: str,
        *,
        service: str,
        namespace: str,
        replicas: int,
        port: int = 8765,
        token: TokenSource | None = None,
        cluster_domain: str = "svc",
        client_name: str = DEFAULT_CLIENT_NAME,
        **options: Any,
    ) -> ExecutorPool:
        """Replicas ``NAME-0 .. NAME-(N-1)`` at their stable headless-Service DNS names."""
        return cls(
            (
                Environment(
                    f"{name}-{i}",
                    f"ws://{name}-{i}.{service}.{namespace}.{cluster_domain}:{port}",
                    token,
                    client_name,
                )
                for i in range(replicas)
            ),
            **options,
        )

    # -- placement ----------------------------------------------------------

    def replica_ids(self) -> list[str]:
        return list(self._replicas)

    def ranking(self, key: str) -> list[str]:
        """The replicas a new session for ``key`` tries, in order."""
        return rendezvous_rank(key, self._replicas)

    def placement(self, key: str) -> Placement | None:
        pinned = self._pinned.get(key)
        return pinned.placement if pinned is not None else None

    def restore(self, key: str, placement: Placement) -> None:
        """Remember a saved placement; the next :meth:`session` resumes it."""
        if placement.replica not in self._replicas:
            raise ValueError(f"placement names unknown replica {placement.replica!r}")
        if key in self._pinned:
            raise ValueError(f"session key {key!r} is already placed")
        self._pinned[key] = _Pinned(placement)

    # -- sessions -----------------------------------------------------------

    async def session(self, key: str) -> ExecServerClient:
        """The client of ``key``'s session: the live one, else a resume on its replica
        (a placed key), else a new session on the first replica of its ranking that
        takes it."""
        pinned = self._pinned.get(key)
        if pinned is None:
            return await self._open_new(key)
        async with pinned.lock:
            if _is_alive(pinned.client):
                assert pinned.client is not None
                return pinned.client
            pinned.client = await self._resume(key, pinned.placement)
            return pinned.client

    async def resume(self, key: str) -> ExecServerClient:
        """Reconnect ``key``'s session on the replica that holds it (a fresh connection,
        whatever the state of the current one). Raises ReplicaUnavailable when that
        replica cannot be reached; it never moves a session."""
        pinned = self._pinned.get(key)
        if pinned is None:
            raise UnknownSessionKey(f"no session is placed for key {key!r}")
        async with pinned.lock:
            old, pinned.client = pinned.client, None
            if old is not None:
                await old.close()
            pinned.client = await self._resume(key, pinned.placement)
            return pinned.client

    async def forget(self, key: str) -> None:
        """Close ``key``'s client and drop its placement (its session then expires)."""
        pinned = self._pinned.pop(key, None)
        if pinned is not None and pinned.client is not None:
            await pinned.client.close()

    async def _open_new(self, key: str) -> ExecServerClient:
        reasons: list[str] = []
        for replica_id in self.ranking(key):
            try:
                client = await self._connect(self._replicas[replica_id], None)
            except ExecServerRpcError as exc:
                why = "draining" if exc.code == EXECUTOR_DRAINING else f"error {exc.code}"
                reasons.append(f"{replica_id}: {why}: {exc.message}")
                continue
            except (ExecServerError, OSError) as exc:
                reasons.append(f"{replica_id}: {exc}")
                continue
            if key in self._pinned:  # a concurrent call placed it first: keep that one
                await client.close()
                return await self.session(key)
            self._pinned[key] = _Pinned(Placement(replica_id, client.session_id), client)
            return client
        raise NoReplicaAvailable(
            f"no executor replica could open a session for key {key!r}: " + "; ".join(reasons)
        )

    async def _resume(self, key: str, placement: Placement) -> ExecServerClient:
        replica = self._replicas[placement.replica]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _ATTACHED_GRACE_S
        try:
            while True:
                try:
                    return await self._connect(replica, placement.session_id)
                except SessionAttached:
                    # The server notices a closed connection asynchronously: a resume
                    # right after our own close may still find the session attached.
                    if loop.time() >= deadline:
                        raise
                    await asyncio.sleep(_ATTACHED_RETRY_S)
        except (ExecServerError, OSError) as exc:
            raise ReplicaUnavailable(
                f"cannot resume session {placement.session_id} of key {key!r}: it lives on "
                f"replica {replica.id} ({replica.url}), which failed: {exc}",
                replica=replica.id,
                session_id=placement.session_id,
            ) from exc

    async def _connect(self, replica: Environment, resume: str | None) -> ExecServerClient:
        client = await ExecServerClient.connect(
            replica.url,
            token=replica.token,
            client_name=replica.client_name,
            resume_session_id=resume,
            connect_timeout=self._connect_timeout,
            **self._client_options,
        )
        # A replica is one executor process at a stable address: when it refuses
        # the reconnect, the process and the session it held are gone, and no
        # amount of waiting brings them back.
        client.give_up_when_refused = True
        session_id = client.session_id

        def unavailable(message: str) -> ExecServerUnavailable:
            return ReplicaUnavailable(
                f"session {session_id} lives on replica {replica.id} ({replica.url}), "
                f"which is gone: {message}",
                replica=replica.id,
                session_id=session_id,
            )

        client.unavailable_error = unavailable
        return client

    async def close(self) -> None:
        clients = [p.client for p in self._pinned.values() if p.client is not None]
        for pinned in self._pinned.values():
            pinned.client = None
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

    async def __aenter__(self) -> ExecutorPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
