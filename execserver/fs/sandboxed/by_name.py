"""TEMPORARY: a helper program whose operations are named ``module:function``.

Only for ``execserver/discovery/service.py``, which still hands ``run_fs_op``
a plain function (``discovery.skills.scan_root``) with ``host=sandbox_host(ctx)``.
That service may not be imported by fs, so its operation cannot be in fs's own
program; the fix is a helper program of discovery's own (a module calling
``execserver.fs.sandboxed.program.main({"scan_root": scan_root})``) named by an
``FsOperation(..., program=...)``. Once discovery does that, this module,
``dispatch.sandbox_host`` and the plain-function branch of ``dispatch.run_fs_op``
go, and with them the last import by string.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from execserver.fs.operations import FsOperation
from execserver.fs.sandboxed import program

__all__ = ["main", "operation"]


def operation(func: Callable[..., Any]) -> FsOperation:
    """``func`` as an operation this program serves."""
    return FsOperation(f"{func.__module__}:{func.__name__}", func, program=__name__)


class _ByName(Mapping[str, Callable[..., Any]]):
    def __getitem__(self, spec: str) -> Callable[..., Any]:
        module_name, _, attr = spec.partition(":")
        if not module_name or not attr:
            raise KeyError(spec)
        func = getattr(importlib.import_module(module_name), attr, None)
        if not callable(func):
            raise KeyError(spec)
        return func  # type: ignore[no-any-return]

    def get(self, spec: str, default: Any = None) -> Any:
        try:
            return self[spec]
        except (KeyError, ImportError):
            return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def main() -> int:
    return program.main(_ByName())


if __name__ == "__main__":
    sys.exit(main())
