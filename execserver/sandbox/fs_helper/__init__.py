"""What the sandbox offers a helper program of the daemon's own (the fs
service's, ``execserver/fs/sandboxed/``), none of it specific to fs:

* ``launch``: the plans a helper starts with (on the private runtime, or
  confined) and the single spawn point (resource limits, helper pid registry).
* ``runtime``: how the helper's interpreter is reachable without widening the
  policy's view (read-only binds under a private directory the helper locks
  before serving), and which policies that can serve.
* ``confine``: inside a helper started with more than its view, shrinking
  itself to the view (path check, Landlock).
* ``mount_watch``: inside a long-lived helper, noticing that a mount of its
  view was detached by the host.
* ``identity``: the identities of the files a policy's mounts sit on.

The lifetime rules (why a helper outliving a request widens nothing) are in
THREAT_MODEL.md.
"""

__all__: list[str] = []
