"""The persistent sandboxed fs helper: one long-lived helper process per
distinct resolved sandbox policy, inside exactly the bwrap + seccomp layout a
process with that policy gets (``plan_for_policy``), serving framed msgpack
requests over its stdin/stdout pipes.

* ``protocol``: the frames (shared by both ends).
* ``runtime``: how the helper's interpreter is reachable without widening the
  policy's view (read-only binds under a private directory the helper locks
  before serving).
* ``execserver.fs.sandbox_helper``: the program that runs inside the sandbox.
* ``helper``: one helper process seen from the daemon (the single spawn point).
* ``pool``: which helper serves a call; LRU cap, idle timeout, restart after a
  crash.

The lifetime rules (why a helper outliving a request widens nothing) are in
THREAT_MODEL.md.
"""

__all__: list[str] = []
