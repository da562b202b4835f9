"""Structural checks of the Dockerfile, the Kubernetes manifests and the systemd unit
(no image build or cluster here): they parse, carry probes, limits and a hardened
securityContext, and their command lines are ones our CLI accepts."""

from __future__ import annotations

import configparser
import json
import posixpath
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from execserver.cli import build_parser, config_from_args
from execserver.config import ServerConfig
from execserver.server import auth
from execserver.server.listen import parse_listen

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
UNIT = ROOT / "deploy" / "systemd" / "execserver.service"


def serve_config(args: list[str]) -> ServerConfig:
    """Parse ``execserver serve ARGS`` and run every start-up check that reads no file."""
    config = config_from_args(build_parser().parse_args(["serve", *args]))
    auth.validate_flags(config.ws_auth)
    address = parse_listen(config.listen)
    auth.check_exposure(config, address)
    return config


# ---- Dockerfile -----------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    lines: list[str] = []
    pending = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    result = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def only(instructions: list[tuple[str, str]], keyword: str) -> list[str]:
    return [rest for kw, rest in instructions if kw == keyword]


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in only(instructions, "ENV"):
        for item in shlex.split(rest):
            key, _, value = item.partition("=")
            env[key] = value
    return env


def test_dockerfile_builds_from_a_replaceable_base_and_runs_as_non_root() -> None:
    ins = dockerfile_instructions()
    bases = only(ins, "FROM")
    assert bases and all(b.startswith("${BASE_IMAGE}") for b in bases)
    (default_base,) = [a for a in only(ins, "ARG") if a.startswith("BASE_IMAGE=")]
    assert default_base.startswith("BASE_IMAGE=docker.io/library/python:3.11-slim")
    users = only(ins, "USER")
    assert users and users[-1].split(":")[0] not in ("0", "root")
    # USER comes before the entrypoint is set: the daemon never runs as root.
    keywords = [kw for kw, _ in ins]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    assert any("bubblewrap" in run for run in only(ins, "RUN"))
    # Installed into a virtualenv under /opt (no system pip), which is on PATH.
    assert dockerfile_env(ins)["PATH"].startswith("/opt/execserver/bin:")


def test_dockerfile_command_is_a_valid_authenticated_serve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ins = dockerfile_instructions()
    entrypoint = json.loads(only(ins, "ENTRYPOINT")[-1])
    cmd = json.loads(only(ins, "CMD")[-1])
    assert entrypoint[-2:] == ["execserver", "serve"]
    # The listen address comes from EXECSERVER_LISTEN, which the HEALTHCHECK reads too.
    assert "--listen" not in cmd
    listen = dockerfile_env(ins)["EXECSERVER_LISTEN"]
    monkeypatch.setenv("EXECSERVER_LISTEN", listen)
    config = serve_config(cmd)
    assert config.listen == listen == "ws://0.0.0.0:8765"
    assert config.ws_auth.mode == auth.CAPABILITY_TOKEN
    assert config.ws_auth.token_file is not None
    assert config.ws_auth.token_file.startswith("/run/secrets/")
    port = parse_listen(config.listen).port
    assert only(ins, "EXPOSE") == [str(port)]
    healthcheck = only(ins, "HEALTHCHECK")[-1]
    assert "8765" not in healthcheck and "EXECSERVER_LISTEN" in healthcheck
    assert "/readyz" in healthcheck


def test_healthcheck_follows_the_listen_setting(tmp_path: Path) -> None:
    """The HEALTHCHECK's program, run against a real daemon on another port."""
    import subprocess
    import sys

    ins = dockerfile_instructions()
    check = json.loads(only(ins, "HEALTHCHECK")[-1].split("CMD", 1)[1])
    assert check[0] == "python3"
    with subprocess.Popen(
        [sys.executable, "-m", "execserver", "serve", "--listen", "ws://127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as daemon:
        try:
            assert daemon.stdout is not None
            url = daemon.stdout.readline().strip()
            env = {"EXECSERVER_LISTEN": url, "PATH": "/usr/bin:/bin"}
            ok = subprocess.run([sys.executable, *check[1:]], env=env, check=False, timeout=30)
            assert ok.returncode == 0
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    # Nothing listens there any more: the same check fails.
    gone = subprocess.run(
        [sys.executable, *check[1:]], env=env, capture_output=True, check=False, timeout=30
    )
    assert gone.returncode != 0


def test_dockerfile_copies_exist_and_dockerignore_keeps_them() -> None:
    ins = dockerfile_instructions()
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv"} <= ignored
    for copy in only(ins, "COPY"):
        if copy.startswith("--from="):
            continue
        *sources, _dest = copy.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert source.rstrip("/") not in ignored, source


# ---- Kubernetes -----------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests() if doc["kind"] == kind]


def pod_specs() -> list[dict[str, Any]]:
    return [
        doc["spec"]["template"]["spec"]
        for doc in manifests()
        if doc["kind"] in ("Deployment", "StatefulSet")
    ]


def execserver_containers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) for every execserver container (plain or native sidecar)."""
    return [
        (pod, container)
        for pod in pod_specs()
        for container in [*pod.get("initContainers", []), *pod["containers"]]
        if container["name"] == "execserver"
    ]


def listen_of(container: dict[str, Any]) -> str:
    env: dict[str, str] = {e["name"]: e["value"] for e in container.get("env", [])}
    return env["EXECSERVER_LISTEN"]


def container_config(container: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> ServerConfig:
    monkeypatch.setenv("EXECSERVER_LISTEN", listen_of(container))
    return serve_config(container["args"])


def test_every_manifest_parses_and_names_its_api() -> None:
    docs = manifests()
    assert {doc["kind"] for doc in docs} >= {
        "StatefulSet",
        "Deployment",
        "Service",
        "NetworkPolicy",
    }
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (K8S / resource).exists()


def test_every_manifest_states_its_pod_security_level() -> None:
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        text = path.read_text()
        assert "Pod Security Standards:" in text, path.name
        if any(
            doc and doc["kind"] in ("Deployment", "StatefulSet") for doc in yaml.safe_load_all(text)
        ):
            # The one field short of "restricted" is said, with the versions it needs.
            assert 'meets "baseline"' in text and "v1.35" in text, path.name
            assert "procMount: Unmasked" in text and "hostUsers: false" in text, path.name


def test_pods_meet_restricted_but_for_the_unmasked_proc_of_a_user_namespaced_pod() -> None:
    """The rules of the "restricted" level that these pod specs could break, but one:
    the execserver container asks for an unmasked /proc (bubblewrap mounts each
    sandbox its own), which is valid only in a user-namespaced pod and which
    "baseline" admits there (policy version >= v1.35)."""
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                       "persistentVolumeClaim", "projected", "secret"}  # fmt: skip
    for pod in pod_specs():
        assert pod["hostUsers"] is False
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            expected = "Unmasked" if container["name"] == "execserver" else None
            assert container["securityContext"].get("procMount") == expected, container["name"]
        pod_sc = pod["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
        seccomp = pod_sc["seccompProfile"]
        assert seccomp == {"type": "Localhost", "localhostProfile": "profiles/execserver.json"}
        for volume in pod.get("volumes", []):
            assert set(volume) - {"name"} <= allowed_volumes, volume
        assert "hostNetwork" not in pod and "hostPID" not in pod
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert "add" not in sc["capabilities"]
            assert not sc.get("privileged", False)
            assert sc.get("seccompProfile", seccomp)["type"] != "Unconfined"
            assert "appArmorProfile" not in sc  # Unconfined would break "baseline"
            assert sc["readOnlyRootFilesystem"] is True


def test_the_localhost_seccomp_profile_is_the_shipped_one() -> None:
    profile = json.loads((ROOT / "deploy" / "seccomp" / "execserver.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    added = [r for r in profile["syscalls"] if r["comment"].startswith("execserver:")]
    assert len(added) == 1
    assert sorted(added[0]["names"]) == ["clone", "mount", "pivot_root", "umount2", "unshare"]
    assert added[0]["action"] == "SCMP_ACT_ALLOW"


def test_there_is_a_devbox_statefulset_and_a_native_sidecar_example() -> None:
    (statefulset,) = of_kind("StatefulSet")
    assert statefulset["spec"]["replicas"] >= 2
    assert statefulset["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    (sidecar,) = of_kind("Deployment")
    pod = sidecar["spec"]["template"]["spec"]
    (executor,) = pod["initContainers"]
    # Native sidecar: started (and ready, startupProbe) before the agent.
    assert executor["name"] == "execserver" and executor["restartPolicy"] == "Always"
    assert "startupProbe" in executor
    (agent,) = pod["containers"]
    mounts = [{m["name"] for m in c["volumeMounts"]} for c in (executor, agent)]
    assert "workspace" in set.intersection(*mounts)


def test_the_headless_service_gives_each_replica_a_stable_name() -> None:
    (statefulset,) = of_kind("StatefulSet")
    services = {s["metadata"]["name"]: s for s in of_kind("Service")}
    service = services[statefulset["spec"]["serviceName"]]
    assert service["spec"]["clusterIP"] == "None"
    # A draining replica must stay resolvable so its sessions can be resumed.
    assert service["spec"]["publishNotReadyAddresses"] is True
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_devbox_has_writable_home_workspace_and_a_persistent_audit_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (statefulset,) = of_kind("StatefulSet")
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert mounts["/workspace"] in claims
    assert mounts[env["HOME"]] in claims
    config = container_config(container, monkeypatch)
    assert config.audit_log is not None
    assert mounts[posixpath.dirname(config.audit_log)] in claims


def test_rolling_updates_drain_within_the_grace_period(monkeypatch: pytest.MonkeyPatch) -> None:
    (statefulset,) = of_kind("StatefulSet")
    pod = statefulset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    config = container_config(container, monkeypatch)
    assert config.drain_timeout_s > 0
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pre_stop + config.drain_timeout_s + 10 <= pod["terminationGracePeriodSeconds"]


@pytest.mark.parametrize("index", [0, 1])
def test_execserver_container_args_are_accepted_by_the_cli(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod, container = execserver_containers()[index]
    config = container_config(container, monkeypatch)
    assert config.ws_auth.mode is not None  # every example authenticates
    token_file = config.ws_auth.token_file or config.ws_auth.shared_secret_file
    assert token_file is not None
    # The token comes from a mounted Secret volume readable by the pod's group.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume_name = mounts[posixpath.dirname(token_file)]
    volume = next(v for v in pod["volumes"] if v["name"] == volume_name)
    assert "secret" in volume
    assert volume["secret"]["defaultMode"] & 0o040
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


@pytest.mark.parametrize("index", [0, 1])
def test_execserver_container_is_hardened_with_probes_and_resources(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod, container = execserver_containers()[index]
    assert pod["automountServiceAccountToken"] is False
    assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    assert not container["image"].endswith(":latest")
    port = parse_listen(container_config(container, monkeypatch).listen).port
    assert {p["containerPort"] for p in container["ports"]} == {port}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        spec = container[probe]
        if "httpGet" in spec:
            assert spec["httpGet"]["path"] == path
            assert spec["httpGet"]["port"] in ("ws", port)
        else:  # loopback-only listener: the probe runs inside the container
            assert f"127.0.0.1:{port}{path}" in " ".join(spec["exec"]["command"])


def test_a_loopback_listener_uses_exec_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    for _, container in execserver_containers():
        host = parse_listen(container_config(container, monkeypatch).listen).host
        uses_http = "httpGet" in container["readinessProbe"]
        assert uses_http == (host == "0.0.0.0")


def test_network_policy_admits_labelled_agent_hosts_across_namespaces() -> None:
    policies = {p["metadata"]["name"]: p for p in of_kind("NetworkPolicy")}
    policy = policies["execserver-ingress"]
    (statefulset,) = of_kind("StatefulSet")
    pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    client = {"execserver.io/client": "true"}
    assert {"podSelector": {"matchLabels": client}} in peers  # same namespace
    assert {
        "namespaceSelector": {"matchLabels": {"execserver.io/agents": "true"}},
        "podSelector": {"matchLabels": client},
    } in peers
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {8765}
    egress_blocks = [
        peer["ipBlock"]
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" in peer
    ]
    # Commands must not reach the cloud metadata endpoint.
    assert all("169.254.0.0/16" in block["except"] for block in egress_blocks)
    doc = (ROOT / "docs" / "deploying.md").read_text()
    assert "execserver.io/agents" in doc and "execserver.io/client" in doc


# ---- systemd --------------------------------------------------------------------


def unit() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_systemd_unit_runs_an_authenticated_loopback_serve() -> None:
    service = unit()["Service"]
    argv = shlex.split(service["ExecStart"].replace("${CREDENTIALS_DIRECTORY}", "/run/cred"))
    assert argv[:2] == ["/opt/execserver/bin/execserver", "serve"]
    config = serve_config(argv[2:])
    assert parse_listen(config.listen).host == "127.0.0.1"
    assert config.ws_auth.token_file == "/run/cred/token"
    assert service["LoadCredential"].startswith("token:")
    pre = shlex.split(service["ExecStartPre"])
    doctor = build_parser().parse_args(pre[1:])
    assert doctor.command == "doctor" and doctor.require == ["sandbox"]
    # systemd creates the working directory (and HOME) for the service user.
    work = service["WorkingDirectory"]
    state = ["/var/lib/" + d for d in service["StateDirectory"].split()]
    assert work in state and service["Environment"] == f"HOME={state[0]}"
    assert config.drain_timeout_s > 0
    assert int(service["TimeoutStopSec"].rstrip("s")) > config.drain_timeout_s
    # The install steps in the header: -D for /etc/execserver, a venv under /opt.
    header = UNIT.read_text().split("[Unit]")[0]
    assert "install -D -m 0600 token /etc/execserver/token" in header
    assert "python3 -m venv /opt/execserver" in header


def test_systemd_unit_is_hardened_but_lets_bwrap_build_its_namespaces() -> None:
    service = unit()["Service"]
    assert service["User"] not in ("", "root")
    for key in ("NoNewPrivileges", "PrivateTmp", "ProtectKernelModules", "RestrictSUIDSGID"):
        assert service[key] == "yes", key
    assert service["ProtectSystem"] == "strict"
    assert service["CapabilityBoundingSet"] == ""
    # Exactly the namespaces bubblewrap creates (--unshare-user/pid/ipc/net + mounts).
    assert set(service["RestrictNamespaces"].split()) == {"user", "mnt", "pid", "ipc", "net"}
    assert "MemoryMax" in service and "TasksMax" in service
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


# ---- docs -----------------------------------------------------------------------


def test_deploying_doc_names_every_limit_flag_and_metric() -> None:
    from execserver.kernel.limits import LIMIT_FLAGS
    from execserver.server.metrics import Metrics

    doc = (ROOT / "docs" / "deploying.md").read_text()
    for flag in LIMIT_FLAGS.values():
        assert f"`{flag}`" in doc, flag
    for family in Metrics().registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in doc, name


# ---- Kubernetes: the devbox whose tenants are separated ---------------------------

TENANTS_DIR = K8S / "tenants"


def tenants_manifest() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((TENANTS_DIR / "devbox-tenants.yaml").read_text())
    return {doc["kind"]: doc for doc in docs if doc}


def tenants_pod() -> dict[str, Any]:
    pod: dict[str, Any] = tenants_manifest()["StatefulSet"]["spec"]["template"]["spec"]
    return pod


def accounts() -> dict[str, list[str]]:
    passwd = tenants_manifest()["ConfigMap"]["data"]["passwd"]
    return {line.split(":")[0]: line.split(":") for line in passwd.splitlines() if line}


def example_tenants() -> dict[str, dict[str, Any]]:
    import tomllib

    table: dict[str, dict[str, Any]] = tomllib.loads(
        (TENANTS_DIR / "tenants.example.toml").read_text()
    )["tenants"]
    return table


def test_the_tenants_devbox_serves_the_tenants_file_from_a_root_only_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pod = tenants_pod()
    container = next(c for c in pod["containers"] if c["name"] == "execserver")
    config = container_config(container, monkeypatch)
    assert config.tenants_file is not None
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    mount = mounts[posixpath.dirname(config.tenants_file)]
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    # Root-owned and 0400: the daemon refuses a tenants file anyone else may read.
    assert volume["secret"]["defaultMode"] == 0o400
    assert "fsGroup" not in pod["securityContext"]
    assert mount["readOnly"] is True
    # /metrics takes only the operator's token with --tenants.
    assert config.metrics_token_file is not None


def test_the_tenants_devbox_is_root_only_inside_its_user_namespace_with_seven_capabilities() -> (
    None
):
    pod = tenants_pod()
    assert pod["hostUsers"] is False  # uid 0 and its capabilities are the pod's own
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "profiles/execserver.json",
    }
    assert "hostNetwork" not in pod and "hostPID" not in pod
    added = {}
    for container in [*pod["initContainers"], *pod["containers"]]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert not sc.get("privileged", False)
        added[container["name"]] = set(sc["capabilities"]["add"])
    assert added == {
        "prepare-homes": {"CHOWN", "FOWNER", "DAC_OVERRIDE"},
        "execserver": {"SETUID", "SETGID", "KILL", "DAC_OVERRIDE", "FOWNER", "CHOWN", "SETFCAP"},
    }
    text = (TENANTS_DIR / "devbox-tenants.yaml").read_text()
    assert 'Pod Security Standards: "privileged" only' in text


def test_the_tenants_devbox_accounts_homes_and_tenants_file_agree() -> None:
    users = accounts()
    tenants = example_tenants()
    assert tenants, "the example names tenants"
    uids = [int(fields[2]) for fields in users.values()]
    assert len(uids) == len(set(uids))
    init = next(c for c in tenants_pod()["initContainers"] if c["name"] == "prepare-homes")
    script = init["args"][0]
    for name, entry in tenants.items():
        user = users[entry["user"]]
        uid, home = int(user[2]), user[5]
        assert uid >= 1000 and home == f"/home/{entry['user']}", user
        assert len(entry["token_sha256"]) == 64
        assert entry["sandbox"] == "required"
        for root in [*entry["writable_roots"], entry["env"]["TMPDIR"]]:
            assert root.startswith(home + "/"), (name, root)
        # The init container makes exactly the directories the profile names.
        assert f"for who in {' '.join(e['user'] for e in tenants.values())}; do" in script
    # Both containers see the same accounts (the init container chowns by name).
    for container in [*tenants_pod()["initContainers"], *tenants_pod()["containers"]]:
        paths = {m["mountPath"]: m.get("subPath") for m in container["volumeMounts"]}
        assert paths["/etc/passwd"] == "passwd" and paths["/etc/group"] == "group"
