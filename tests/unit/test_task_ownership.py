"""Every task and thread execserver/ starts has an owner, read from the source.

A task is owned when an ``execserver.aio.tasks.TaskSet`` holds it: it is named,
its failure is logged, and its owner's ``aclose`` cancels and awaits it. So outside
execserver/aio/ (where ``TaskSet`` and the eager trampoline live) no module calls
``create_task``, ``ensure_future`` or ``asyncio.Task(...)`` itself; it spawns
through a ``TaskSet`` (``spawn``, or ``adopt`` for a task asyncio started).

A thread is owned when something joins it or it is one per process for the
process's lifetime: each ``threading.Thread(...)`` (and ``_thread.start_new_thread``)
outside execserver/aio/ must be in ``OWNED_THREADS``, keyed by module and the
thread's ``name=`` (or its ``target=``, or start_new_thread's function), with the
reason it is owned.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.imports import modules, syntax_tree, within

TASK_CALLS = {"create_task", "ensure_future"}

# (module, thread name or target) -> why the thread is owned.
OWNED_THREADS = {
    ("execserver.server.audit", "audit-log"): (
        "the audit log's one writer; AuditLog.close_sync queues the stop and joins it"
    ),
    ("execserver.sandbox.plan", "sandbox-status"): (
        "one per process for its lifetime (_StatusPipes): every bwrap status pipe is read"
        " by it, none is left to a thread of its own"
    ),
    ("execserver.client.sync", "execserver-sync"): (
        "the sync clients' one event loop thread, a daemon thread for the process's"
        " lifetime (every blocking call runs its coroutine there)"
    ),
    ("execserver.sandbox.bridge", "_copy"): (
        "runs inside the sandbox, in the bridge program (its own short-lived process)"
    ),
    ("execserver.sandbox.bridge", "_serve_one"): (
        "runs inside the sandbox, in the bridge program (its own short-lived process)"
    ),
    ("execserver.sandbox.bridge", "_accept_loop"): (
        "runs inside the sandbox, in the bridge program (its own short-lived process)"
    ),
    ("execserver.fs.sandboxed.program", "_follow_until_done"): (
        "the fs helper program's request threads (in the helper's own process,"
        " started with _thread: it imports no threading); serve() takes each"
        " thread's done lock before it returns"
    ),
    ("execserver.fs.worker_pool", "_work"): (
        "a WorkerPool's workers (at most max_workers); WorkerPool.close stops and joins"
        " them, and the daemon's fs pool lives as long as its process"
    ),
    ("execserver.sandbox.backend", "_run_to_outcome"): (
        "a _ProbeThread: _probe_now joins the launcher probe, probing_ahead joins its"
        " probe when its block ends"
    ),
    ("execserver.sandbox.shapes", "doctor-managed-probe"): (
        "the managed-network probe's acceptor; _probe_managed stops and joins it before it returns"
    ),
}


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


THREAD_CALLS = {"Thread", "start_new_thread"}


def _thread_key(call: ast.Call) -> str:
    """The thread's ``name=`` when it is a literal, else its ``target=`` function
    (start_new_thread's first argument)."""
    if _callee(call) == "start_new_thread":
        function = call.args[0] if call.args else None
        if isinstance(function, ast.Attribute):
            return function.attr
        if isinstance(function, ast.Name):
            return function.id
        return "?"
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    name = keywords.get("name")
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        return name.value
    target = keywords.get("target")
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Name):
        return target.id
    return "?"


def _is_asyncio_task(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "Task"
        and isinstance(func.value, ast.Name)
        and func.value.id == "asyncio"
    )


def unowned_spawns(tree: ast.Module, module: str) -> Iterator[str]:
    """Each task or unlisted thread started in tree, as ``module:line what``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _callee(node)
        if callee in TASK_CALLS or _is_asyncio_task(node):
            yield f"{module}:{node.lineno} {callee}(...) outside a TaskSet"
        elif callee in THREAD_CALLS:
            key = _thread_key(node)
            if (module, key) not in OWNED_THREADS:
                yield f"{module}:{node.lineno} Thread({key}) with no owner in OWNED_THREADS"


def _walked() -> dict[str, Path]:
    return {name: path for name, path in modules().items() if not within(name, "execserver.aio")}


def test_every_task_and_thread_has_an_owner() -> None:
    unowned = [
        site for name, path in _walked().items() for site in unowned_spawns(syntax_tree(path), name)
    ]
    assert not unowned, "tasks and threads with no owner:\n    " + "\n    ".join(unowned)


def test_every_listed_thread_is_still_started() -> None:
    # A stale entry would let a new thread of the same name in unseen.
    started = {
        (name, _thread_key(node))
        for name, path in _walked().items()
        for node in ast.walk(syntax_tree(path))
        if isinstance(node, ast.Call) and _callee(node) in THREAD_CALLS
    }
    assert set(OWNED_THREADS) <= started, sorted(set(OWNED_THREADS) - started)


def test_the_walk_finds_each_kind_of_spawn() -> None:
    source = (
        "import asyncio, threading\n"
        "async def f(loop, coro, owned):\n"
        "    loop.create_task(coro)\n"
        "    asyncio.ensure_future(coro)\n"
        "    asyncio.Task(coro, loop=loop)\n"
        "    owned.spawn(coro, name='fine')\n"
        "    threading.Thread(target=f, name='stray').start()\n"
        "    threading.Thread(target=f, name='audit-log').start()\n"
        "    _thread.start_new_thread(f, ())\n"
    )
    found = sorted(unowned_spawns(ast.parse(source), "execserver.server.audit"))
    assert found == [
        "execserver.server.audit:3 create_task(...) outside a TaskSet",
        "execserver.server.audit:4 ensure_future(...) outside a TaskSet",
        "execserver.server.audit:5 Task(...) outside a TaskSet",
        "execserver.server.audit:7 Thread(stray) with no owner in OWNED_THREADS",
        "execserver.server.audit:9 Thread(f) with no owner in OWNED_THREADS",
    ]
