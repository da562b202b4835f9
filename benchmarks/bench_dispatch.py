"""Why execserver dispatches with its own method table instead of jsonrpcserver.

jsonrpcserver was the chosen dispatch library; the issue asked to measure it
before replacing it. This measures the per-message cost of decoding a
request, dispatching it to a trivial async handler and encoding the reply,
both ways, in one process (no network), and prints the ratio.

Besides speed, jsonrpcserver cannot speak this dialect as is: it requires
``"jsonrpc": "2.0"`` on every request (the exec-server protocol omits it),
adds it to every response, and reports its own error texts and codes
(e.g. it validates with jsonschema and answers -32600 "Invalid request"
where the reference answers serde's ``missing field `writeId```).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import msgspec
from jsonrpcserver import Result, Success, async_dispatch, method

from execserver.kernel.methods import MethodTable
from execserver.wire.envelope import (
    IncomingRequest,
    ResponseMessage,
    decode_incoming,
    encode_message,
)
from execserver.wire.process import ReadParams


@method(name="process/read")
async def _jsonrpcserver_read(processId: str, afterSeq: int = 0) -> Result:
    return Success({"chunks": [], "nextSeq": afterSeq + 1})


async def _our_read(ctx: object, params: ReadParams) -> dict[str, object]:
    return {"chunks": [], "nextSeq": (params.after_seq or 0) + 1}


async def bench_jsonrpcserver(n: int) -> float:
    frame = (
        '{"jsonrpc":"2.0","id":1,"method":"process/read","params":{"processId":"p","afterSeq":3}}'
    )
    start = time.perf_counter()
    for _ in range(n):
        reply = await async_dispatch(frame)
    elapsed = time.perf_counter() - start
    assert '"nextSeq": 4' in reply or '"nextSeq":4' in reply, reply
    return elapsed / n


async def bench_method_table(n: int) -> float:
    table = MethodTable()
    table.add("process/read", _our_read, family="exec")
    frame = b'{"id":1,"method":"process/read","params":{"processId":"p","afterSeq":3}}'
    start = time.perf_counter()
    for _ in range(n):
        message = decode_incoming(frame)
        assert isinstance(message, IncomingRequest)
        spec = table.get(message.method)
        assert spec is not None
        params = spec.decoder.decode(message.params)
        result = await spec.handler(None, params)  # type: ignore[arg-type]
        reply = encode_message(ResponseMessage(message.id, result))
    elapsed = time.perf_counter() - start
    assert msgspec.json.decode(reply)["result"]["nextSeq"] == 4
    return elapsed / n


async def main(n: int = 20000, rounds: int = 5) -> dict[str, float]:
    ours, theirs = [], []
    for _ in range(rounds):  # interleaved A B A B
        theirs.append(await bench_jsonrpcserver(n))
        ours.append(await bench_method_table(n))
    result = {
        "jsonrpcserver_us_per_msg": statistics.median(theirs) * 1e6,
        "method_table_us_per_msg": statistics.median(ours) * 1e6,
    }
    result["ratio_jsonrpcserver_over_table"] = (
        result["jsonrpcserver_us_per_msg"] / result["method_table_us_per_msg"]
    )
    return result


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    for key, value in asyncio.run(main(n)).items():
        print(f"{key}: {value:.2f}")
