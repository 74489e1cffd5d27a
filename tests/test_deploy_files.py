"""The deployment files are complete and agree with the code: docker-compose.yml and ops/k8s.

Neither Docker nor a cluster runs here, so these read the files: every metric queue has
its workers (a compose service, a Deployment and a KEDA ScaledObject), every command is
one the CLI accepts, every setting is one evalfleet knows and passes its validation, and
the shutdown timings leave a worker time to finish its longest job.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from pydantic import AliasChoices

from evalfleet.cli import main
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "ops" / "k8s"

#: Read by KEDA (keda.yaml), not by evalfleet.
KEDA_ONLY = {"REDIS_PASSWORD"}


def metrics() -> list[str]:
    return sorted(load_registry().names())


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def manifests() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return [document for name in kustomization["resources"]
            for document in yaml.safe_load_all((K8S / name).read_text()) if document]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [document for document in manifests() if document["kind"] == kind]


def env_names() -> set[str]:
    """Every environment variable Settings reads."""
    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names.add(str(alias.choices[0]) if isinstance(alias, AliasChoices)
                  else f"EVALFLEET_{name.upper()}")
    return names


def check_command(args: list[str]) -> None:
    """Parse ``evalfleet <args>`` as the CLI would, running nothing; raise on bad usage."""
    context = main.make_context("evalfleet", list(args))
    command: click.Command = main
    rest = [*context._protected_args, *context.args]
    while isinstance(command, click.Group):
        name, found, rest = command.resolve_command(context, rest)
        assert found is not None, f"evalfleet has no command {name!r} ({args})"
        command = found
        context = command.make_context(name or "", rest, parent=context)
        rest = [*getattr(context, "_protected_args", []), *context.args]


def settings_from(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    unknown = set(environment) - env_names() - KEDA_ONLY
    assert not unknown, f"settings evalfleet does not read: {sorted(unknown)}"
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


def worker_queue(command: list[str]) -> str:
    return command[command.index("--queues") + 1]


def test_compose_runs_one_scalable_worker_service_per_metric() -> None:
    services = compose()["services"]
    workers = {name: service for name, service in services.items()
               if name.startswith("worker-")}
    assert sorted(worker_queue(s["command"]) for s in workers.values()) == metrics()
    for name, service in workers.items():
        # --scale needs services without fixed names or host ports.
        assert "container_name" not in service and "ports" not in service, name
        assert service["healthcheck"]["test"][1:] == ["evalfleet", "worker-health", "--live"]
    assert {"redis", "postgres", "migrate", "ingest", "beat", "flower"} <= set(services)


def test_compose_keeps_redis_jobs_on_disk_and_never_evicts_them() -> None:
    command = " ".join(compose()["services"]["redis"]["command"])
    assert "--appendonly yes" in command and "--appendfsync everysec" in command
    assert "--maxmemory-policy noeviction" in command


def test_compose_commands_and_settings_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose()["services"]
    for service in services.values():
        if service.get("image", "").startswith("evalfleet"):
            check_command(service["command"])
    worker = services["worker-rag-qa"]
    environment = {key: str(value) for key, value in worker["environment"].items()}
    environment["EVALFLEET_BROKER_URL"] = "redis://redis:6379/0"  # compose's default
    settings = settings_from(environment, monkeypatch)
    stop_s = float(worker["stop_grace_period"].rstrip("s"))
    assert stop_s > settings.worker.shutdown_grace_s
    assert stop_s > 2 * settings.judge.judge_timeout_s  # the longest job: a call and its re-ask


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    assert listed == {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def test_k8s_runs_a_deployment_and_a_scaled_object_per_metric() -> None:
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    workers = {name: d for name, d in deployments.items() if "worker" in name}
    queues = sorted(worker_queue(d["spec"]["template"]["spec"]["containers"][0]["args"])
                    for d in workers.values())
    assert queues == metrics()
    scaled = of_kind("ScaledObject")
    assert sorted(s["spec"]["scaleTargetRef"]["name"] for s in scaled) == sorted(workers)
    for scaled_object in scaled:
        target = workers[scaled_object["spec"]["scaleTargetRef"]["name"]]
        queue = worker_queue(target["spec"]["template"]["spec"]["containers"][0]["args"])
        (trigger,) = [t for t in scaled_object["spec"]["triggers"] if t["type"] == "redis"]
        assert trigger["metadata"]["listName"] == f"eval.{queue}"


def test_k8s_settings_are_valid_and_pods_outlive_their_longest_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (config,) = of_kind("ConfigMap")
    (secret,) = of_kind("Secret")
    settings = settings_from({**config["data"], **secret["stringData"]}, monkeypatch)
    for deployment in of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        check_command(pod["containers"][0]["args"])
        if "worker" in deployment["metadata"]["name"]:
            grace_s = pod["terminationGracePeriodSeconds"]
            assert grace_s > settings.worker.shutdown_grace_s
            assert grace_s > 2 * settings.judge.judge_timeout_s
    for job in of_kind("Job"):
        check_command(job["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kustomize_renders_the_manifests() -> None:
    rendered = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True,
                              text=True, check=True).stdout
    kinds = [document["kind"] for document in yaml.safe_load_all(rendered) if document]
    assert kinds.count("ScaledObject") == len(metrics())
    assert kinds.count("Deployment") == len(metrics()) + 2  # workers, ingest, beat
