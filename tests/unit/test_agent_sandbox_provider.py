"""execserver.client.agent_sandbox without a cluster: claim names, the one-line error
when the k8s extra is missing, and that importing the client never imports it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from execserver.client.agent_sandbox import AgentSandboxProvider, claim_name_for

# A process where the k8s extra cannot be imported (as if never installed).
WITHOUT_EXTRA = """
import asyncio, sys
for name in ("k8s_agent_sandbox", "kubernetes_asyncio"):
    sys.modules[name] = None
from execserver.client.agent_sandbox import AgentSandboxProvider, AgentSandboxUnavailable

async def main() -> None:
    provider = AgentSandboxProvider("execserver", kube_api_url="http://127.0.0.1:9")
    try:
        await provider.claim("agent-1")
    except AgentSandboxUnavailable as exc:
        print(exc)
        assert isinstance(exc, ImportError)
    else:
        raise SystemExit("claimed without the extra")

asyncio.run(main())
"""


def test_a_missing_k8s_extra_is_one_line_naming_the_extra() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert line.startswith(
        "the agent-sandbox provider needs the k8s extra (pip install 'execserver[k8s]'): "
    ), line


def test_importing_the_client_does_not_import_kubernetes() -> None:
    code = (
        "import sys, execserver.client, execserver.client.agent_sandbox\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('k8s_agent_sandbox', "
        "'kubernetes')))\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("key", ["conversation-42", "Task #7 / ünïcode", "", "x" * 500])
def test_claim_names_are_stable_dns_labels(key: str) -> None:
    name = claim_name_for(key)
    assert name == claim_name_for(key)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63
    assert name != claim_name_for(key + "!")
    assert claim_name_for(key, "agents").startswith("agents-")


@pytest.mark.parametrize("prefix", ["Upper", "-dash", "x" * 60, ""])
def test_a_bad_claim_prefix_is_refused_when_the_provider_is_made(prefix: str) -> None:
    with pytest.raises(ValueError, match="DNS-1123"):
        AgentSandboxProvider("execserver", claim_prefix=prefix)


def test_one_way_to_the_api_server() -> None:
    with pytest.raises(ValueError, match="not both"):
        AgentSandboxProvider("execserver", api_client=object(), kube_api_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="warm pool"):
        AgentSandboxProvider("")


def test_the_usage_in_docs_scale_out_names_what_exists() -> None:
    """The block needs a cluster to run; here it is compiled, its imports run, and
    every provider method it calls exists."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "scale-out.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    compile(block, "docs/scale-out.md", "exec")
    imports = "\n".join(line for line in block.splitlines() if line.startswith(("from", "import")))
    exec(compile(imports, "docs/scale-out.md", "exec"), {})
    for method in set(re.findall(r"provider\.(\w+)\(", block)):
        assert callable(getattr(AgentSandboxProvider, method)), method
    assert set(re.findall(r"provider\.(\w+)\(", block)) == {"client", "environment", "release"}
