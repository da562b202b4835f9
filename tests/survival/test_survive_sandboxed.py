"""Sandboxed processes outlive the daemon too (``--state-dir``): bwrap runs under a
keeper, which also holds what the sandbox needs on the host after the daemon is
gone, the read end of bwrap's status pipe and a reference to each mount point
made for a protected name (execserver/sandbox/plan.py ``PlanResources.hand_over``).

* a workspace-write command started in a workspace without ``.git`` (so the
  daemon covers ``ws/.git`` with a tmpfs on a mount point it makes) keeps
  running when the daemon is SIGKILLed; while no daemon of its own runs, another
  daemon's sandbox in the same workspace comes and goes, and the kept command's
  ``.git`` is still protected (the other daemon's last release must not remove a
  mount point the keeper holds: Linux would detach the tmpfs in the kept
  sandbox); the restarted daemon serves its output complete and in order with
  its exit code; once it has ended, the mount point is gone from the workspace.

A process on the daemon's managed network: tests/survival/test_survive_network.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.attacks import ROOT_READ, attack, bash, entry, sandbox
from tests.support.procinfo import wait_until
from tests.support.rpc import connect, unb64
from tests.support.sandbox import uri
from tests.support.servers import start_server
from tests.support.state_dir import (
    free_port,
    keepers,
    kill9,
    living,
    read_until_closed,
    state_daemon,
)

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
TTL = 60.0


async def test_a_sandboxed_process_survives_the_daemon_with_its_protection_and_mount_points(
    state_dir: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    gates = tmp_path / "gates"
    gates.mkdir()
    context = sandbox([ROOT_READ, entry(ws, "write")], cwd=ws)
    # Numbered lines before the crash, then (gated) an attempt on .git while no
    # daemon of its own runs, then more lines, then its exit code.
    script = (
        "for i in $(seq 1 20); do echo line$i; done; "
        f"while [ ! -e {gates}/down ]; do sleep 0.02; done; "
        "mkdir -p .git/hooks 2>/dev/null && echo pwned > .git/hooks/pre-commit; "
        "echo wrote=$?; echo made > kept.txt; "
        f"while [ ! -e {gates}/restarted ]; do sleep 0.02; done; "
        "for i in $(seq 21 40); do echo line$i; done; exit 6"
    )
    port = free_port()
    async with state_daemon(state_dir, port, ttl=TTL) as first:
        async with connect(first.url) as peer:
            session_id = peer.session_id
            await peer.start(
                "kept", bash(script), env=ENV, cwd=uri(ws), sandbox=context, pipeStdin=False
            )
            await peer.wait_output("kept", b"line20\n")
        assert (ws / ".git").is_dir()  # the mount point the daemon made on the host
        assert len(keepers(state_dir)) == 1
        await kill9(first)
    # Another daemon's sandbox in the same workspace starts and ends meanwhile: its
    # last release must leave the mount point the keeper holds.
    async with start_server("execserver") as other, connect(other.url) as bystander:
        done = await attack(bystander, bash("echo bystander"), cwd=ws, context=context)
        assert "bystander" in done.output, done.output
    assert (ws / ".git").is_dir()
    (gates / "down").touch()
    assert await wait_until(lambda: (ws / "kept.txt").exists(), 30)
    assert living(keepers(state_dir)), "the keeper (and its sandbox) died with the daemon"
    async with (
        state_daemon(state_dir, port, ttl=TTL) as second,
        connect(second.url, resume=session_id) as peer,
    ):
        (gates / "restarted").touch()
        chunks, exit_code = await read_until_closed(peer, "kept")
    text = b"".join(unb64(c["chunk"]) for c in chunks).decode()
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith("line")] == [f"line{i}" for i in range(1, 41)]
    wrote = [ln for ln in lines if ln.startswith("wrote=")]
    assert wrote and wrote[0] != "wrote=0", text  # .git stayed protected
    assert not (ws / ".git" / "hooks").exists()
    assert exit_code == 6
    seqs = [c["seq"] for c in chunks]
    assert seqs == sorted(set(seqs)), "duplicated or out of order"
    # Once the sandbox is gone, so is the mount point it needed: the keeper gave
    # back the last reference and removed it, as the daemon would have.
    assert await wait_until(lambda: not (ws / ".git").exists(), 30), "mount point left behind"
