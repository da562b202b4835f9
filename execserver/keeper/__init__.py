"""Process keepers: what holds a process when the daemon does not (``--state-dir``).

``program.py`` is the keeper itself (stdlib only, run as ``python -I -S``: a
zygote the daemon starts once, forking one keeper per process); ``client.py``
is the daemon's side of it: starting the zygote, asking it for a keeper, and
reconnecting to a keeper a previous daemon left behind.
"""

__all__: list[str] = []
