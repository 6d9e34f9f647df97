"""deploy/: the Kubernetes manifests validate offline against the Kubernetes schemas
(kubernetes-validate, strict: an unknown field is an error), and they agree with each other
and with `forge-record serve` (probe paths, ports, options, the Secret's keys)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import require

from forge_record.addons.gateway import OWN_PATHS
from forge_record.commands.serve import serve

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
MANIFESTS = sorted(p for p in (DEPLOY / "kubernetes").glob("*.yaml")
                   if p.name != "kustomization.yaml")


def documents() -> list[dict]:
    return [d for p in MANIFESTS for d in yaml.safe_load_all(p.read_text()) if d]


def by_kind(kind: str) -> list[dict]:
    return [d for d in documents() if d["kind"] == kind]


def test_manifests_validate_against_the_kubernetes_schemas():
    try:
        import kubernetes_validate
    except ImportError:
        kubernetes_validate = None
    require(kubernetes_validate is not None, "kubernetes-validate is not installed")
    version = kubernetes_validate.latest_version()
    kinds = set()
    for doc in documents():
        kubernetes_validate.validate(doc, version, strict=True)
        kinds.add(doc["kind"])
    assert kinds >= {"Deployment", "Service", "Secret", "NetworkPolicy",
                     "HorizontalPodAutoscaler"}


def test_kustomization_lists_every_manifest():
    listed = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    assert sorted(listed["resources"]) == sorted(p.name for p in MANIFESTS)


def test_the_deployment_runs_serve_as_it_is():
    (deployment,) = by_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] in OWN_PATHS
    assert container["readinessProbe"]["httpGet"]["path"] in OWN_PATHS
    assert "preStop" in container["lifecycle"]
    options = {o for p in serve.params for o in p.opts}
    for arg in container["args"]:
        assert arg.split("=", 1)[0] in options, arg
    drain = next(a for a in container["args"] if a.startswith("--drain-timeout="))
    assert pod["terminationGracePeriodSeconds"] > float(drain.split("=")[1])
    (secret,) = by_kind("Secret")
    keys = set(secret["stringData"])
    used = {i["key"] for v in pod["volumes"] if "secret" in v for i in v["secret"]["items"]}
    used |= {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]}
    assert used == keys
    (service,) = by_kind("Service")
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("policy", by_kind("NetworkPolicy"), ids=lambda p: p["metadata"]["name"])
def test_rollout_pods_reach_only_the_gateway(policy):
    if "Egress" not in policy["spec"]["policyTypes"]:
        return
    targets = [t for rule in policy["spec"]["egress"] for t in rule["to"]]
    gateway = {"app.kubernetes.io/name": "forge-record"}
    dns = {"k8s-app": "kube-dns"}
    assert all(t["podSelector"]["matchLabels"] in (gateway, dns) for t in targets)
