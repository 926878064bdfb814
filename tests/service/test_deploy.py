"""The Dockerfile and deployment manifests: linted offline, consistent with the code they run, and locked down."""

from __future__ import annotations

import re
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


def _pods() -> dict[str, dict]:
    """The pod template of every workload in the Kubernetes manifests, by workload name."""
    return {doc["metadata"]["name"]: doc["spec"]["template"]["spec"] for path in K8S.glob("*.yaml")
            for doc in _documents(path) if doc.get("kind") in ("Deployment", "StatefulSet")}


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
    assert "USER 10001" in text and 'ENTRYPOINT ["tini", "--", "remat"]' in text
    assert 'HEALTHCHECK' in text and 'CMD ["remat", "healthcheck"]' in text and "REMAT_HEARTBEAT_FILE=" in text
    assert not any("torch" in line for line in text.splitlines() if not line.startswith("#"))
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(d.startswith("torch") for d in dependencies)


def test_the_image_installs_its_locked_dependencies_by_hash_on_a_base_pinned_by_digest():
    text = (ROOT / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE)
    assert len(bases) == 2 and all(re.fullmatch(r"python:3\.11[\w.-]*@sha256:[0-9a-f]{64}", b) for b in bases)
    assert "pip install --require-hashes --no-deps -r requirements.lock" in text and "pip install --no-deps ." in text
    locked = {}
    for name, version, hashes in re.findall(r"^([\w.-]+)==(\S+) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}.*\n)+)",
                                             (ROOT / "requirements.lock").read_text(), flags=re.MULTILINE):
        locked[name.lower().replace("_", "-")] = version
        assert hashes.count("--hash=sha256:") >= 1
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dependency in dependencies:
        name = re.match(r"[\w.-]+", dependency).group(0).lower().replace("_", "-")
        assert name in locked, f"{name} is not in requirements.lock"
    assert locked["highspy"] == "1.12.0" and "torch" not in locked


def test_third_party_images_are_pinned_by_digest():
    redis_images = [c["image"] for c in _pods()["redis"]["containers"]]
    redis_images.append(_documents(ROOT / "deploy" / "compose.yaml")[0]["services"]["redis"]["image"])
    assert all(re.fullmatch(r"redis:[\w.-]+@sha256:[0-9a-f]{64}", image) for image in redis_images)


def test_the_kubernetes_manifests_validate_offline():
    files = [K8S / name for name in ("redis.yaml", "api.yaml", "worker.yaml", "network-policy.yaml")]
    done = subprocess.run([_tool("kubernetes-validate"), "--strict", *map(str, files)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("passed") == 10


def test_kustomize_lists_every_manifest_and_every_container_uses_the_image():
    kustomization = _documents(K8S / "kustomization.yaml")[0]
    manifests = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifests
    pods = _pods()
    for name in ("remat-api", "remat-worker"):
        [container] = pods[name]["containers"]
        assert container["image"] == kustomization["images"][0]["name"]
        assert pods[name]["securityContext"]["runAsUser"] == 10001


def test_every_pod_runs_locked_down_without_a_service_account_token():
    pods = _pods()
    assert set(pods) == {"redis", "remat-api", "remat-worker"}
    for name, pod in pods.items():
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == \
            "RuntimeDefault", name
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"], name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert container["livenessProbe"], name


def test_redis_needs_its_password_and_stays_below_its_memory_limit():
    [redis] = _pods()["redis"]["containers"]
    args = redis["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    env = {e["name"]: e for e in redis["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "remat-redis"
    maxmemory = int(args[args.index("--maxmemory") + 1].removesuffix("mb")) * 2**20
    assert maxmemory <= 0.8 * 2**30 and redis["resources"]["limits"]["memory"] == "1Gi"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    for name in ("remat-api", "remat-worker"):
        env = {e["name"]: e for e in _pods()[name]["containers"][0]["env"]}
        assert env["REMAT_QUEUE_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@redis:6379/0"
        assert list(env).index("REDIS_PASSWORD") < list(env).index("REMAT_QUEUE_URL")  # defined before its use
    compose = _documents(ROOT / "deploy" / "compose.yaml")[0]["services"]
    assert "--requirepass" in compose["redis"]["command"][-1] and "--maxmemory 768mb" in compose["redis"]["command"][-1]
    assert "ports" not in compose["redis"]
    assert compose["redis"]["environment"]["REDIS_PASSWORD"].startswith("${REMAT_REDIS_PASSWORD:?")


def test_only_the_api_and_the_workers_reach_redis():
    policies = {doc["metadata"]["name"]: doc["spec"] for doc in _documents(K8S / "network-policy.yaml")}
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    [rule] = policies["redis"]["ingress"]
    sources = [peer["podSelector"]["matchLabels"].get("app.kubernetes.io/name") for peer in rule["from"]]
    assert sources == ["remat-api", "remat-worker", "keda-operator"]
    assert rule["from"][2]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}
    assert "ingress" not in policies["remat-worker"]  # nothing reaches a worker
    for name in ("remat-api", "remat-worker"):
        targets = [peer for rule in policies[name]["egress"] for peer in rule["to"]]
        assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}} in targets


def test_the_api_keeps_a_replica_through_disruptions():
    [budget] = [d for d in _documents(K8S / "api.yaml") if d["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "remat-api"}


def test_workers_scale_on_the_queue_the_service_uses():
    auth, scaler = _documents(K8S / "worker-scaler.yaml")
    [worker] = _documents(K8S / "worker.yaml")
    assert scaler["apiVersion"] == "keda.sh/v1alpha1" and scaler["kind"] == "ScaledObject"
    assert scaler["spec"]["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    [trigger] = scaler["spec"]["triggers"]
    assert trigger["type"] == "redis" and trigger["metadata"]["listName"] == f"rq:queue:{Settings().queue_name}"
    assert auth["kind"] == "TriggerAuthentication" and trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert auth["spec"]["secretTargetRef"] == [{"parameter": "password", "name": "remat-redis", "key": "password"}]
    grace = worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > Settings().max_time_limit_s


def test_authentication_is_on_in_the_deployments():
    api = next(d for d in _documents(K8S / "api.yaml") if d["kind"] == "Deployment")
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
