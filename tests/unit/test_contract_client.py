"""The client takes every method's params and result types from the contract
(``execserver/wire/contract.py``), the way the server's method table does.

Three checks:
* the typed overloads of ``call`` (``execserver/client/calls.py``) are exactly
  the contract: one per request method, with its params and result type, and
  the file is what ``python -m scripts.client_calls`` renders from it;
* ``call`` refuses a params struct of another method before sending, and the
  untyped path decodes each method's result as the contract's result type;
* the client's own wrappers (``fs``, processes, environment) send the contract's
  params type and get back the contract's result type, against a real server.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest

from execserver.client import ExecServerClient
from execserver.client.calls import Caller, TypedCalls
from execserver.client.params import DEFAULT_TIMEOUT, Timeout, result_type_of
from execserver.client.transport import Transport, WebSocketTransport
from execserver.wire import methods
from execserver.wire.base import Empty
from execserver.wire.contract import REQUESTS
from execserver.wire.process import TerminateParams
from scripts import client_calls
from tests.support.servers import RunningServer

CALLS_FILE = Path(client_calls.TARGET)


def _overloads(owner: type) -> dict[str, tuple[Any, Any]]:
    """method -> (params annotation, result annotation) of each overload of
    ``owner.call``. A Protocol's overloads have no implementation to ask, so
    the registry is asked by the method's name."""

    def named() -> None: ...

    named.__module__, named.__qualname__ = owner.__module__, f"{owner.__qualname__}.call"
    found: dict[str, tuple[Any, Any]] = {}
    for overload in typing.get_overloads(named):
        hints = typing.get_type_hints(overload)
        (method,) = get_args(hints["method"])
        assert method not in found, f"two overloads for {method}"
        found[method] = (hints["params"], hints["return"])
    return found


@pytest.mark.parametrize("owner", [Caller, TypedCalls], ids=["Caller", "TypedCalls"])
def test_call_overloads_are_the_contract(owner: type) -> None:
    assert _overloads(owner) == REQUESTS


def test_the_typed_calls_are_generated_from_the_contract() -> None:
    expected = client_calls._formatted(client_calls.render())
    assert CALLS_FILE.read_text() == expected, "run: python -m scripts.client_calls"


def test_the_untyped_path_decodes_each_result_as_the_contract_says() -> None:
    for method, (_, result) in REQUESTS.items():
        assert result_type_of(method) is result
    assert result_type_of("no/such") is object


async def _never_opened() -> Transport:
    raise AssertionError("nothing may be sent")


@pytest.mark.parametrize("method", sorted(REQUESTS))
async def test_call_refuses_another_methods_params_before_sending(method: str) -> None:
    client = ExecServerClient(_never_opened)
    wrong: msgspec.Struct = Empty() if REQUESTS[method][0] is not Empty else TerminateParams("p")
    with pytest.raises(TypeError, match=f"{method} takes {REQUESTS[method][0].__name__} params"):
        await client.call(method, wrong)  # type: ignore[call-overload]


class RecordingClient(ExecServerClient):
    """Every request the client's wrappers send, with the types on both sides."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[str, type, type]] = []

    async def call_any(
        self, method: str, params: object = None, *, timeout: Timeout = DEFAULT_TIMEOUT
    ) -> Any:
        result = await super().call_any(method, params, timeout=timeout)
        self.sent.append((method, type(params), type(result)))
        return result


# Requests the client library has wrappers for; the others (http/request,
# capability discovery, environmentConfig/read, fs/watchMissing) are reached
# through call() only. initialize is sent by the handshake itself.
WRAPPED = set(REQUESTS) - {
    methods.INITIALIZE,
    methods.HTTP_REQUEST,
    methods.CAPABILITIES_DISCOVER_V2,
    methods.CAPABILITY_ROOTS_DISCOVER_V1,
    methods.ENVIRONMENT_CONFIG_READ,
    methods.FS_WATCH_MISSING,
}


async def test_the_clients_wrappers_use_the_contracts_types(
    execserver: RunningServer, tmp_path: Path
) -> None:
    client = await RecordingClient.from_opener(
        _websocket_opener(execserver.url), auto_reconnect=False
    )
    async with client:
        await client.get_environment_info()
        await client.environment_status()

        fs = client.fs
        await fs.create_directory(tmp_path / "d")
        await fs.write_file(tmp_path / "d" / "a", b"hello")
        assert await fs.read_file(tmp_path / "d" / "a") == b"hello"
        assert (await fs.get_metadata(tmp_path / "d" / "a")).size == 5
        assert await fs.canonicalize(tmp_path / "d" / "a") == str(tmp_path / "d" / "a")
        assert [e.file_name for e in await fs.read_directory(tmp_path / "d")] == ["a"]
        assert not (await fs.walk(tmp_path / "d")).truncated
        await fs.copy(tmp_path / "d" / "a", tmp_path / "d" / "b")
        async with fs.open(tmp_path / "d" / "b", "replace") as handle:
            await handle.write_block(0, b"bye")
        async with fs.open(tmp_path / "d" / "b") as handle:
            assert await handle.read_block(0, 10) == (b"bye", True)
        await fs.remove(tmp_path / "d")

        proc = await client.start_process(["cat"], cwd=tmp_path, pipe_stdin=True)
        await proc.write(b"x")
        await proc.read(wait_ms=0)
        await proc.signal("interrupt")
        await proc.terminate()
        await proc.wait_closed()

    wrong = [
        (method, params, result)
        for method, params, result in client.sent
        if method in REQUESTS
        and not (params is REQUESTS[method][0] and issubclass(result, REQUESTS[method][1]))
    ]
    assert wrong == []
    assert {method for method, _, _ in client.sent} == WRAPPED


def _websocket_opener(url: str) -> Callable[[], Any]:
    async def opener() -> Transport:
        return await WebSocketTransport.connect(url, token=None, timeout=10)

    return opener
