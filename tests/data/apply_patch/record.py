"""Record what the reference ``apply_patch`` does with each corpus case.

Usage: ``.venv/bin/python tests/data/apply_patch/record.py`` (needs the
reference codex binary: ``$CODEX_BIN``, else ``scripts/reference.py`` installs
it on first use). For every case of ``define_cases.py`` the input tree
is written to a fresh directory, the binary is run there as ``apply_patch
PATCH`` (its arg0 entry point, the form exec_command hands it), and the exit
code, stdout, stderr and resulting tree are written to ``cases/<name>.json``.
The directory path is replaced by ``<ROOT>`` in the recorded output. The
other entry point (``codex --codex-run-as-apply-patch PATCH``) is run too and
must give the same result, or recording stops.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[2]))  # the project root, for scripts.reference

from define_cases import CASES, Case  # type: ignore[import-not-found]  # noqa: E402

from scripts.reference import ReferenceUnavailable  # noqa: E402
from scripts.reference import reference_binary as _reference_binary  # noqa: E402

ROOT_TOKEN = "<ROOT>"


def reference_binary() -> str:
    return str(_reference_binary())


def write_tree(root: Path, case: Case) -> None:
    for d in case.dirs:
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8"))


def snapshot(root: Path) -> tuple[dict[str, str], list[str]]:
    files: dict[str, str] = {}
    dirs: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirs.extend(os.path.normpath(os.path.join(rel_dir, name)) for name in dirnames)
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            files[rel] = (Path(dirpath) / name).read_bytes().decode("utf-8")
    return dict(sorted(files.items())), sorted(dirs)


def record(case: Case, binary: str, *, via_flag: bool = False) -> dict[str, object]:
    """``via_flag`` runs ``codex --codex-run-as-apply-patch PATCH`` instead of the
    arg0 entry point; both are the same applier."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp).resolve()
        bindir = base / "bin"
        bindir.mkdir()
        (bindir / "apply_patch").symlink_to(binary)
        root = base / "work"
        root.mkdir()
        write_tree(root, case)
        patch = case.patch.replace(ROOT_TOKEN, str(root))
        argv = (
            [binary, "--codex-run-as-apply-patch", patch]
            if via_flag
            else [str(bindir / "apply_patch"), patch]
        )
        proc = subprocess.run(
            argv,
            cwd=root,
            capture_output=True,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            timeout=30,
        )
        files, dirs = snapshot(root)
        return {
            "exit_code": proc.returncode,
            "stdout": proc.stdout.decode("utf-8").replace(str(root), ROOT_TOKEN),
            "stderr": proc.stderr.decode("utf-8").replace(str(root), ROOT_TOKEN),
            "files": files,
            "dirs": dirs,
        }


def main() -> None:
    try:
        binary = reference_binary()
    except ReferenceUnavailable as exc:
        sys.exit(str(exc))
    out_dir = HERE / "cases"
    out_dir.mkdir(exist_ok=True)
    for case in CASES:
        data = {
            "name": case.name,
            "description": case.description,
            "patch": case.patch,
            "files": case.files,
            "dirs": list(case.dirs),
            "reference": record(case, binary),
            "recorded_with": "codex 0.169.0 apply_patch (arg0), argv form",
        }
        flagged = record(case, binary, via_flag=True)
        if flagged != data["reference"]:
            sys.exit(f"{case.name}: the two entry points disagree: {flagged!r}")
        path = out_dir / f"{case.name}.json"
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        ref = data["reference"]
        assert isinstance(ref, dict)
        print(f"{case.name}: exit {ref['exit_code']}")


if __name__ == "__main__":
    main()
