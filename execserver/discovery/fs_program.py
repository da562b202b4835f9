"""The sandboxed helper program of capability discovery: the fs helper program
(``execserver/fs/sandboxed/program.py``) serving discovery's one operation.

fs may not import discovery, so ``scan_root`` cannot be in fs's own operations
table; a sandboxed root scan runs this module instead, in a confined helper of its
own (``FsOperation.program``), with the same protocol and error encoding.
"""

from __future__ import annotations

import sys

from execserver.discovery.skills import scan_root
from execserver.fs.operations import FsOperation
from execserver.fs.sandboxed import program

__all__ = ["SCAN_ROOT"]

SCAN_ROOT = FsOperation("scan_root", scan_root, program=__name__)


if __name__ == "__main__":
    sys.exit(program.main({SCAN_ROOT.name: SCAN_ROOT.helper_function}))
