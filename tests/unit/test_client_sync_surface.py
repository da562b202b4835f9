"""The blocking client is the async one without ``await``: every public name of
the async client, its file system, paths, handles and processes exists on the
sync twin too (a name added to one side and forgotten on the other fails here)."""

from __future__ import annotations

import inspect

import pytest

from execserver.client import sync
from execserver.client.connection import ExecServerClient
from execserver.client.fs import RemoteFileHandle, RemoteFileSystem, RemotePath
from execserver.client.process import RemoteProcess

# What the router calls on a process, not a consumer (see RemoteProcess's docstring).
ROUTER_ONLY = {"catch_up", "deliver", "fail", "mark_started"}


def public(cls: type, instance_attributes: set[str] = frozenset()) -> set[str]:  # type: ignore[assignment]
    return {n for n in dir(cls) if not n.startswith("_")} | set(instance_attributes)


def instance_attributes(init: object) -> set[str]:
    source = inspect.getsource(init)  # type: ignore[arg-type]
    return {
        line.split("self.", 1)[1].split(":")[0].split("=")[0].strip()
        for line in source.splitlines()
        if line.strip().startswith("self.") and not line.strip().startswith("self._")
    }


@pytest.mark.parametrize(
    ("async_cls", "sync_cls", "skip"),
    [
        (ExecServerClient, sync.ExecServerClient, set()),
        (RemoteFileSystem, sync.SyncFileSystem, set()),
        (RemotePath, sync.SyncRemotePath, set()),
        (RemoteFileHandle, sync.SyncRemoteFileHandle, set()),
        (RemoteProcess, sync.SyncRemoteProcess, ROUTER_ONLY),
    ],
)
def test_the_sync_twin_has_every_public_name(
    async_cls: type, sync_cls: type, skip: set[str]
) -> None:
    names = public(async_cls) | instance_attributes(async_cls.__init__)  # type: ignore[misc]
    have = public(sync_cls) | instance_attributes(sync_cls.__init__)  # type: ignore[misc]
    missing = sorted(names - skip - have)
    assert missing == [], f"{sync_cls.__name__} lacks {missing}"


def test_blocking_methods_are_not_coroutines() -> None:
    for cls in (sync.ExecServerClient, sync.SyncFileSystem, sync.SyncRemotePath,
                sync.SyncRemoteProcess, sync.SyncRemoteFileHandle):  # fmt: skip
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            assert not inspect.iscoroutinefunction(member), f"{cls.__name__}.{name}"
