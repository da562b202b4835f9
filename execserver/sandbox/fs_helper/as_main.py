"""``python -c 'from execserver.sandbox.fs_helper.as_main import run; run()'
<module> <args...>``: what ``python -m <module> <args...>`` does, without runpy.

The persistent helper's interpreter starts once per sandbox policy
(``runtime.py``), and runpy, with the importlib.util, functools, collections
and contextlib it imports, was ~0.6 MB of each helper's memory and a few
milliseconds of each start. Here the module is found by the path finder the
interpreter already has loaded (frozen) and run as ``__main__``, as runpy's
``_run_module_as_main`` runs it: same globals, same ``sys.argv``. The module's
name stays in the command line, where ``ps`` shows it.
"""

from __future__ import annotations

import sys
from _frozen_importlib_external import PathFinder

__all__ = ["BOOTSTRAP", "run"]

# The interpreter's -c argument; the module's name and its arguments follow.
BOOTSTRAP = f"from {__name__} import run; run()"


def run(argv: list[str] | None = None) -> None:
    """Run ``argv[1]`` (a module, not a package) as ``__main__`` with
    ``argv[2:]`` as its arguments (``sys.argv``, by default)."""
    args = sys.argv if argv is None else argv
    if len(args) < 2:
        raise SystemExit("usage: -c BOOTSTRAP <module> [args...]")
    name = args[1]
    package, _, _ = name.rpartition(".")
    path = None
    if package:
        __import__(package)
        path = sys.modules[package].__path__
    spec = PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None or spec.origin is None:
        raise SystemExit(f"No module named {name}")
    code = spec.loader.get_code(name)  # type: ignore[attr-defined]
    if code is None:
        raise SystemExit(f"No code object available for {name}")
    sys.argv[:] = [spec.origin, *args[2:]]
    main = sys.modules["__main__"].__dict__
    main.update(
        __name__="__main__",
        __file__=spec.origin,
        __cached__=spec.cached,
        __doc__=None,
        __loader__=spec.loader,
        __package__=package,
        __spec__=spec,
    )
    exec(code, main)
