"""Launch plans under the real bwrap + seccomp backend: each policy case of
the table measured on the reference and the escape attempts below, with the exact
outcomes the reference showed (exit code, sandboxDenied, EROFS/EACCES texts)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
from pathlib import Path

import pytest

from execserver.sandbox import is_sandbox_denied, plan_process_launch
from execserver.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from execserver.wire.sandbox import FileSystemSandboxContext
from tests.support.sandbox import (
    MINIMAL_READ,
    ROOT_READ,
    child_env,
    context,
    entry,
    host_backend,
    make_tree,
    managed,
    run_plan,
    run_sandboxed,
    special,
    tcp_listener,
    uri,
    without_user_namespaces,
)


def test_host_backend_is_bwrap() -> None:
    # Everything below assumes the primary backend; bwrap must work on CI hosts.
    backend = host_backend()
    assert backend.kind == "bwrap", backend.describe()


def workspace_write(
    ws: Path, *extra: dict[str, object], network: str = "restricted"
) -> FileSystemSandboxContext:
    return context(managed([ROOT_READ, entry(ws, "write"), *extra], network=network))


async def test_read_only_policy_denies_every_write_with_erofs(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    out = await run_sandboxed(context(managed([ROOT_READ])), f"echo x > {tree.ws}/f", tree)
    assert out.exit_code == 1
    assert f"{tree.ws}/f: Read-only file system" in out.output
    assert out.denied is True
    assert not (tree.ws / "f").exists()


async def test_write_inside_writable_root_succeeds_and_outside_fails(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    out = await run_sandboxed(
        workspace_write(tree.ws),
        f"echo in > {tree.ws}/inside && echo x > {tree.outside}/o",
        tree,
    )
    assert (tree.ws / "inside").read_text() == "in\n"
    assert out.exit_code == 1 and out.denied is True
    assert "Read-only file system" in out.output
    assert not (tree.outside / "o").exists()


async def test_symlink_leaving_the_root_does_not_widen_the_grant(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    out = await run_sandboxed(workspace_write(tree.ws), f"echo x > {tree.ws}/link_out/l", tree)
    assert out.exit_code == 1 and "Read-only file system" in out.output
    assert list(tree.outside.iterdir()) == []


async def test_git_inside_writable_root_is_read_only(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    script = (
        f"echo evil > {tree.ws}/.git/HEAD; "
        f"echo x > {tree.ws}/.git/new; "
        f"echo y > {tree.ws}/f && mv {tree.ws}/f {tree.ws}/.git/f; "
        f"ln {tree.ws}/f {tree.ws}/.git/hard; "
        f"rm -rf {tree.ws}/.git; "
        f"mv {tree.ws}/.git {tree.ws}/moved; true"
    )
    out = await run_sandboxed(workspace_write(tree.ws), script, tree)
    assert out.exit_code == 0
    assert (tree.ws / ".git" / "HEAD").read_text() == "ref\n"
    assert sorted(p.name for p in (tree.ws / ".git").iterdir()) == ["HEAD"]
    assert not (tree.ws / "moved").exists()
    assert "Read-only file system" in out.output


async def test_missing_protected_names_cannot_be_created_and_leave_no_trace(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    script = (
        f"mkdir -p {tree.ws}/.codex/x; echo k > {tree.ws}/.aws/credentials; "
        f"touch {tree.ws}/.agents/a; ls -a {tree.ws}"
    )
    out = await run_sandboxed(workspace_write(tree.ws), script, tree)
    assert out.output.count("Read-only file system") == 3
    for name in (".codex", ".aws", ".agents"):
        assert name in out.output.split()  # visible inside as read-only mount points
        assert not (tree.ws / name).exists()  # and removed from the host afterwards


async def test_synthetic_mount_points_survive_until_the_last_sandbox_exits(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    ctx = workspace_write(tree.ws)
    env = child_env(tree)
    first = plan_process_launch(
        ctx, argv=["sleep", "0"], cwd=str(tree.ws), env=env, tty=False, backend=host_backend()
    )
    second = plan_process_launch(
        ctx,
        argv=["bash", "-c", f"mkdir {tree.ws}/.codex/x"],
        cwd=str(tree.ws),
        env=env,
        tty=False,
        backend=host_backend(),
    )
    # While the second plan is alive, the first one's exit must not remove .codex.
    out1 = await run_plan(first, tree.ws)
    assert out1.exit_code == 0
    assert (tree.ws / ".codex").is_dir()
    out2 = await run_plan(second, tree.ws)
    assert out2.exit_code == 1 and "Read-only file system" in out2.output
    assert not (tree.ws / ".codex").exists()


async def test_git_symlink_inside_writable_root_is_refused(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    (tree.ws / ".codex").symlink_to(tree.outside)
    with pytest.raises(RpcError) as info:
        plan_process_launch(
            workspace_write(tree.ws),
            argv=["true"],
            cwd=str(tree.ws),
            env=child_env(tree),
            tty=False,
            backend=host_backend(),
        )
    assert info.value.code == INTERNAL_ERROR
    assert "symlink" in info.value.message


async def test_read_entry_inside_writable_root_is_a_read_only_carve_out(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    (tree.ws / "ro").mkdir()
    ctx = workspace_write(tree.ws, entry(tree.ws / "ro", "read"))
    out = await run_sandboxed(ctx, f"echo a > {tree.ws}/ok; echo b > {tree.ws}/ro/no", tree)
    assert (tree.ws / "ok").exists()
    assert not (tree.ws / "ro" / "no").exists()
    assert out.exit_code == 1 and "Read-only file system" in out.output


async def test_deny_read_directory_and_file_give_eacces(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = workspace_write(tree.ws, entry(tree.secret, "none"), entry(tree.secret_file, "deny"))
    out = await run_sandboxed(ctx, f"cat {tree.secret}/s.txt; cat {tree.secret_file}", tree)
    assert f"cat: {tree.secret}/s.txt: Permission denied" in out.output
    assert f"cat: {tree.secret_file}: Permission denied" in out.output
    assert "SECRET" not in out.output
    assert out.exit_code == 1 and out.denied is True


async def test_deny_glob_pattern_masks_matching_files(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    (tree.outside / "a.pem").write_text("KEY\n")
    (tree.outside / "b.txt").write_text("PUBLIC\n")
    glob = {"type": "glob_pattern", "pattern": f"{tree.outside}/*.pem"}
    ctx = workspace_write(tree.ws, entry(glob, "deny"))
    out = await run_sandboxed(ctx, f"cat {tree.outside}/b.txt {tree.outside}/a.pem", tree)
    assert "PUBLIC" in out.output and "KEY" not in out.output
    assert "Permission denied" in out.output


async def test_minimal_read_hides_unlisted_paths(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(managed([MINIMAL_READ, entry(tree.ws, "write")]))
    out = await run_sandboxed(ctx, f"ls {tree.outside}; echo ok > {tree.ws}/w", tree)
    assert "No such file or directory" in out.output
    assert (tree.ws / "w").read_text() == "ok\n"
    assert out.exit_code == 0 and out.denied is False


async def test_restricted_network_denies_sockets_and_loopback(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    with tcp_listener() as port:
        script = (
            f'{sys.executable} -c "import socket; s=socket.socket(); '
            f"s.connect(('127.0.0.1',{port})); print('CONNECTED')\""
        )
        out = await run_sandboxed(workspace_write(tree.ws), script, tree)
    assert "PermissionError: [Errno 1] Operation not permitted" in out.output
    assert "CONNECTED" not in out.output
    assert out.exit_code == 1 and out.denied is True


async def test_enabled_network_reaches_host_loopback(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    with tcp_listener() as port:
        script = (
            f'{sys.executable} -c "import socket; s=socket.socket(); '
            f"s.connect(('127.0.0.1',{port})); print('CONNECTED')\""
        )
        out = await run_sandboxed(workspace_write(tree.ws, network="enabled"), script, tree)
    assert "CONNECTED" in out.output and out.exit_code == 0


async def test_unix_socketpair_still_works_under_restricted_network(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    script = (
        f'{sys.executable} -c "import socket; a,b=socket.socketpair(); '
        "a.sendmsg([b'hi']); print(b.recv(2).decode() + '_OK')\""
    )
    out = await run_sandboxed(workspace_write(tree.ws), script, tree)
    assert "hi_OK" in out.output


async def test_ptrace_of_a_sibling_is_denied(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    script = (
        "sleep 30 & victim=$!; "
        f'{sys.executable} -c "'
        "import ctypes,sys; libc=ctypes.CDLL(None, use_errno=True); "
        "r=libc.ptrace(16, int(sys.argv[1]), 0, 0); "
        "print('PTRACE_OK' if r == 0 else 'PTRACE_FAIL errno=%d' % ctypes.get_errno())\" $victim; "
        "kill $victim"
    )
    out = await run_sandboxed(workspace_write(tree.ws), script, tree)
    assert "PTRACE_FAIL errno=1" in out.output


async def test_sandbox_sets_no_new_privs_and_a_seccomp_filter(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    for ctx in (
        workspace_write(tree.ws),
        context({"type": "external", "network": "enabled"}),
    ):
        out = await run_sandboxed(ctx, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status", tree)
        assert "NoNewPrivs:\t1" in out.output
        assert "Seccomp:\t2" in out.output


async def test_no_namespace_escape_inside_the_sandbox(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    out = await run_sandboxed(
        workspace_write(tree.ws), "unshare -r true && echo UNSHARE_OK || echo UNSHARE_FAIL", tree
    )
    assert "UNSHARE_FAIL" in out.output


@pytest.mark.parametrize(
    ("permissions", "network_ok"),
    [
        ({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "enabled"}, True),
        (
            {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"},
            False,
        ),
        ({"type": "external", "network": "restricted"}, False),
        ({"type": "external", "network": "enabled"}, True),
        ({"type": "disabled"}, True),
    ],
)
async def test_unrestricted_shapes_write_anywhere(
    tmp_path: Path, permissions: dict[str, object], network_ok: bool
) -> None:
    tree = make_tree(tmp_path)
    script = (
        f"echo x > {tree.outside}/o && echo OUT_OK; "
        f"{sys.executable} -c 'import socket; socket.socket(); print(\"SOCK_OK\")'"
    )
    out = await run_sandboxed(context(permissions), script, tree)
    assert (tree.outside / "o").exists()
    assert ("SOCK_OK" in out.output) is network_ok
    assert out.plan.sandbox_type == "linuxSeccomp"


async def test_cwd_entry_resolves_to_workspace_roots_not_cwd(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    cwd_write = entry(special("current_working_directory"), "write")
    only_cwd = context(managed([ROOT_READ, cwd_write]), cwd=uri(tree.ws))
    with_roots = context(
        managed([ROOT_READ, cwd_write]), cwd=uri(tree.ws), workspaceRoots=[uri(tree.outside)]
    )
    script = f"echo x > {tree.ws}/a; echo x > {tree.outside}/b; true"
    await run_sandboxed(only_cwd, script, tree)
    assert not (tree.ws / "a").exists() and not (tree.outside / "b").exists()
    await run_sandboxed(with_roots, script, tree)
    assert not (tree.ws / "a").exists() and (tree.outside / "b").exists()


async def test_policy_context_overrides_flat_workspace_roots(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    ctx = context(
        managed([ROOT_READ, entry(special("project_roots"), "write")]),
        workspaceRoots=[uri(tree.ws)],
        policyContext={"workspaceRoots": [uri(tree.outside)]},
    )
    await run_sandboxed(ctx, f"echo x > {tree.ws}/a; echo x > {tree.outside}/b; true", tree)
    assert not (tree.ws / "a").exists() and (tree.outside / "b").exists()


async def test_writable_root_given_through_a_symlink_is_bound_at_its_target(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    alias = tree.base / "alias"
    alias.symlink_to(tree.ws)
    out = await run_sandboxed(
        context(managed([ROOT_READ, entry(alias, "write")])), f"echo x > {alias}/via", tree
    )
    assert out.exit_code == 0 and (tree.ws / "via").exists()


async def test_missing_program_fails_like_the_reference_helper(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    plan = plan_process_launch(
        context(managed([ROOT_READ])),
        argv=["no-such-program-xyz"],
        cwd=str(tree.ws),
        env=child_env(tree),
        tty=False,
        backend=host_backend(),
    )
    out = await run_plan(plan, tree.ws)
    assert out.exit_code == 101 and out.denied is True
    assert "No such file or directory (os error 2)" in out.output


async def test_program_found_on_server_path_when_env_has_none(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    plan = plan_process_launch(
        context(managed([ROOT_READ])),
        argv=["echo", "hi"],
        cwd=str(tree.ws),
        env={},
        tty=False,
        backend=host_backend(),
    )
    out = await run_plan(plan, tree.ws)
    assert out.exit_code == 0 and out.output == "hi\n"


async def test_namespace_setup_failure_is_told_apart_from_command_failure(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    ctx = workspace_write(tree.ws)
    env = child_env(tree)
    # Same plan, but bwrap runs where namespaces are refused: the command never runs.
    failed = plan_process_launch(
        ctx,
        argv=["bash", "-c", f"echo ran > {tree.ws}/ran"],
        cwd=str(tree.ws),
        env=env,
        tty=False,
        backend=host_backend(),
    )
    failed = dataclasses.replace(failed, argv=without_user_namespaces(failed.argv))
    out = await run_plan(failed, tree.ws)
    assert out.exit_code == 1 and failed.setup_failed() is True
    assert not (tree.ws / "ran").exists()
    assert out.denied is False  # as the reference: "No permissions to create new namespace"
    ok = plan_process_launch(
        ctx, argv=["false"], cwd=str(tree.ws), env=env, tty=False, backend=host_backend()
    )
    out = await run_plan(ok, tree.ws)
    assert out.exit_code == 1 and ok.setup_failed() is False


async def test_dynamic_entries_without_any_cwd_fall_back_to_the_process_cwd(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    glob = {"type": "glob_pattern", "pattern": "*.pem"}
    (tree.ws / "k.pem").write_text("KEY\n")
    ctx = context(managed([ROOT_READ, entry(glob, "deny")]))
    out = await run_sandboxed(ctx, "cat k.pem", tree, cwd=tree.ws)
    assert "Permission denied" in out.output and "KEY" not in out.output


def test_plan_rejects_empty_argv(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    with pytest.raises(RpcError) as info:
        plan_process_launch(
            context(managed([ROOT_READ])),
            argv=[],
            cwd=str(tree.ws),
            env={},
            tty=False,
            backend=host_backend(),
        )
    assert info.value.code == INVALID_PARAMS


def _open_files() -> dict[str, str]:
    """fd -> what it is (``pipe:[inode]``, a path...) for this process's open fds."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own fd, gone
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


def test_plan_close_releases_fds_even_when_never_spawned(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    before = _open_files()
    plan = plan_process_launch(
        workspace_write(tree.ws),
        argv=["true"],
        cwd=str(tree.ws),
        env={},
        tty=False,
        backend=host_backend(),
    )
    assert plan.pass_fds
    # What the plan opened (compared by what each is, not by number: another
    # test's thread in this worker may open and close fds meanwhile).
    opened = {what for fd, what in _open_files().items() if before.get(fd) != what}
    assert opened
    plan.close()
    assert plan.wait_released(10)
    assert not opened & set(_open_files().values())
    assert not (tree.ws / ".codex").exists()


async def test_tty_command_runs_inside_the_sandbox_without_controlling_terminal(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    master, slave = os.openpty()
    plan = plan_process_launch(
        workspace_write(tree.ws),
        argv=["bash", "-c", f"test -t 1 && echo IS_TTY; echo x > {tree.outside}/o"],
        cwd=str(tree.ws),
        env=child_env(tree),
        tty=True,
        backend=host_backend(),
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            *plan.argv,
            env=plan.env,
            pass_fds=plan.pass_fds,
            cwd=str(tree.ws),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
    finally:
        plan.close()
        os.close(slave)
    code = await proc.wait()
    output = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the slave side is closed and drained
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    text = output.decode(errors="replace")
    assert "IS_TTY" in text
    assert "Read-only file system" in text
    assert code == 1 and is_sandbox_denied(code, output)


async def test_writable_file_and_grant_inside_denied_dir_do_not_break_setup(
    tmp_path: Path,
) -> None:
    tree = make_tree(tmp_path)
    (tree.secret / "open").mkdir()
    single = tree.outside / "single.txt"
    single.write_text("")
    ctx = context(
        managed(
            [
                ROOT_READ,
                entry(single, "write"),
                entry(tree.secret, "deny"),
                entry(tree.secret / "open", "write"),
            ]
        )
    )
    out = await run_sandboxed(ctx, f"echo w > {single}; cat {tree.secret}/s.txt", tree)
    assert out.plan.setup_failed() is False, out.output
    assert single.read_text() == "w\n"
    assert "Permission denied" in out.output and "TOPSECRET" not in out.output
