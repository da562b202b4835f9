"""Messages split over several websocket frames (a first frame without FIN, then
continuations), as RFC 6455 allows any client to send: reassembled and answered
like one frame, by execserver and the reference alike; an oversized split message
is closed with 1009 as an oversized single frame is."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from picows import WSCloseCode, WSFrame, WSListener, WSMsgType, WSTransport, ws_connect

from tests.support.servers import RunningServer


class Peer(WSListener):
    def __init__(self) -> None:
        super().__init__()
        self.messages: asyncio.Queue[Any] = asyncio.Queue()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            self.messages.put_nowait(json.loads(frame.get_payload_as_bytes()))
        elif frame.msg_type is WSMsgType.CLOSE:
            self.messages.put_nowait(("close", frame.get_close_code()))

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        self.messages.put_nowait(("disconnected", None))

    async def next(self) -> Any:
        return await asyncio.wait_for(self.messages.get(), 30)


def send_split(transport: WSTransport, message: bytes, parts: int) -> None:
    size = -(-len(message) // parts)
    pieces = [message[i : i + size] for i in range(0, len(message), size)]
    for index, piece in enumerate(pieces):
        kind = WSMsgType.TEXT if index == 0 else WSMsgType.CONTINUATION
        transport.send(kind, piece, fin=index == len(pieces) - 1)


async def test_a_split_message_is_answered_as_one(any_server: RunningServer) -> None:
    transport, peer = await ws_connect(Peer, any_server.url)
    assert isinstance(peer, Peer)
    try:
        initialize = {"id": 1, "method": "initialize", "params": {"clientName": "split"}}
        send_split(transport, json.dumps(initialize).encode(), 3)
        answer = await peer.next()
        assert answer["id"] == 1 and "sessionId" in answer["result"]
        transport.send(WSMsgType.TEXT, b'{"method":"initialized"}')
        status = json.dumps({"id": 2, "method": "environment/status"}).encode()
        send_split(transport, status, len(status))  # one byte per frame
        assert await peer.next() == {"id": 2, "result": {"status": "ready"}}
    finally:
        transport.disconnect()
        await transport.wait_disconnected()


async def test_an_oversized_split_message_is_closed_with_1009(execserver: RunningServer) -> None:
    transport, peer = await ws_connect(Peer, execserver.url, max_frame_size=128 * 1024 * 1024)
    assert isinstance(peer, Peer)
    try:
        # Each part is below the 64 MiB limit, together they are over it.
        send_split(transport, b"x" * (64 * 1024 * 1024 + 1), 4)
        assert await peer.next() == ("close", WSCloseCode.MESSAGE_TOO_BIG)
    finally:
        transport.disconnect()
        await transport.wait_disconnected()
