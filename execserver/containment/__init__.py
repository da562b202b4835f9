"""Per-process resource limits: every started process tree in its own cgroup.

One job per module, as opencontainers/cgroups splits them:

* ``cgroupfs``: reading and writing cgroupfs files;
* ``host``: what the host delegates to the daemon (cgroup v2, or the v1
  memory/pids/cpu hierarchies), for start-up and ``execserver doctor``;
* ``process_cgroup``: one process tree's cgroup: placement before exec, the
  tree kill, its peak memory, CPU time and limit events, its removal;
* ``factory``: the daemon's factory of those cgroups with the configured
  limits, opened once at start-up (``open_process_cgroups``);
* ``sizes``: the byte sizes the memory limit's flag accepts.
"""

from execserver.containment.factory import (
    ContainmentError,
    ProcessCgroups,
    open_process_cgroups,
)
from execserver.containment.host import describe_host
from execserver.containment.process_cgroup import CgroupUsage, Placement, ProcessCgroup
from execserver.containment.sizes import parse_size

__all__ = [
    "CgroupUsage",
    "ContainmentError",
    "Placement",
    "ProcessCgroup",
    "ProcessCgroups",
    "describe_host",
    "open_process_cgroups",
    "parse_size",
]
