"""benchmarks/server_cgroup.py: a server started through the wrapper runs, with
what it starts (session leaders too), in a CPU cgroup of its own; the cgroup is
gone afterwards, and what a server left behind in it is killed."""

from __future__ import annotations

import os
import subprocess
import time

from benchmarks.server_cgroup import ServerCgroup, cpu_cgroup_of, make_server_cgroup


def test_a_wrapped_server_and_its_session_leading_children_run_in_the_cgroup() -> None:
    cg = make_server_cgroup("test-bench")
    if isinstance(cg, str):
        # Only where cgroups cannot be made: the reason is one readable line.
        assert cg and "\n" not in cg, cg
        return
    assert isinstance(cg, ServerCgroup)
    path = cg.path
    try:
        # A "server" whose child leads a session of its own, as each command does.
        server = subprocess.Popen(
            [*cg.wrapper, "sh", "-c", "setsid sleep 30 & echo $!; wait"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            child = int(server.stdout.readline())
            for pid in (server.pid, child):
                assert cpu_cgroup_of(pid) == "/" + path.name, cpu_cgroup_of(pid)
            assert cpu_cgroup_of(os.getpid()) != cpu_cgroup_of(server.pid)
        finally:
            server.kill()
            server.wait()
            if server.stdout is not None:
                server.stdout.close()
        # The setsid'd sleep outlives its "server": it is what is left behind.
        assert child in [int(p) for p in (path / "cgroup.procs").read_text().split()]
    finally:
        cg.remove(linger_s=0.5)
    assert not path.exists()
    # Killed on the way out (init reaps it).
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
