"""The Dockerfile and deployment manifests: linted offline, and consistent with the code they run."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from remat.service import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SETTINGS = set(Settings.model_fields)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install '.[dev]')")
    return path


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _env_names(node: object) -> set[str]:
    """Every REMAT_* variable a manifest sets, wherever it appears."""
    if isinstance(node, dict):
        found = {node["name"]} if str(node.get("name", "")).startswith("REMAT_") else set()
        found |= {k for k in node if str(k).startswith("REMAT_")}
        return found.union(*(_env_names(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_env_names(v) for v in node))
    return set()


def test_the_dockerfile_passes_hadolint():
    done = subprocess.run([_tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_as_a_non_root_user_under_an_init_process_without_torch():
    text = (ROOT / "Dockerfile").read_text()
    assert text.count("FROM python:3.11-slim") == 2 and "USER 10001" in text
    assert 'ENTRYPOINT ["tini", "--", "remat"]' in text and "RUN pip install . " in text
    assert not any("torch" in line for line in text.splitlines() if not line.startswith("#"))
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(d.startswith("torch") for d in dependencies)


def test_the_kubernetes_manifests_validate_offline():
    files = [K8S / name for name in ("redis.yaml", "api.yaml", "worker.yaml")]
    done = subprocess.run([_tool("kubernetes-validate"), "--strict", *map(str, files)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == 5


def test_kustomize_lists_every_manifest_and_every_container_uses_the_image():
    kustomization = _documents(K8S / "kustomization.yaml")[0]
    manifests = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifests
    for name in ("api.yaml", "worker.yaml"):
        for doc in _documents(K8S / name):
            if doc["kind"] == "Deployment":
                [container] = doc["spec"]["template"]["spec"]["containers"]
                assert container["image"] == kustomization["images"][0]["name"]
                assert container["securityContext"]["readOnlyRootFilesystem"]
                assert doc["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001


def test_workers_scale_on_the_queue_the_service_uses():
    [scaler] = _documents(K8S / "worker-scaler.yaml")
    [worker] = _documents(K8S / "worker.yaml")
    assert scaler["apiVersion"] == "keda.sh/v1alpha1" and scaler["kind"] == "ScaledObject"
    assert scaler["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    [trigger] = scaler["spec"]["triggers"]
    assert trigger["type"] == "redis" and trigger["metadata"]["listName"] == f"rq:queue:{Settings().queue_name}"
    grace = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > Settings().max_time_limit_s


def test_authentication_is_on_in_the_deployments():
    [_, api] = _documents(K8S / "api.yaml")
    env = {e["name"]: e for e in api["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["REMAT_TOKENS"]["valueFrom"]["secretKeyRef"]["name"] == "remat-tokens"
    compose = _documents(ROOT / "deploy" / "compose.yaml")[0]
    assert compose["services"]["api"]["environment"]["REMAT_TOKENS"].startswith("${REMAT_TOKENS:?")


def test_every_setting_the_manifests_use_exists():
    files = [*K8S.glob("*.yaml"), ROOT / "deploy" / "compose.yaml"]
    names = set().union(*(_env_names(doc) for f in files for doc in _documents(f)))
    assert names and {n.removeprefix("REMAT_").lower() for n in names} <= SETTINGS


def test_compose_runs_redis_an_api_and_workers_from_one_image():
    services = _documents(ROOT / "deploy" / "compose.yaml")[0]["services"]
    assert set(services) == {"redis", "api", "worker"}
    assert services["api"]["image"] == services["worker"]["image"]
    assert services["api"]["command"] == ["serve"] and services["worker"]["command"] == ["worker"]
    assert services["worker"]["deploy"]["replicas"] == 2
