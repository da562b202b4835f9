"""The aiohttp side of ``http/request``: what service.py loads on the first call.

aiohttp (with yarl, multidict and its HTTP machinery) is the largest import of
the daemon; a daemon that is never asked for an ``http/request`` never loads it
(see service.py's ``_load_sending``).
"""

from __future__ import annotations

import asyncio

import aiohttp

from execserver.http_request.client import HttpClient, response_headers
from execserver.http_request.streams import BODY_ERROR, HttpStreams
from execserver.wire.errors import RpcError

__all__ = ["HttpClient", "HttpStreams", "read_body", "response_headers"]


async def read_body(response: aiohttp.ClientResponse, deadline: float | None) -> bytes:
    """A buffered response's whole body (then the connection goes back to the pool)."""
    try:
        async with asyncio.timeout_at(deadline):
            return await response.read()
    except (TimeoutError, aiohttp.ClientError, OSError):
        raise RpcError.internal(
            f"failed to read http/request response body: {BODY_ERROR}"
        ) from None
    finally:
        response.release()
