#!/usr/bin/env python3
"""Validate custom resources offline against their CRDs' own OpenAPI v3 schemas.

    python scripts/validate_crs.py --crds deploy/vendor/agent-sandbox-crds \
        [--kubernetes-version 1.33.0] [--pods-out DIR] MANIFEST.yaml ...

For every document of every manifest: the CRD of its apiVersion + kind must be in
``--crds`` (and serve that version), and the document must match that version's
``schema.openAPIV3Schema``. The check is as strict as the API server with
``kubectl apply --validate=strict``: a field the schema does not name is an error
(the server would drop it in silence, so a typo such as ``procMnt`` would
otherwise pass), ``int32``/``int64`` ranges and ``date-time`` values are checked.
Not checked: ``x-kubernetes-validations`` (CEL rules; these CRDs have one) and
anything only the controller decides (that a referenced template exists, ...).

With ``--kubernetes-version``, each embedded pod template (``spec.podTemplate``
of a Sandbox or SandboxTemplate) is also checked as a ``v1 PodTemplate`` against
the Kubernetes JSON schemas bundled with kubernetes-validate (strict): the CRDs
copy the pod schema, but the bundled one is what the Makefile checks the other
manifests against. ``--pods-out`` writes each embedded pod as a Pod manifest
(with the resource's ``checkov.io/*`` annotations) for checkov, which does not
look inside custom resources.

Prints one line per problem and exits 1 when there is any, 2 when it cannot run.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml  # type: ignore[import-untyped]

# libyaml's loader when PyYAML has it: the two large CRDs load in a fraction of the time.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Kinds whose spec embeds a pod template (checked with kubernetes-validate too).
POD_TEMPLATE_KINDS = frozenset({"Sandbox", "SandboxTemplate"})
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
# metadata.name of a namespaced object: a DNS-1123 subdomain (the CRD schema says
# only ``type: object`` for metadata; the API server checks it on its own).
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class CannotRun(Exception):
    """A missing file, unreadable YAML or CRD: the check itself cannot be made."""


@dataclass(frozen=True)
class Problem:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def closed(schema: Any) -> Any:
    """The schema with every object that lists its ``properties`` closed to others
    (``additionalProperties: false``), as the API server's pruning and strict field
    validation treat it; ``x-kubernetes-preserve-unknown-fields`` keeps one open."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: closed(value) for key, value in schema.items()}
    if (
        "properties" in result
        and "additionalProperties" not in result
        and not result.get("x-kubernetes-preserve-unknown-fields", False)
    ):
        result["additionalProperties"] = False
    return result


FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("int32")  # type: ignore[untyped-decorator]
def _int32(value: object) -> bool:
    return _in_range(value, "int32")


@FORMATS.checks("int64")  # type: ignore[untyped-decorator]
def _int64(value: object) -> bool:
    return _in_range(value, "int64")


def _in_range(value: object, fmt: str) -> bool:
    if not isinstance(value, int) or isinstance(value, bool):
        return True  # a wrong type is the ``type`` keyword's error
    low, high = INT_RANGES[fmt]
    return low <= value <= high


@FORMATS.checks("date-time", raises=ValueError)  # type: ignore[untyped-decorator]
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    # RFC 3339 needs a time zone (Z or an offset); fromisoformat alone allows none.
    parsed = datetime.fromisoformat(value)
    return parsed.tzinfo is not None


@functools.cache
def load_crds(folder: Path) -> dict[tuple[str, str], Any]:
    """(apiVersion, kind) -> a validator of that served version's schema."""
    validators: dict[tuple[str, str], Any] = {}
    paths = sorted(folder.glob("*.yaml"))
    if not paths:
        raise CannotRun(f"{folder}: no CRD files (*.yaml) there")
    for path in paths:
        for crd in _documents(path):
            if crd.get("kind") != "CustomResourceDefinition":
                raise CannotRun(f"{path}: {crd.get('kind')!r} is not a CustomResourceDefinition")
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if not version.get("served", False):
                    continue
                schema = closed(version["schema"]["openAPIV3Schema"])
                jsonschema.Draft202012Validator.check_schema(schema)
                validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft202012Validator(
                    schema, format_checker=FORMATS
                )
    return validators


def _documents(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CannotRun(f"{path}: {exc.strerror or exc}") from None
    try:
        docs = [doc for doc in yaml.load_all(text, Loader=SAFE_LOADER) if doc is not None]
    except yaml.YAMLError as exc:
        raise CannotRun(f"{path}: not YAML: {' '.join(str(exc).split())}") from None
    for doc in docs:
        if not isinstance(doc, dict):
            raise CannotRun(f"{path}: a document is a {type(doc).__name__}, not a mapping")
    return docs


def _json_path(parts: Iterator[object] | Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".") or "(document)"


def _describe(error: Any) -> str:
    if error.validator == "additionalProperties" and error.validator_value is False:
        known = set(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - known)
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
    if error.validator == "format":
        return f"{error.instance!r} is not a valid {error.validator_value}"
    return str(error.message)


def check_document(
    doc: dict[str, Any], where: str, validators: dict[tuple[str, str], Any]
) -> Iterator[Problem]:
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    name = (doc.get("metadata") or {}).get("name")
    label = f"{where}: {kind}/{name}"
    validator = validators.get((str(api_version), str(kind)))
    if validator is None:
        yield Problem(label, f"no served CRD for apiVersion {api_version!r} kind {kind!r}")
        return
    if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        yield Problem(label, f"metadata.name {name!r} is not a DNS-1123 subdomain")
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    for error in errors:
        yield Problem(label, f"at {_json_path(error.absolute_path)}: {_describe(error)}")


def embedded_pod_templates(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc.get("kind") not in POD_TEMPLATE_KINDS:
        return None
    template = (doc.get("spec") or {}).get("podTemplate")
    return template if isinstance(template, dict) else None


def check_pod_template(
    doc: dict[str, Any], template: dict[str, Any], where: str, kubernetes_version: str
) -> Iterator[Problem]:
    try:
        kubernetes_validate = importlib.import_module("kubernetes_validate")
    except ImportError:
        raise CannotRun(
            "--kubernetes-version needs kubernetes-validate (deploy/lint-requirements.txt)"
        ) from None
    name = doc["metadata"]["name"]
    wrapped = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name},
        "template": template,
    }
    label = f"{where}: {doc['kind']}/{name}: spec.podTemplate"
    try:
        kubernetes_validate.validate(wrapped, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        # It carries the first jsonschema error's fields; the path starts at "template".
        path = _json_path(list(exc.absolute_path)[1:])
        message = _describe(exc) if exc.validator != "additionalProperties" else exc.message
        yield Problem(label, f"at {path}: {message} (Kubernetes {kubernetes_version} schema)")
    except Exception as exc:  # no schema for that version, ...: the check cannot be made
        raise CannotRun(f"kubernetes-validate {kubernetes_version}: {exc}") from None


def pod_manifest(doc: dict[str, Any], template: dict[str, Any]) -> dict[str, Any]:
    """The embedded pod as a Pod, carrying the resource's checkov skips with it."""
    metadata = doc.get("metadata") or {}
    annotations = {
        key: value
        for key, value in (metadata.get("annotations") or {}).items()
        if key.startswith("checkov.io/")
    }
    annotations.update((template.get("metadata") or {}).get("annotations") or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{doc['kind'].lower()}-{metadata.get('name')}",
            "labels": (template.get("metadata") or {}).get("labels") or {},
            "annotations": annotations,
        },
        "spec": template.get("spec") or {},
    }


def network_policy_manifest(doc: dict[str, Any], template: dict[str, Any]) -> dict[str, Any] | None:
    """The NetworkPolicy the controller makes for each sandbox of a SandboxTemplate
    (``spec.networkPolicy``, selecting the pod's labels), so checkov sees the pod with it."""
    rules = (doc.get("spec") or {}).get("networkPolicy")
    if not isinstance(rules, dict):
        return None
    metadata = doc.get("metadata") or {}
    types = [kind for kind, key in (("Ingress", "ingress"), ("Egress", "egress")) if key in rules]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{doc['kind'].lower()}-{metadata.get('name')}",
            "annotations": {
                key: value
                for key, value in (metadata.get("annotations") or {}).items()
                if key.startswith("checkov.io/") and "CKV_K8S_21=" in value
            },
        },
        "spec": {
            "podSelector": {"matchLabels": (template.get("metadata") or {}).get("labels") or {}},
            "policyTypes": types,
            **{key: rules[key] for key in ("ingress", "egress") if key in rules},
        },
    }


def run(
    manifests: list[Path],
    crds: Path,
    kubernetes_version: str | None = None,
    pods_out: Path | None = None,
) -> list[Problem]:
    validators = load_crds(crds)
    problems: list[Problem] = []
    if pods_out is not None:
        pods_out.mkdir(parents=True, exist_ok=True)
    for path in manifests:
        docs = _documents(path)
        if not docs:
            problems.append(Problem(str(path), "no documents"))
        for index, doc in enumerate(docs):
            where = str(path) if len(docs) == 1 else f"{path}[{index}]"
            found = list(check_document(doc, where, validators))
            problems += found
            template = embedded_pod_templates(doc)
            if template is None or found:
                continue
            if kubernetes_version is not None:
                problems += check_pod_template(doc, template, where, kubernetes_version)
            if pods_out is not None:
                pod = pod_manifest(doc, template)
                policy = network_policy_manifest(doc, template)
                written = [pod] if policy is None else [pod, policy]
                target = pods_out / f"{path.stem}-{index}.yaml"
                target.write_text(yaml.safe_dump_all(written, sort_keys=False), encoding="utf-8")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="validate-crs",
        description="Validate custom resources against their CRDs' openAPIV3Schema, offline.",
    )
    parser.add_argument("manifests", nargs="+", type=Path, metavar="MANIFEST")
    parser.add_argument("--crds", type=Path, required=True, help="folder of CRD YAML files")
    parser.add_argument(
        "--kubernetes-version",
        help="also check embedded pod templates with kubernetes-validate --strict",
    )
    parser.add_argument("--pods-out", type=Path, help="write embedded pods here, for checkov")
    args = parser.parse_args(argv)
    try:
        problems = run(args.manifests, args.crds, args.kubernetes_version, args.pods_out)
    except CannotRun as exc:
        print(f"validate-crs: {exc}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, jsonschema.SchemaError) as exc:
        print(f"validate-crs: a CRD in {args.crds} is malformed: {exc!r}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"validate-crs: {problem}", file=sys.stderr)
    if problems:
        return 1
    count = len(args.manifests)
    print(f"validate-crs: {count} manifest{'s' if count != 1 else ''} valid against {args.crds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
