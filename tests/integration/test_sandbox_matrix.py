"""The policy x command matrix (tests/support/sandbox.py) against our launch plans, with the
outcomes recorded from the codex 0.169.0 exec-server (test_sandbox_parity
re-checks them live against the reference binary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from execserver.sandbox import plan_process_launch
from execserver.wire.sandbox import decode_sandbox_context
from tests.support.sandbox import (
    child_env,
    commands,
    context_json,
    host_backend,
    make_tree,
    markers,
    policies,
    run_plan,
    tcp_listener,
    uri,
)

DENIAL_TEXTS = ("Read-only file system", "Permission denied", "Operation not permitted")

# (policy, command, exit code, sandboxDenied, markers, denial texts) as the reference reported
RECORDED = [
    (
        "read-only",
        "writes",
        0,
        False,
        ["CODEX_FAIL", "GIT_FAIL", "LINK_FAIL", "LNGIT_FAIL", "MVGIT_FAIL", "OUT_FAIL", "WS_FAIL"],
        ("Read-only file system",),
    ),
    ("read-only", "reads", 0, False, ["LS_OK", "SECRET_OK", "SFILE_OK"], ()),
    ("read-only", "net", 1, True, [], ("Operation not permitted",)),
    ("read-only", "touch outside", 1, True, [], ("Read-only file system",)),
    ("read-only", "SIGSYS", 159, True, [], ()),
    (
        "workspace-write + deny secret",
        "writes",
        0,
        False,
        ["CODEX_FAIL", "GIT_FAIL", "LINK_FAIL", "LNGIT_FAIL", "MVGIT_FAIL", "OUT_FAIL", "WS_OK"],
        ("Read-only file system",),
    ),
    (
        "workspace-write + deny secret",
        "reads",
        0,
        False,
        ["LS_OK", "SECRET_FAIL", "SFILE_FAIL"],
        ("Permission denied",),
    ),
    ("workspace-write + deny secret", "net", 1, True, [], ("Operation not permitted",)),
    ("workspace-write + deny secret", "touch outside", 1, True, [], ("Read-only file system",)),
    ("workspace-write + deny secret", "SIGSYS", 159, True, [], ()),
    (
        "workspace-write, network enabled",
        "writes",
        0,
        False,
        ["CODEX_FAIL", "GIT_FAIL", "LINK_FAIL", "LNGIT_FAIL", "MVGIT_FAIL", "OUT_FAIL", "WS_OK"],
        ("Read-only file system",),
    ),
    ("workspace-write, network enabled", "reads", 0, False, ["LS_OK", "SECRET_OK", "SFILE_OK"], ()),
    ("workspace-write, network enabled", "net", 0, False, ["CONNECTED"], ()),
    ("workspace-write, network enabled", "touch outside", 1, True, [], ("Read-only file system",)),
    ("workspace-write, network enabled", "SIGSYS", 159, True, [], ()),
    (
        "minimal read + ws write",
        "writes",
        0,
        False,
        ["CODEX_FAIL", "GIT_FAIL", "LINK_FAIL", "LNGIT_FAIL", "MVGIT_FAIL", "OUT_FAIL", "WS_OK"],
        ("Read-only file system",),
    ),
    ("minimal read + ws write", "reads", 0, False, ["LS_FAIL", "SECRET_FAIL", "SFILE_FAIL"], ()),
    ("minimal read + ws write", "net", 1, True, [], ("Operation not permitted",)),
    ("minimal read + ws write", "touch outside", 1, False, [], ()),
    ("minimal read + ws write", "SIGSYS", 159, True, [], ()),
    (
        "unrestricted fs, network restricted",
        "writes",
        0,
        False,
        ["CODEX_OK", "GIT_OK", "LINK_OK", "LNGIT_OK", "MVGIT_OK", "OUT_OK", "WS_OK"],
        (),
    ),
    (
        "unrestricted fs, network restricted",
        "reads",
        0,
        False,
        ["LS_OK", "SECRET_OK", "SFILE_OK"],
        (),
    ),
    ("unrestricted fs, network restricted", "net", 1, True, [], ("Operation not permitted",)),
    ("unrestricted fs, network restricted", "touch outside", 0, False, [], ()),
    ("unrestricted fs, network restricted", "SIGSYS", 159, True, [], ()),
    (
        "external, network restricted",
        "writes",
        0,
        False,
        ["CODEX_OK", "GIT_OK", "LINK_OK", "LNGIT_OK", "MVGIT_OK", "OUT_OK", "WS_OK"],
        (),
    ),
    ("external, network restricted", "reads", 0, False, ["LS_OK", "SECRET_OK", "SFILE_OK"], ()),
    ("external, network restricted", "net", 1, True, [], ("Operation not permitted",)),
    ("external, network restricted", "touch outside", 0, False, [], ()),
    ("external, network restricted", "SIGSYS", 159, True, [], ()),
    (
        "disabled",
        "writes",
        0,
        False,
        ["CODEX_OK", "GIT_OK", "LINK_OK", "LNGIT_OK", "MVGIT_OK", "OUT_OK", "WS_OK"],
        (),
    ),
    ("disabled", "reads", 0, False, ["LS_OK", "SECRET_OK", "SFILE_OK"], ()),
    ("disabled", "net", 0, False, ["CONNECTED"], ()),
    ("disabled", "touch outside", 0, False, [], ()),
    ("disabled", "SIGSYS", 159, True, [], ()),
]


@pytest.mark.parametrize(
    ("policy", "command", "exit_code", "denied", "expected_markers", "texts"),
    RECORDED,
    ids=[f"{r[0]}-{r[1]}" for r in RECORDED],
)
async def test_matrix_case_matches_recorded_reference_outcome(
    tmp_path: Path,
    policy: str,
    command: str,
    exit_code: int,
    denied: bool,
    expected_markers: list[str],
    texts: tuple[str, ...],
) -> None:
    tree = make_tree(tmp_path)
    with tcp_listener() as port:
        sandbox = context_json(
            policies(tree)[policy], cwd=uri(tree.ws), workspaceRoots=[uri(tree.ws)]
        )
        argv = ["bash", "-c", commands(tree, port)[command]]
        plan = plan_process_launch(
            decode_sandbox_context(sandbox),
            argv=argv,
            cwd=str(tree.ws),
            env=child_env(tree),
            tty=False,
            backend=host_backend(),
        )
        out = await run_plan(plan, tree.ws)
    assert (out.exit_code, out.denied) == (exit_code, denied), out.output
    assert sorted(markers(out.output)) == expected_markers, out.output
    assert tuple(t for t in DENIAL_TEXTS if t in out.output) == texts, out.output
