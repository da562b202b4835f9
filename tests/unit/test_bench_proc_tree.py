"""benchmarks/proc_tree.py: the scale benchmark's sampler counts a server's own
processes (the agents' commands left out) with their RSS and fds, as psutil
would, from the server's subtree of /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from benchmarks.proc_tree import niced_executor, sample_tree


def test_the_tree_is_counted_without_the_named_commands() -> None:
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    command = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.3)  # both exec'd
        sample = sample_tree(os.getpid(), frozenset({"sleep"}))
        mine = [psutil.Process(), psutil.Process(helper.pid)]
        assert sample["processes"] == 2
        assert sample["fds"] == sum(p.num_fds() for p in mine)
        assert sample["root_fds"] == mine[0].num_fds()
        # RSS moves between two reads; the helper's share is what must be there.
        helper_rss = mine[1].memory_info().rss / 1e6
        assert abs(sample["rss_MB"] - sample["root_rss_MB"] - helper_rss) < 1.0
        counted_all = sample_tree(os.getpid(), frozenset())
        assert counted_all["processes"] == 3
    finally:
        for child in (helper, command):
            child.kill()
            child.wait()


def test_the_sampler_thread_runs_at_the_nice_it_was_given() -> None:
    # Linux keeps a nice value per thread: the caller's own stays as it was.
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    with niced_executor(7) as sampler:
        nice = sampler.submit(lambda: os.getpriority(os.PRIO_PROCESS, 0)).result()
    assert os.getpriority(os.PRIO_PROCESS, 0) == caller
    # 7, unless the caller was nicer already and may not lower it.
    assert nice == 7 or (nice == caller > 7)
