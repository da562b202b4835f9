"""Start-up objects handed from the runner to the services through the kernel."""

from __future__ import annotations

import pytest

from execserver.config import ProcessLimitsConfig, ServerConfig
from execserver.containment import ProcessCgroups
from execserver.kernel import Resources
from execserver.server.runner import build_runtime


class Probe:
    pass


def test_a_provided_object_is_found_by_its_class_and_only_once() -> None:
    resources = Resources()
    probe = Probe()
    assert resources.get(Probe) is None
    resources.provide(Probe, probe)
    assert resources.get(Probe) is probe
    with pytest.raises(ValueError, match="already provided"):
        resources.provide(Probe, Probe())
    assert resources.get(Probe) is probe


def test_a_server_without_process_limits_provides_no_cgroups() -> None:
    runtime = build_runtime(ServerConfig(process_limits=ProcessLimitsConfig()))
    assert runtime.resources.get(ProcessCgroups) is None
