"""The image (Dockerfile) and what runs it (docker-compose.yml, ops/k8s, the scrape config)
agree: entrypoint, user, ports, the data directory and the metrics endpoints."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.cli import main

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "ops" / "k8s"


def dockerfile() -> dict[str, Any]:
    """The Dockerfile's ENTRYPOINT, USER (uid, gid), EXPOSE ports and ENV."""
    text = (ROOT / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1))  # type: ignore[union-attr]
    uid, gid = re.search(r"^USER (\d+):(\d+)$", text, re.M).groups()  # type: ignore[union-attr]
    exposed = {int(port) for line in re.findall(r"^EXPOSE (.+)$", text, re.M)
               for port in line.split()}
    env = dict(re.findall(r"^ENV (\w+)=(\S+)$", text, re.M))
    return {"entrypoint": entrypoint, "uid": int(uid), "gid": int(gid), "exposed": exposed,
            "env": env}


def manifests() -> list[dict[str, Any]]:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    return [doc for name in listed for doc in yaml.safe_load_all((K8S / name).read_text())
            if doc]


def pods() -> list[tuple[str, dict[str, Any]]]:
    """(name, pod template) of every Deployment and Job."""
    return [(doc["metadata"]["name"], doc["spec"]["template"]) for doc in manifests()
            if doc["kind"] in ("Deployment", "Job")]


def config() -> dict[str, str]:
    (configmap,) = [doc for doc in manifests() if doc["kind"] == "ConfigMap"]
    return dict(configmap["data"])


def compose_services() -> dict[str, dict[str, Any]]:
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return {name: service for name, service in services.items()
            if service.get("image", "").startswith("evalfleet")}


def option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_the_image_runs_evalfleet_as_its_fixed_non_root_user() -> None:
    image = dockerfile()
    assert image["entrypoint"] == ["evalfleet"]
    assert image["uid"] >= 1000 and image["gid"] >= 1000


@pytest.mark.parametrize(("name", "pod"), pods(), ids=[name for name, _ in pods()])
def test_k8s_pods_run_the_images_entrypoint_user_and_ports(name: str,
                                                            pod: dict[str, Any]) -> None:
    image = dockerfile()
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True
    assert (security["runAsUser"], security["runAsGroup"]) == (image["uid"], image["gid"])
    (container,) = pod["spec"]["containers"]
    # `command` would replace the ENTRYPOINT; the role goes in `args`.
    assert "command" not in container
    assert container["args"][0] in main.commands
    ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
    assert set(ports.values()) <= image["exposed"], name
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in container:
            assert container[probe]["httpGet"]["port"] in ports, (name, probe)
    settings = config()
    if "health" in ports:
        assert ports["health"] == int(settings["EVALFLEET_HEALTH_PORT"])
    if "metrics" in ports:
        assert ports["metrics"] == int(settings["EVALFLEET_METRICS_PORT"])
    annotations = pod["metadata"].get("annotations", {})
    if annotations.get("prometheus.io/scrape") == "true":
        assert int(annotations["prometheus.io/port"]) in ports.values(), name
    if container["args"][0] == "ingest":
        assert ports["http"] == int(option(container["args"], "--port") or 0)


def services() -> list[tuple[str, dict[str, Any]]]:
    """The long-running pods (the migrate Job writes only to the database)."""
    return [(name, pod) for name, pod in pods() if pod["spec"].get("restartPolicy") != "Never"]


@pytest.mark.parametrize(("name", "pod"), services(), ids=[name for name, _ in services()])
def test_k8s_services_with_a_read_only_root_can_write_their_data_dir(
    name: str, pod: dict[str, Any],
) -> None:
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}
    assert {config()["EVALFLEET_DATA_DIR"], "/tmp"} <= mounts, name


@pytest.mark.parametrize("name", sorted(compose_services()))
def test_compose_services_run_the_images_entrypoint_and_ports(name: str) -> None:
    image = dockerfile()
    service = compose_services()[name]
    assert "entrypoint" not in service and "user" not in service, name
    command = service["command"]
    assert command[0] in main.commands
    environment = service.get("environment", {})
    for key in ("EVALFLEET_HEALTH_PORT", "EVALFLEET_METRICS_PORT"):
        if key in environment:
            assert int(environment[key]) in image["exposed"], (name, key)
    for mapping in service.get("ports", []):
        container_port = int(str(mapping).split(":")[-1])
        assert container_port in image["exposed"], name
        assert container_port == int(option(command, "--port") or 0), name
    healthcheck = service.get("healthcheck", {}).get("test", [])
    if healthcheck:
        assert healthcheck[1:3] == ["evalfleet", "worker-health"]
        assert "EVALFLEET_HEALTH_PORT" in environment


def test_every_scrape_target_is_a_compose_service_serving_metrics_there() -> None:
    services = compose_services()
    scrape = yaml.safe_load((ROOT / "ops" / "prometheus" / "scrape.yml").read_text())
    targets: list[tuple[str, int]] = []
    for job in scrape["scrape_configs"]:
        for static in job.get("static_configs", []):
            targets += [(t.split(":")[0], int(t.split(":")[1])) for t in static["targets"]]
        for dns in job.get("dns_sd_configs", []):
            targets += [(host, int(dns["port"])) for host in dns["names"]]
    assert {host for host, _ in targets} == {
        name for name, s in services.items()
        if "EVALFLEET_METRICS_PORT" in s.get("environment", {}) or s["command"][0] == "ingest"}
    for host, port in targets:
        service = services[host]
        served = service.get("environment", {}).get("EVALFLEET_METRICS_PORT") or option(
            service["command"], "--port")
        assert int(served or 0) == port, host
