"""benchmarks/proc_tree.py: the scale benchmark's sampler counts a server's own
processes (the agents' commands left out) with their RSS and fds, as psutil
would, from the server's subtree of /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from benchmarks.proc_tree import memory_tree, niced_executor, sample_tree


def test_the_tree_is_counted_without_the_named_commands() -> None:
    # A root of its own (the test's process may have other children: a worker's
    # shared daemon): a python child, and a `sleep` to be left out.
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "subprocess.Popen(['sleep', '30'])\n"
        "time.sleep(30)\n"
    )
    root = subprocess.Popen([sys.executable, "-c", script])
    try:
        tree = psutil.Process(root.pid)
        deadline = time.monotonic() + 10
        exec_d = [["sleep", "30"], [sys.executable, "-c", "import time; time.sleep(30)"]]
        while sorted(c.cmdline() for c in tree.children()) != sorted(exec_d):  # both exec'd
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sample = sample_tree(root.pid, frozenset({"sleep"}))
        mine = [tree, *(c for c in tree.children() if c.name() != "sleep")]
        assert sample["processes"] == 2
        assert sample["fds"] == sum(p.num_fds() for p in mine)
        assert sample["root_fds"] == tree.num_fds()
        # RSS moves between two reads; the child's share is what must be there.
        child_rss = mine[1].memory_info().rss / 1e6
        assert abs(sample["rss_MB"] - sample["root_rss_MB"] - child_rss) < 1.0
        assert sample_tree(root.pid, frozenset())["processes"] == 3
        # Two interpreters share their program's pages: PSS splits them, RSS
        # counts them in each; the left-out `sleep` counts in neither.
        memory = memory_tree(root.pid, frozenset({"sleep"}))
        assert 0 < memory["pss_MB"] < memory["rss_MB"]
        assert abs(memory["rss_MB"] - sample_tree(root.pid, frozenset({"sleep"}))["rss_MB"]) < 1.0
        assert memory["pss_MB"] < memory_tree(root.pid, frozenset())["pss_MB"]
    finally:
        for child in tree.children():
            child.kill()
        root.kill()
        root.wait()


def test_the_sampler_thread_runs_at_the_nice_it_was_given() -> None:
    # Linux keeps a nice value per thread: the caller's own stays as it was.
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    with niced_executor(7) as sampler:
        nice = sampler.submit(lambda: os.getpriority(os.PRIO_PROCESS, 0)).result()
    assert os.getpriority(os.PRIO_PROCESS, 0) == caller
    # 7, unless the caller was nicer already and may not lower it.
    assert nice == 7 or (nice == caller > 7)
