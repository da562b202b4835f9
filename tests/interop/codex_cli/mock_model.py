"""A scripted stand-in for the OpenAI Responses API on 127.0.0.1.

The codex CLI posts the whole conversation to ``POST /v1/responses`` on every
model turn and reads the answer as server-sent events. Each scenario scripts
the turns in order: a turn is a list of output items (tool calls or an
assistant message). Every request body is recorded so tests can check which
tool output the CLI sent back to the model.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Item = dict[str, Any]
# A scripted turn: fixed items, or a function of the model's state so far (for
# answers that depend on earlier tool output, such as a write_stdin session id).
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Turn = list[Item] | Callable[["MockModel"], list[Item]]


def exec_command(call_id: str, **arguments: Any) -> Item:
    """A ``function_call`` of the unified-exec tool (arguments as the model sends them)."""
    return {
        "type": "function_call",
        "name": "exec_command",
        "arguments": json.dumps(arguments),
        "call_id": call_id,
    }


def write_stdin(call_id: str, **arguments: Any) -> Item:
    return {
        "type": "function_call",
        "name": "write_stdin",
        "arguments": json.dumps(arguments),
        "call_id": call_id,
    }


def apply_patch(call_id: str, patch: str) -> Item:
    """A freeform ``custom_tool_call``: the patch text is the raw input."""
    return {"type": "custom_tool_call", "name": "apply_patch", "input": patch, "call_id": call_id}


def message(text: str) -> Item:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


@dataclass
class MockModel:
    """Serves scripted turns; after the script it answers with a final message."""

    turns: list[Turn]
    requests: list[dict[str, Any]] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)  # requests other than POST /v1/responses
    url: str = ""  # the /v1 base URL
    origin: str = ""  # http://127.0.0.1:PORT
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def tool_outputs(self) -> dict[str, str]:
        """call_id -> output text of every tool result the CLI sent back, in any request."""
        outputs: dict[str, str] = {}
        for body in self.requests:
            for item in body.get("input", []):
                if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                    outputs[item["call_id"]] = _output_text(item.get("output"))
        return outputs

    def tool_names(self) -> set[str]:
        """Names of the tools the CLI offered the model on the first request."""
        tools = self.requests[0].get("tools", []) if self.requests else []
        return {t.get("name", "") for t in tools}

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        index = len(self.requests) - 1
        turn = self.turns[index] if index < len(self.turns) else [message("done")]
        items = turn(self) if callable(turn) else turn
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        resp_id = f"resp_{next(self._ids)}"
        await _event(response, "response.created", {"response": {"id": resp_id}})
        for n, item in enumerate(items):
            full = {"id": f"item_{resp_id}_{n}", "status": "completed", **item}
            await _event(response, "response.output_item.done", {"item": full})
        usage = {
            "input_tokens": 10,
            "input_tokens_details": None,
            "output_tokens": 5,
            "output_tokens_details": None,
            "total_tokens": 15,
        }
        await _event(response, "response.completed", {"response": {"id": resp_id, "usage": usage}})
        await response.write_eof()
        return response

    @web.middleware
    async def _record_stray(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # Everything but a model turn, including what the CLI tries to send
        # elsewhere: the mock is also its HTTP(S) proxy, and a CONNECT never
        # matches a route, so this is a middleware. Tests insist there is none.
        if (request.method, request.path) != ("POST", "/v1/responses"):
            self.stray.append(f"{request.method} {request.host} {request.path_qs}")
            return web.Response(status=404)
        return await handler(request)


async def _event(response: web.StreamResponse, kind: str, payload: dict[str, Any]) -> None:
    data = json.dumps({"type": kind, **payload})
    await response.write(f"event: {kind}\ndata: {data}\n\n".encode())


def _output_text(output: Any) -> str:
    # Function outputs are a string or a list of content items.
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(part.get("text", "") for part in output if isinstance(part, dict))
    if isinstance(output, dict):
        return str(output.get("content", output))
    return str(output)


@asynccontextmanager
async def serve(turns: list[Turn]) -> AsyncIterator[MockModel]:
    """Run the mock on an ephemeral 127.0.0.1 port; ``model.url`` is the /v1 base."""
    model = MockModel(turns)
    app = web.Application(middlewares=[model._record_stray])
    app.router.add_post("/v1/responses", model._responses)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    model.origin = f"http://127.0.0.1:{port}"
    model.url = f"{model.origin}/v1"
    try:
        yield model
    finally:
        await runner.cleanup()
