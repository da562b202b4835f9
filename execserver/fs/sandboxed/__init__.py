"""fs/* under a sandbox: the fs service's own client, pool, protocol and helper
program (fs depends on sandbox for the generic parts, never the reverse).

* ``client``: ``SandboxedFs``, the one entry point (``dispatch.run_sandboxed``).
* ``pool``: which persistent helper serves a call; LRU cap, idle timeout,
  restart after a crash, retirement when the host changes the files a mount
  sits on.
* ``helper``: one helper process seen from the daemon (both kinds start here).
* ``protocol``: the frames (framed msgpack), the constants both ends share;
  ``frames``: the daemon's codec (msgspec), ``msgpack_lite``: the helper's
  (pure Python: the helper imports no msgspec).
* ``program``: the helper program that runs inside the sandbox.

Nothing is imported here: the helper program imports this package first and
must not pay for the daemon's side.
"""

__all__: list[str] = []
