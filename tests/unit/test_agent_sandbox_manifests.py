"""deploy/k8s/agent-sandbox/: the custom resources pass scripts/validate_crs.py against
the vendored CRDs, broken copies of them fail it, and the SandboxTemplate's pod keeps
the devbox pod's security choices with a command line our CLI accepts."""

from __future__ import annotations

import posixpath
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from execserver.cli import build_parser, config_from_args
from execserver.config import ServerConfig
from execserver.server import auth
from execserver.server.listen import parse_listen
from scripts import validate_crs

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "k8s" / "agent-sandbox"
CRDS = ROOT / "deploy" / "vendor" / "agent-sandbox-crds"
SCRIPT = ROOT / "scripts" / "validate_crs.py"
LINT_PYTHON = ROOT / ".venv-lint" / "bin" / "python"
COMMIT = "2fd412d55ecae90861a101a5424a75473de97c36"


def shipped() -> list[Path]:
    return sorted(p for p in FOLDER.glob("*.yaml") if p.name != "kustomization.yaml")


def load(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((FOLDER / name).read_text()) if d]
    assert isinstance(doc, dict)
    return doc


def broken_copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (FOLDER / name).read_text()
    assert old in text, old  # the edit must hit, or the test proves nothing
    target = tmp_path / name
    target.write_text(text.replace(old, new, 1))
    return target


def problems_of(path: Path) -> list[str]:
    return [str(p) for p in validate_crs.run([path], CRDS)]


# ---- the validator ---------------------------------------------------------------


def test_the_shipped_manifests_are_valid_against_the_crds() -> None:
    assert {p.name for p in shipped()} == {
        "sandboxtemplate.yaml",
        "sandboxwarmpool.yaml",
        "sandboxclaim-example.yaml",
    }
    assert validate_crs.run(shipped(), CRDS) == []


@pytest.mark.parametrize(
    ("name", "old", "new", "expected"),
    [
        # A typo the API server would silently prune: the pod would run masked.
        (
            "sandboxtemplate.yaml",
            "            procMount: Unmasked",
            "            procMnt: Unmasked",
            "spec.podTemplate.spec.containers[0].securityContext: unknown field 'procMnt'",
        ),
        (
            "sandboxtemplate.yaml",
            "      hostUsers: false",
            '      hostUsers: "no"',
            "spec.podTemplate.spec.hostUsers: 'no' is not of type 'boolean'",
        ),
        (
            "sandboxtemplate.yaml",
            "  networkPolicyManagement: Managed",
            "  networkPolicyManagement: Sometimes",
            "spec.networkPolicyManagement: 'Sometimes' is not one of",
        ),
        (
            "sandboxtemplate.yaml",
            "  podTemplate:\n",
            "  podTmpl:\n",
            "at spec: 'podTemplate' is a required property",
        ),
        (
            "sandboxwarmpool.yaml",
            "replicas: 2",
            "replicas: -1",
            "spec.replicas: -1 is less than the minimum of 0",
        ),
        (
            "sandboxwarmpool.yaml",
            "replicas: 2",
            "replicas: 4294967296",
            "spec.replicas: 4294967296 is not a valid int32",
        ),
        (
            "sandboxclaim-example.yaml",
            "warmPoolRef:",
            "warmPool:",
            "at spec: 'warmPoolRef' is a required property",
        ),
        (
            "sandboxclaim-example.yaml",
            '"2030-01-01T00:00:00Z"',
            '"2030-01-01 noon"',
            "spec.lifecycle.shutdownTime: '2030-01-01 noon' is not a valid date-time",
        ),
        (
            "sandboxclaim-example.yaml",
            "apiVersion: extensions.agents.x-k8s.io/v1beta1",
            "apiVersion: extensions.agents.x-k8s.io/v9",
            "no served CRD for apiVersion 'extensions.agents.x-k8s.io/v9' kind 'SandboxClaim'",
        ),
        (
            "sandboxclaim-example.yaml",
            "name: agent-42",
            "name: Agent_42",
            "metadata.name 'Agent_42' is not a DNS-1123 subdomain",
        ),
    ],
)
def test_a_broken_manifest_fails_naming_the_field(
    tmp_path: Path, name: str, old: str, new: str, expected: str
) -> None:
    problems = problems_of(broken_copy(tmp_path, name, old, new))
    assert any(expected in p for p in problems), problems


def test_the_command_line_prints_one_line_per_problem_and_exits_1(tmp_path: Path) -> None:
    broken = broken_copy(
        tmp_path,
        "sandboxtemplate.yaml",
        "            procMount: Unmasked",
        "            procMnt: x",
    )
    good = FOLDER / "sandboxwarmpool.yaml"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--crds", str(CRDS), str(good), str(broken)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines == [
        f"validate-crs: {broken}: SandboxTemplate/execserver: at "
        "spec.podTemplate.spec.containers[0].securityContext: unknown field 'procMnt'"
    ]
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--crds", "{tmp}/none", "{folder}/sandboxwarmpool.yaml"], "no CRD files"),
        (["--crds", "{crds}", "{tmp}/missing.yaml"], "missing.yaml: No such file"),
        (["--crds", "{crds}", "{tmp}/bad.yaml"], "bad.yaml: not YAML"),
    ],
)
def test_when_it_cannot_check_it_says_why_in_one_line(
    tmp_path: Path, args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The script's main, in this process: a process of its own would load the CRD
    schemas again (~1.7 s of CPU each; this process has them already). The test above
    runs it as a program."""
    (tmp_path / "bad.yaml").write_text("kind: [unclosed\n")
    argv = [a.format(tmp=tmp_path, folder=FOLDER, crds=CRDS) for a in args]
    status = validate_crs.main(argv)
    out, err = capsys.readouterr()
    assert status == 2
    (line,) = err.splitlines()
    assert line.startswith("validate-crs: ") and expected in line, line
    assert out == ""


@pytest.mark.skipif(not LINT_PYTHON.exists(), reason="needs .venv-lint (made by make lint-deploy)")
def test_the_embedded_pod_is_checked_against_the_kubernetes_schema(tmp_path: Path) -> None:
    """hostnameOverride is in the CRD's copy of the pod schema (newer than 1.33) but
    not in 1.33's: only the kubernetes-validate half of the check can catch it."""
    broken = broken_copy(
        tmp_path,
        "sandboxtemplate.yaml",
        "      enableServiceLinks: false\n",
        "      enableServiceLinks: false\n      hostnameOverride: agent\n",
    )
    assert problems_of(broken) == []  # the CRD schema alone lets it through
    # Under a name of its own, so the shipped file's pod keeps its own in pods_out.
    broken = broken.rename(tmp_path / "broken-sandboxtemplate.yaml")
    shipped_template = FOLDER / "sandboxtemplate.yaml"
    pods = tmp_path / "pods"
    # One run checks both files: each run loads the Kubernetes and the CRD schemas
    # anew (~2.5 s of CPU), and the script reports every file's problems.
    result = subprocess.run(
        [str(LINT_PYTHON), str(SCRIPT), "--crds", str(CRDS), "--kubernetes-version",
         "1.33.0", "--pods-out", str(pods), str(broken), str(shipped_template)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    # The broken copy's problem, and none of the shipped file's.
    assert lines, result.stderr
    assert all(line.startswith(f"validate-crs: {broken}: ") for line in lines), lines
    assert "spec.podTemplate: at spec: " in result.stderr
    assert "'hostnameOverride' was unexpected" in result.stderr
    # What checkov gets: the pod with the resource's skips, and its NetworkPolicy.
    pod, policy = yaml.safe_load_all((pods / "sandboxtemplate-0.yaml").read_text())
    assert pod["kind"] == "Pod" and policy["kind"] == "NetworkPolicy"
    assert any("CKV_K8S_31=" in v for v in pod["metadata"]["annotations"].values())
    assert policy["spec"]["podSelector"]["matchLabels"] == pod["metadata"]["labels"]


# ---- what the resources say --------------------------------------------------------


def serve_config(container: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> ServerConfig:
    """``execserver serve ARGS`` as the container runs it, through every start-up
    check that reads no file."""
    env = {e["name"]: e["value"] for e in container["env"]}
    monkeypatch.setenv("EXECSERVER_LISTEN", env["EXECSERVER_LISTEN"])
    config = config_from_args(build_parser().parse_args(["serve", *container["args"]]))
    auth.validate_flags(config.ws_auth)
    auth.check_exposure(config, parse_listen(config.listen))
    return config


def test_the_pod_keeps_the_devbox_security_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    template = load("sandboxtemplate.yaml")
    pod = template["spec"]["podTemplate"]["spec"]
    devbox = next(
        d
        for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "devbox.yaml").read_text())
        if d and d["kind"] == "StatefulSet"
    )["spec"]["template"]["spec"]
    for key in ("hostUsers", "securityContext", "automountServiceAccountToken"):
        assert pod[key] == devbox[key], key
    assert pod["hostUsers"] is False
    assert pod["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "profiles/execserver.json",
    }
    (container,) = pod["containers"]
    assert container["name"] == "execserver"
    sc = container["securityContext"]
    assert sc == devbox["containers"][0]["securityContext"]
    assert sc["procMount"] == "Unmasked" and sc["capabilities"] == {"drop": ["ALL"]}
    config = serve_config(container, monkeypatch)
    assert config.ws_auth.mode == auth.CAPABILITY_TOKEN
    assert config.ws_auth.token_file is not None
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    token_volume = mounts[posixpath.dirname(config.ws_auth.token_file)]
    (secret,) = [v for v in pod["volumes"] if v["name"] == token_volume]
    assert secret["secret"]["secretName"] == "execserver-auth"
    assert secret["secret"]["defaultMode"] & 0o040
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    port = parse_listen(config.listen).port
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ws"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"ws": port}
    # The claim volumes the mounts name are the template's own volumeClaimTemplates.
    claims = {c["metadata"]["name"] for c in template["spec"]["volumeClaimTemplates"]}
    volumes = {v["name"] for v in pod["volumes"]}
    assert set(mounts.values()) == claims | volumes and not claims & volumes
    assert config.audit_log is not None and mounts[posixpath.dirname(config.audit_log)] in claims
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop + config.drain_timeout_s + 10 <= pod["terminationGracePeriodSeconds"]
    # The Service the client connects to, and the ingress port the policy opens.
    assert template["spec"]["service"] is True
    rules = template["spec"]["networkPolicy"]["ingress"]
    assert {p["port"] for rule in rules for p in rule["ports"]} == {port}


def test_claim_pool_and_template_name_each_other() -> None:
    template, pool, claim = (
        load("sandboxtemplate.yaml"),
        load("sandboxwarmpool.yaml"),
        load("sandboxclaim-example.yaml"),
    )
    assert pool["spec"]["sandboxTemplateRef"]["name"] == template["metadata"]["name"]
    assert claim["spec"]["warmPoolRef"]["name"] == pool["metadata"]["name"]
    kustomization = yaml.safe_load((FOLDER / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["sandboxtemplate.yaml", "sandboxwarmpool.yaml"]
    for path in shipped():
        assert "Pod Security Standards:" in path.read_text(), path.name


def test_the_vendored_crds_name_their_origin_and_nothing_points_outside_the_clone() -> None:
    readme = (CRDS / "README.md").read_text()
    assert "kubernetes-sigs/agent-sandbox" in readme and COMMIT in readme
    assert "Apache License 2.0" in readme
    kinds = set()
    for path in CRDS.glob("*.yaml"):
        # libyaml's loader when there is one, as the script's: the pure-Python one
        # takes ~1.7 s of CPU over these 800 KB.
        (crd,) = yaml.load_all(path.read_text(), Loader=validate_crs.SAFE_LOADER)
        kinds.add(crd["spec"]["names"]["kind"])
    assert kinds == {"Sandbox", "SandboxTemplate", "SandboxClaim", "SandboxWarmPool"}
    ours = [
        *FOLDER.iterdir(),
        *CRDS.iterdir(),
        SCRIPT,
        ROOT / "docs" / "scale-out.md",
        ROOT / "execserver" / "client" / "agent_sandbox.py",
    ]
    for path in ours:
        if path.exists():
            text = path.read_text()
            # Spelled in two parts so this file does not match a search for them either.
            assert not any(f"{a}shared" in text for a in ("../", "/work/")), path
