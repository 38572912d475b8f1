"""deploy/: the Dockerfile linted, every kustomize overlay rendered offline and every
object it renders validated against a published schema; and what the manifests
promise (Triton's conventions, the sidecar's hardening, the RBAC kept to the route).

No cluster runs here: nothing below was applied to a real API server. The layout a
pod mounts is run for real by scripts/check_image_command.py (make test).
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest

import autobatch
from autobatch.controller.config import load_sidecar_config

from ..deploy_support import (
    DEPLOY,
    ROOT,
    container,
    dockerfile_instruction,
    find,
    image_command,
    materialize,
    overlays,
    render,
    tool,
    validate,
)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {p.name: render(p) for p in overlays()}


# -- the image ---------------------------------------------------------------------------------------


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("hadolint"), "--no-color", "--failure-threshold", "style", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_the_dockerfile_passes_hadolint():
    proc = hadolint(ROOT / "Dockerfile")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_fails_a_dockerfile_that_breaks_its_rules(tmp_path):
    text = (ROOT / "Dockerfile").read_text().replace(
        '"autobatch==${AUTOBATCH_VERSION}"', "autobatch"
    ).replace("USER 10001:10001", "USER root")
    bad = tmp_path / "Dockerfile"
    bad.write_text(text)
    proc = hadolint(bad)
    assert proc.returncode != 0
    assert "DL3013" in proc.stdout  # unpinned pip install
    assert "DL3002" in proc.stdout  # the last USER is root


def test_the_image_runs_the_sidecar_as_a_non_root_user_with_a_health_check():
    assert image_command() == ["autobatch", "run", "--config", "/etc/autobatch/sidecar.yaml"]
    user = dockerfile_instruction("USER").split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert "/healthz" in dockerfile_instruction("HEALTHCHECK")
    assert dockerfile_instruction("STOPSIGNAL") == "SIGTERM"
    assert dockerfile_instruction("ARG") == f"AUTOBATCH_VERSION={autobatch.__version__}"
    # Core only: no extras, so neither torch nor nvidia-pytriton goes into the image.
    assert "autobatch[" not in (ROOT / "Dockerfile").read_text()


# -- every overlay renders and validates -------------------------------------------------------------


def test_every_overlay_renders_and_every_object_is_valid(rendered):
    assert set(rendered) >= {"reload", "gateway"}
    for name, objects in rendered.items():
        assert objects, name
        assert validate(objects) == [], name


def _break(objects: list[dict], kind: str, edit) -> list[dict]:
    objects = copy.deepcopy(objects)
    edit(find(objects, kind)[0])
    return objects


@pytest.mark.parametrize(
    ("kind", "edit", "expect"),
    [
        # a core kind: a port name where Kubernetes wants an integer
        ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
            containerPort="http"), "containerPort"),
        # a core kind, strict: a misspelt field is not silently dropped
        ("Service", lambda s: s["spec"].update(selectr={"a": "b"}), "selectr"),
        # prometheus-operator's CRD: an interval Prometheus could not parse
        ("ServiceMonitor", lambda m: m["spec"]["endpoints"][0].update(interval="5 seconds"), "interval"),
    ],
)
def test_a_broken_manifest_fails_validation(rendered, kind, edit, expect):
    problems = validate(_break(rendered["reload"], kind, edit))
    assert len(problems) >= 1 and all(kind in p for p in problems)
    assert any(expect in p for p in problems), problems


def test_a_broken_route_fails_the_gateway_api_schema(rendered):
    objects = _break(rendered["gateway"], "HTTPRoute",
                     lambda r: r["spec"]["rules"][0]["backendRefs"][0].update(weight=-5))
    (problem,) = validate(objects)
    assert "HTTPRoute/triton" in problem and "weight must be >= 0" in problem


def test_a_broken_kustomization_fails_to_render(tmp_path):
    shutil.copytree(DEPLOY / "k8s", tmp_path / "k8s")
    (tmp_path / "k8s" / "overlays" / "reload" / "config" / "efficient.yaml").unlink()
    with pytest.raises(RuntimeError, match="efficient.yaml"):
        render(tmp_path / "k8s" / "overlays" / "reload")


def test_an_object_without_a_schema_is_an_error():
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    problems = validate([obj])
    assert problems and all("Widget/w" in p and "Couldn't find schema" in p for p in problems)


# -- what the manifests promise --------------------------------------------------------------------


def _triton_pods(objects: list[dict]) -> list[dict]:
    return [d for d in find(objects, "Deployment")
            if any(c["name"] == "triton" for c in d["spec"]["template"]["spec"]["containers"])]


def test_triton_follows_the_official_image_conventions(rendered):
    for name, objects in rendered.items():
        for dep in _triton_pods(objects):
            c = container(dep, "triton")
            assert c["image"].startswith("nvcr.io/nvidia/tritonserver:")
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}, name
            assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
            assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
            assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
            args = c["args"]
            assert "--model-control-mode=explicit" in args
            assert "--metrics-config=summary_latencies=true" in args
            (interval,) = [a for a in args if a.startswith("--metrics-interval-ms=")]
            assert int(interval.split("=")[1]) <= 500


def _sidecars(objects: list[dict]) -> list[tuple[dict, dict]]:
    return [(d, container(d, "autobatch")) for d in find(objects, "Deployment")
            if any(c["name"] == "autobatch" for c in d["spec"]["template"]["spec"]["containers"])]


def _failing_for_s(probe: dict) -> int:
    """How long a probe must fail before it acts (Kubernetes' defaults: every 10 s, 3 times)."""
    return probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)


def test_the_sidecar_is_hardened_and_runs_the_image_command(rendered):
    for name, objects in rendered.items():
        pairs = _sidecars(objects)
        assert len(pairs) == 1, name
        dep, c = pairs[0]
        assert c["args"] == image_command()[1:] and "command" not in c
        assert c["ports"] == [{"name": "autobatch", "containerPort": 9400, "protocol": "TCP"}]
        live, ready = c["livenessProbe"], c["readinessProbe"]
        assert live["httpGet"] == ready["httpGet"] == {"path": "/healthz", "port": "autobatch"}
        if any(x["name"] == "triton" for x in dep["spec"]["template"]["spec"]["containers"]):
            # Beside Triton the sidecar's readiness gates Triton's traffic: a stalled sidecar
            # must be restarted (liveness) before its readiness could take the pod out.
            assert _failing_for_s(ready) > _failing_for_s(live)
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert set(c["resources"]["requests"]) == {"cpu", "memory"}
        assert set(c["resources"]["limits"]) == {"cpu", "memory"}
        # The token from a Secret, sidecar.yaml and the profiles from a ConfigMap.
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        sources = volumes["autobatch-config"]["projected"]["sources"]
        (cm,) = [s["configMap"] for s in sources if "configMap" in s]
        (secret,) = [s["secret"] for s in sources if "secret" in s]
        assert [i["path"] for i in secret["items"]] == ["token"]
        assert find(objects, "ConfigMap", cm["name"]) and find(objects, "Secret", secret["name"])


def test_the_mounted_sidecar_yaml_loads_with_its_profiles_and_token(rendered, tmp_path):
    for name, objects in rendered.items():
        dep, _ = _sidecars(objects)[0]
        root = tmp_path / name
        materialize(objects, dep, "autobatch", root)
        cfg = load_sidecar_config(root / "etc" / "autobatch" / "sidecar.yaml")
        assert cfg.server.token_file is not None and cfg.server.token_file.read_text().strip()
        assert (cfg.server.host, cfg.server.port) == ("0.0.0.0", 9400)
        # The shipped profiles are the repository's, unchanged.
        for p in cfg.profiles:
            shipped = ROOT / "profiles" / cfg.model / f"{p.name}.yaml"
            assert Path(p.source).read_text() == shipped.read_text(), p.name


def test_both_metrics_ports_are_scraped(rendered):
    objects = rendered["reload"]
    (svc,) = find(objects, "Service", "triton")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "http": 8000, "grpc": 8001, "metrics": 8002, "autobatch": 9400}
    (mon,) = find(objects, "ServiceMonitor", "triton")
    assert sorted(e["port"] for e in mon["spec"]["endpoints"]) == ["autobatch", "metrics"]
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def test_reload_mode_needs_no_kubernetes_api(rendered):
    objects = rendered["reload"]
    assert not [o for o in objects if o["apiVersion"].startswith("rbac.authorization.k8s.io")]
    (dep,) = find(objects, "Deployment")
    assert dep["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def _backends(route: dict) -> list[str]:
    if route["kind"] == "HTTPRoute":
        return [b["name"] for b in route["spec"]["rules"][0]["backendRefs"]]
    return [r["destination"]["host"] for r in route["spec"]["http"][0]["route"]]


@pytest.mark.parametrize(
    ("overlay", "kind", "group", "resource"),
    [
        ("gateway", "HTTPRoute", "gateway.networking.k8s.io", "httproutes"),
        ("gateway-istio", "VirtualService", "networking.istio.io", "virtualservices"),
    ],
)
def test_gateway_mode_two_pools_a_route_and_only_the_rbac_its_patches_need(
    rendered, tmp_path, overlay, kind, group, resource
):
    objects = rendered[overlay]
    pools = {d["metadata"]["labels"]["pool"]: d for d in _triton_pods(objects)}
    assert set(pools) == {"latency", "throughput"}
    for pool, dep in pools.items():
        assert f"--model-repository=/models/{pool}" in container(dep, "triton")["args"]
        assert [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]] == ["triton"]
        (mon,) = find(objects, "ServiceMonitor", f"triton-{pool}")
        assert mon["spec"]["selector"]["matchLabels"]["pool"] == pool
        assert mon["spec"]["targetLabels"] == ["pool"]
    (route,) = find(objects, kind)
    services = {f"{s['metadata']['name']}.serving.svc.cluster.local" if kind == "VirtualService"
                else s["metadata"]["name"] for s in find(objects, "Service")}
    assert set(_backends(route)) == {b for b in services if "triton-" in b}
    # The controller's config names this route and these backends.
    dep, _ = _sidecars(objects)[0]
    materialize(objects, dep, "autobatch", tmp_path)
    cfg = load_sidecar_config(tmp_path / "etc" / "autobatch" / "sidecar.yaml")
    gw = cfg.actuator.gateway
    assert gw is not None and gw.kubernetes is not None and gw.kubernetes.apply == "api"
    assert gw.kubernetes.route == route["metadata"]["name"]
    assert sorted(v.target for v in gw.variants) == sorted(_backends(route))
    assert {v.target: dict(v.selector) for v in gw.variants} == {
        b: {"pool": "latency" if "latency" in b else "throughput"} for b in _backends(route)}
    # RBAC: get and patch on that one route, for the controller's service account only.
    assert not find(objects, "ClusterRole") and not find(objects, "ClusterRoleBinding")
    (role,) = find(objects, "Role")
    assert role["rules"] == [{"apiGroups": [group], "resources": [resource],
                              "resourceNames": [route["metadata"]["name"]], "verbs": ["get", "patch"]}]
    (binding,) = find(objects, "RoleBinding")
    (sa,) = find(objects, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": "serving"}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert dep["spec"]["replicas"] == 1  # two controllers would fight over the weights


def test_every_overlay_is_documented():
    text = (ROOT / "docs" / "deploy.md").read_text()
    assert "kubectl apply -k deploy/k8s/overlays/reload" in text
    for p in overlays():
        assert f"overlays/{p.name}" in text, p.name


def test_fleet_mode_one_controller_reloading_the_replicas_of_a_service(rendered, tmp_path):
    objects = rendered["fleet"]
    (triton,) = _triton_pods(objects)
    assert triton["spec"]["replicas"] > 1
    assert [c["name"] for c in triton["spec"]["template"]["spec"]["containers"]] == ["triton"]
    dep, _ = _sidecars(objects)[0]
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    materialize(objects, dep, "autobatch", tmp_path)
    cfg = load_sidecar_config(tmp_path / "etc" / "autobatch" / "sidecar.yaml")
    assert cfg.signals.source == "prometheus"
    replicas = cfg.actuator.replicas
    assert replicas is not None and replicas.service is not None
    (svc,) = find(objects, "Service", replicas.service)
    assert {p["name"] for p in svc["spec"]["ports"]} >= {replicas.http_port, replicas.grpc_port}
    assert svc["spec"]["selector"].items() <= triton["spec"]["template"]["metadata"]["labels"].items()
    assert [p.name for p in cfg.profiles] == ["latency-soft", "balanced", "aggressive"]
    # RBAC: list EndpointSlices in the namespace, nothing else.
    assert not find(objects, "ClusterRole") and not find(objects, "ClusterRoleBinding")
    (role,) = find(objects, "Role")
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["list"]}]
    (binding,) = find(objects, "RoleBinding")
    assert binding["subjects"][0]["name"] == dep["spec"]["template"]["spec"]["serviceAccountName"]
