"""Per-process resource limits: every started process tree in its own cgroup.

``cgroups`` finds what the host delegates to the daemon (cgroup v2, or the v1
memory/pids/cpu hierarchies), creates one cgroup per process tree with the
configured limits, places the child in it before it execs, and reads back
its peak memory, CPU time and limit events; the cgroup is also the tree kill.
"""

from execserver.containment.cgroups import (
    CgroupUsage,
    ContainmentError,
    ProcessCgroup,
    ProcessCgroups,
    active,
    contained_helper,
    describe_host,
    open_process_cgroups,
    parse_size,
)

__all__ = [
    "CgroupUsage",
    "ContainmentError",
    "ProcessCgroup",
    "ProcessCgroups",
    "active",
    "contained_helper",
    "describe_host",
    "open_process_cgroups",
    "parse_size",
]
