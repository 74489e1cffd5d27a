"""The deploy files pass the real tools: the Compose Specification's JSON schema
(check-jsonschema), kubernetes-validate for every core Kubernetes object, and KEDA's CRD
schemas and scaler parameters for the KEDA objects.

What the KEDA checks cover: each ScaledObject and TriggerAuthentication against the
openAPIV3Schema of KEDA's CRDs (unknown fields rejected, as the API server's strict field
validation does), and each trigger's metadata keys and each secretTargetRef parameter
against the names KEDA's redis and rabbitmq scalers read. What they do not: the values of
trigger metadata (KEDA parses them at run time), and the commented-out RabbitMQ trigger
is checked only for its parameter names.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = Path(__file__).resolve().parent / "schemas"
K8S = ROOT / "ops" / "k8s"
COMPOSE = ROOT / "docker-compose.yml"

#: The Kubernetes version the manifests are checked for (kubernetes-validate's newest).
KUBERNETES_VERSION = kubernetes_validate.latest_version()


def documents() -> list[dict[str, Any]]:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    return [doc for name in listed for doc in yaml.safe_load_all((K8S / name).read_text())
            if doc]


def core_objects() -> list[dict[str, Any]]:
    return [doc for doc in documents() if not doc["apiVersion"].startswith("keda.sh/")]


def keda_objects(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents()
            if doc["apiVersion"].startswith("keda.sh/") and doc["kind"] == kind]


# -- Docker Compose ------------------------------------------------------------------------

def test_compose_file_passes_the_compose_spec_schema() -> None:
    # The virtualenv's scripts, also when its python runs without the venv activated.
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    tool = shutil.which("check-jsonschema", path=search)
    assert tool, "check-jsonschema is missing: pip install -e '.[dev]'"
    result = subprocess.run([tool, "--schemafile", str(SCHEMAS / "compose-spec.json"),
                             str(COMPOSE)], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def compose_errors(document: dict[str, Any]) -> list[str]:
    schema = json.loads((SCHEMAS / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    return [error.message for error in validator.iter_errors(document)]


def test_the_schema_catches_a_broken_compose_file() -> None:
    document = yaml.safe_load(COMPOSE.read_text())
    assert compose_errors(document) == []
    broken = copy.deepcopy(document)
    broken["services"]["beat"]["depends_on"]["redis"]["required"] = "sometimes"
    broken["services"]["beat"]["stop_grace_period"] = {"seconds": 150}
    assert len(compose_errors(broken)) >= 2


def test_compose_uses_the_features_that_need_compose_2_24() -> None:
    """docs/deploying.md states Docker Compose 2.24 as the minimum because of these two."""
    service = yaml.safe_load(COMPOSE.read_text())["services"]["beat"]
    assert service["env_file"] == [{"path": ".env", "required": False}]
    assert service["depends_on"]["rabbitmq"]["required"] is False
    assert "Docker Compose 2.24" in (ROOT / "docs" / "deploying.md").read_text()
    assert "Docker Compose 2.24" in COMPOSE.read_text()


# -- Kubernetes ----------------------------------------------------------------------------

@pytest.mark.parametrize("document", core_objects(),
                         ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_core_objects_pass_kubernetes_validate(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_kubernetes_validate_catches_a_misspelt_field() -> None:
    deployment = next(doc for doc in core_objects() if doc["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 150
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_every_manifest_is_a_core_or_keda_object() -> None:
    kinds = {(doc["apiVersion"], doc["kind"]) for doc in documents()}
    assert {kind for kind in kinds if kind[0].startswith("keda.sh/")} == {
        ("keda.sh/v1alpha1", "ScaledObject"), ("keda.sh/v1alpha1", "TriggerAuthentication")}
    assert len(core_objects()) + len(keda_objects("ScaledObject")) + len(
        keda_objects("TriggerAuthentication")) == len(documents())


# -- KEDA ----------------------------------------------------------------------------------

def crd_schema(name: str, version: str) -> dict[str, Any]:
    """The CRD's openAPIV3Schema, unknown fields rejected where the CRD does not keep them."""
    crd = yaml.safe_load((SCHEMAS / name).read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return strict(served["schema"]["openAPIV3Schema"])


def strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: strict(value) for key, value in schema.items()
              if not key.startswith("x-kubernetes-")}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        result["additionalProperties"] = False
    return result


def keda_errors(document: dict[str, Any], crd: str) -> list[str]:
    version = document["apiVersion"].split("/")[1]
    validator = jsonschema.Draft4Validator(crd_schema(crd, version))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(document)]
    return errors


@pytest.mark.parametrize("document", keda_objects("ScaledObject"),
                         ids=lambda d: d["metadata"]["name"])
def test_scaled_objects_pass_kedas_crd_schema(document: dict[str, Any]) -> None:
    assert keda_errors(document, "keda.sh_scaledobjects.yaml") == []


def test_trigger_authentication_passes_kedas_crd_schema() -> None:
    (auth,) = keda_objects("TriggerAuthentication")
    assert keda_errors(auth, "keda.sh_triggerauthentications.yaml") == []


def test_the_crd_schema_catches_a_misspelt_field() -> None:
    broken = copy.deepcopy(keda_objects("ScaledObject")[0])
    broken["spec"]["maxReplicas"] = 20
    broken["spec"]["triggers"][0]["authenticationRef"] = {"nam": "x"}
    assert len(keda_errors(broken, "keda.sh_scaledobjects.yaml")) >= 2


def scaler_parameters() -> dict[str, dict[str, list[str]]]:
    return dict(json.loads((SCHEMAS / "keda-scaler-parameters.json").read_text())["scalers"])


def commented_rabbitmq_trigger() -> dict[str, Any]:
    """The RabbitMQ trigger keda.yaml ships commented out, parsed."""
    text = (K8S / "keda.yaml").read_text()
    block = re.search(r"^(\s*)# - type: rabbitmq\n((?:\1#  .*\n)+)", text, re.M)
    assert block, "keda.yaml no longer carries the commented RabbitMQ trigger"
    lines = ["- type: rabbitmq", *(line.strip()[2:] for line in block.group(2).splitlines())]
    (trigger,) = yaml.safe_load("\n".join(lines))
    return dict(trigger)


def test_trigger_metadata_uses_parameters_kedas_scalers_read() -> None:
    parameters = scaler_parameters()
    triggers = [t for so in keda_objects("ScaledObject") for t in so["spec"]["triggers"]]
    triggers.append(commented_rabbitmq_trigger())
    assert {t["type"] for t in triggers} == {"redis", "rabbitmq"}
    for trigger in triggers:
        known = parameters[trigger["type"]]["triggerMetadata"]
        assert set(trigger["metadata"]) <= set(known), (trigger, known)


def test_trigger_authentication_sets_parameters_the_redis_scaler_reads() -> None:
    (auth,) = keda_objects("TriggerAuthentication")
    names = {ref["parameter"] for ref in auth["spec"]["secretTargetRef"]}
    assert names <= set(scaler_parameters()["redis"]["authParams"])
    secret = next(doc for doc in core_objects() if doc["kind"] == "Secret")
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["name"] == secret["metadata"]["name"]
        assert ref["key"] in secret["stringData"]
