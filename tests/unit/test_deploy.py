"""deploy/: the Dockerfile linted, every kustomize overlay rendered offline and every
object it renders validated against a published schema; and what the manifests
promise: Triton's conventions and its locked control APIs, every pod at the Pod Security
"restricted" level, checkov's Kubernetes checks passed (waivers in docs/deploy.md), the
disruption budget, network policies and GPU, the model named in one place, the RBAC kept
to the route.

No cluster runs here: nothing below was applied to a real API server. The layout a
pod mounts is run for real by scripts/check_image_command.py (make test), the overlay's
Triton command against the real Triton by tests/integration/test_restricted_api.py, and
the image by tests/integration/test_image.py (make image-test).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import autobatch
from autobatch.controller.config import load_sidecar_config

from ..deploy_support import (
    DEPLOY,
    ROOT,
    container,
    container_env,
    dockerfile_instruction,
    expand,
    find,
    image_command,
    materialize,
    overlays,
    pod_security_violations,
    render,
    tool,
    validate,
    workloads,
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
    text = (ROOT / "Dockerfile").read_text()
    versions = re.findall(r"^ARG AUTOBATCH_VERSION=(\S+)$", text, re.M)
    assert versions and set(versions) == {autobatch.__version__}
    # Core only: no extras, so neither torch nor nvidia-pytriton goes into the image.
    assert "autobatch[" not in text
    labels = dict(re.findall(r"(org\.opencontainers\.image\.[a-z.]+)=\"([^\"]*)\"", text))
    assert {"title", "description", "version", "revision", "licenses", "base.name"} == {
        k.removeprefix("org.opencontainers.image.") for k in labels}
    assert labels["org.opencontainers.image.version"] == "${AUTOBATCH_VERSION}"


LOCK = ROOT / "deploy" / "image" / "requirements.lock"


def _lock(path: Path) -> dict[str, tuple[str, int]]:
    """``name: (version, hashes)`` of a pip-compile lock."""
    out: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", path.read_text()):
        m = re.match(r"([A-Za-z0-9._-]+)==(\S+)", block)
        if m:
            out[m.group(1).lower().replace("_", "-")] = (m.group(2), block.count("--hash=sha256:"))
    return out


def test_the_image_installs_only_hash_locked_packages_that_satisfy_pyproject():
    import tomllib
    from packaging.requirements import Requirement

    text = (ROOT / "Dockerfile").read_text()
    assert text.count("--require-hashes -r") == 2  # the build tools and the runtime set
    assert "-r requirements.lock" in text and "-r build.lock" in text
    # The only other install is autobatch's own wheel, built here, without dependencies.
    assert re.search(r'pip install --no-cache-dir --no-deps --no-index --find-links=/wheels "autobatch==',
                     text)
    locked = _lock(LOCK)
    assert all(hashes >= 1 for _, hashes in locked.values()), locked
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in map(Requirement, core):
        name = dep.name.lower().replace("_", "-")
        assert name in locked, f"{dep} is not in {LOCK.name}: run scripts/lock-image.sh"
        assert dep.specifier.contains(locked[name][0]), f"{dep}: the lock pins {locked[name][0]}"
    build = _lock(ROOT / "deploy" / "image" / "build.lock")
    assert {"setuptools", "wheel"} <= set(build) and all(h >= 1 for _, h in build.values())


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


def _settings(objects: list[dict]) -> dict[str, str]:
    (cm,) = find(objects, "ConfigMap", _generated(objects, "ConfigMap", "autobatch-settings"))
    return dict(cm["data"])


def _generated(objects: list[dict], kind: str, name: str) -> str:
    """The rendered name of a generated object (kustomize appends a hash)."""
    (found,) = [o["metadata"]["name"] for o in find(objects, kind)
                if o["metadata"]["name"].rsplit("-", 1)[0] == name]
    return found


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
            env = container_env(objects, dep, "triton")
            args = [expand(a, env) for a in c["args"]]
            assert "--model-control-mode=explicit" in args
            assert f"--load-model={_settings(objects)['model']}" in args
            assert "--metrics-config=summary_latencies=true" in args
            (interval,) = [a for a in args if a.startswith("--metrics-interval-ms=")]
            assert int(interval.split("=")[1]) <= 500


RESTRICTED = {"model-repository", "model-config", "statistics", "trace", "logging", "shared-memory"}
"""What the overlays lock: every group that changes the server or reads its internals
(tests/integration/test_restricted_api.py starts the real Triton with the same)."""


def test_triton_starts_with_its_control_apis_locked_and_both_containers_get_the_key(rendered, tmp_path):
    from ..integration.test_restricted_api import GROUPS

    assert set(GROUPS.split(",")) == RESTRICTED
    for name, objects in rendered.items():
        key_secret = _generated(objects, "Secret", "triton-api-key")
        for dep in _triton_pods(objects):
            c = container(dep, "triton")
            env = container_env(objects, dep, "triton")
            assert set(env["TRITON_RESTRICTED_APIS"].split(",")) == RESTRICTED, name
            script = expand(c["command"][2], env)
            for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
                assert f'{flag}="$TRITON_RESTRICTED_APIS:$TRITON_RESTRICTED_HEADER=$key"' in script
            assert c["command"][:2] == ["/bin/sh", "-c"] and c["command"][3] == "tritonserver"
            assert 'exec tritonserver "$@"' in script
            volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
            mounts = [m for m in c["volumeMounts"] if volumes[m["name"]].get("secret", {}).get("secretName")
                      == key_secret]
            assert len(mounts) == 1 and mounts[0]["readOnly"] is True
            assert f"$(cat {mounts[0]['mountPath']}/key)" in script
        # Whoever reloads the model (the sidecar, the fleet controller) reads the same Secret
        # and sends the header Triton checks; the gateway's controller never talks to Triton.
        dep, _ = _sidecars(objects)[0]
        cfg = _mounted_config(objects, dep, tmp_path / name)
        if name.startswith("gateway"):
            assert cfg.triton.restricted_api is None
            assert key_secret not in json.dumps(dep["spec"]["template"]["spec"]["volumes"])
            continue
        api = cfg.triton.restricted_api
        assert api is not None
        (triton,) = _triton_pods(objects)
        assert api.header == container_env(objects, triton, "triton")["TRITON_RESTRICTED_HEADER"]
        (secret,) = find(objects, "Secret", key_secret)
        assert api.key == base64.b64decode(secret["data"]["key"]).decode().strip()


def _mounted_config(objects: list[dict], dep: dict, root: Path):
    """The sidecar's (or controller's) config as its container sees it: files and environment."""
    materialize(objects, dep, "autobatch", root)
    model = container_env(objects, dep, "autobatch").get("AUTOBATCH_MODEL")
    return load_sidecar_config(root / "etc" / "autobatch" / "sidecar.yaml", model=model)


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
        # The token (and Triton's key) from Secrets, sidecar.yaml and the profiles from a ConfigMap.
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        sources = volumes["autobatch-config"]["projected"]["sources"]
        (cm,) = {s["configMap"]["name"] for s in sources if "configMap" in s}
        secrets = {i["path"]: s["secret"]["name"]
                   for s in sources if "secret" in s for i in s["secret"]["items"]}
        assert set(secrets) == ({"token"} if name.startswith("gateway") else {"token", "triton-api-key"})
        assert find(objects, "ConfigMap", cm)
        assert all(find(objects, "Secret", s) for s in secrets.values())


def test_the_mounted_sidecar_yaml_loads_with_its_profiles_and_token(rendered, tmp_path):
    for name, objects in rendered.items():
        dep, _ = _sidecars(objects)[0]
        cfg = _mounted_config(objects, dep, tmp_path / name)
        assert cfg.model == _settings(objects)["model"]
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
    cfg = _mounted_config(objects, dep, tmp_path)
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
    cfg = _mounted_config(objects, dep, tmp_path)
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


# -- Pod Security "restricted", checkov, disruption, network, GPU ----------------------------------


def test_every_pod_of_every_overlay_meets_the_restricted_pod_security_level(rendered):
    checked = 0
    for name, objects in rendered.items():
        for w in workloads(objects):
            spec = w["spec"]["template"]["spec"]
            assert pod_security_violations(spec, f"{name}/{w['metadata']['name']}") == []
            # Beyond the level: nothing writes to an image's root file system.
            for c in spec["containers"]:
                assert c["securityContext"]["readOnlyRootFilesystem"] is True, (name, c["name"])
            checked += len(spec["containers"])
    assert checked >= 10  # reload 2, fleet 2, gateway 3, gateway-istio 3


def _pod(rendered) -> dict:
    (dep,) = find(rendered["reload"], "Deployment", "triton")
    return copy.deepcopy(dep["spec"]["template"]["spec"])


@pytest.mark.parametrize(
    ("container_name", "edit", "expect"),
    [
        ("triton", lambda c: c["securityContext"].pop("allowPrivilegeEscalation"), "PrivilegeEscalation"),
        ("autobatch", lambda c: c["securityContext"].pop("allowPrivilegeEscalation"), "PrivilegeEscalation"),
        ("triton", lambda c: c["securityContext"]["capabilities"].pop("drop"), "capabilities.drop"),
        ("autobatch", lambda c: c["securityContext"].pop("capabilities"), "capabilities.drop"),
        ("triton", lambda c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "SYS_ADMIN"),
        ("triton", lambda c: c["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
        ("autobatch", lambda c: c["securityContext"].update(runAsUser=0), "runAsUser"),
        ("triton", lambda c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccomp"),
        ("triton", lambda c: c["securityContext"].update(privileged=True), "privileged"),
        ("autobatch", lambda c: c["ports"][0].update(hostPort=9400), "hostPort"),
    ],
)
def test_the_pod_security_check_fails_a_container_that_lacks_a_required_field(rendered, container_name, edit,
                                                                              expect):
    spec = _pod(rendered)
    assert pod_security_violations(spec) == []
    edit(next(c for c in spec["containers"] if c["name"] == container_name))
    problems = pod_security_violations(spec)
    assert problems and all(container_name in p for p in problems) and any(expect in p for p in problems)


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        # runAsNonRoot and seccomp may sit on the pod for every container: off the pod and off
        # a container that does not set its own, they are missing.
        (lambda s: (s["securityContext"].pop("runAsNonRoot"),
                    s["containers"][1]["securityContext"].pop("runAsNonRoot")), "runAsNonRoot"),
        (lambda s: (s["securityContext"].pop("seccompProfile"),
                    s["containers"][0]["securityContext"].pop("seccompProfile")), "seccompProfile"),
        (lambda s: s.update(hostNetwork=True), "hostNetwork"),
        (lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "hostPath"),
    ],
)
def test_the_pod_security_check_fails_a_pod_that_breaks_the_level(rendered, edit, expect):
    spec = _pod(rendered)
    edit(spec)
    assert any(expect in p for p in pod_security_violations(spec))


WAIVER_ROW = re.compile(r"^\| `(CKV2?_K8S_\d+)` \| ([^|]+) \| ([^|]{40,}) \|$", re.M)


def checkov_waivers() -> dict[str, str]:
    """The waivers docs/deploy.md lists, each with its reason: `| `CKV_K8S_n` | title | reason |`."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split("### checkov's waivers", 1)[1].split("\n#", 1)[0]
    return {m.group(1): m.group(3).strip() for m in WAIVER_ROW.finditer(section)}


def checkov(directory: Path) -> list[dict]:
    """checkov's Kubernetes checks on every file of ``directory``, offline: one report each."""
    binary = ROOT / ".venv-checkov" / "bin" / "checkov"
    assert binary.exists(), "checkov is missing: scripts/checkov.sh installs it (make test runs it)"
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    args = ["--compact", "--skip-download", "--framework", "kubernetes", "-o", "json", "-d", str(directory)]
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    return report if isinstance(report, list) else [report]


def test_checkov_passes_every_rendered_overlay_but_the_documented_waivers(rendered, tmp_path):
    waivers = checkov_waivers()
    assert 1 <= len(waivers) <= 3, waivers
    for name, objects in rendered.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(objects))
    (report,) = checkov(tmp_path)  # one run over all four: checkov's start-up is most of its time
    failed = report["results"]["failed_checks"]
    scanned = {f["file_path"].rsplit("/", 1)[-1] for f in failed + report["results"]["passed_checks"]}
    assert scanned == {f"{name}.yaml" for name in rendered}
    assert [(f["check_id"], f["resource"]) for f in failed if f["check_id"] not in waivers] == []
    assert report["summary"]["passed"] > 200
    # Each waiver is needed (its check fails without it), none is stale.
    assert {f["check_id"] for f in failed} == set(waivers)


def test_a_fleet_keeps_all_but_one_replica_through_a_drain(rendered):
    for name, objects in rendered.items():
        budgets = find(objects, "PodDisruptionBudget")
        for dep in find(objects, "Deployment"):
            labels = dep["spec"]["template"]["metadata"]["labels"]
            covering = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
            if dep["spec"].get("replicas", 1) > 1:
                assert len(covering) == 1 and covering[0]["spec"]["maxUnavailable"] == 1, name
            else:
                # A budget on one replica would block every drain.
                assert covering == [], (name, dep["metadata"]["name"])
    assert find(rendered["fleet"], "PodDisruptionBudget")


def _admits(policy: dict, port: str, *, namespace: dict[str, str], pod: dict[str, str]) -> bool:
    """Does ``policy`` let a pod with labels ``pod`` in a namespace with labels ``namespace``
    (the policy's own when empty) reach ``port`` (a port name)? Only the selectors used here."""

    def matches(selector: dict, labels: dict[str, str]) -> bool:
        ok = all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
        for e in selector.get("matchExpressions") or []:
            ok = ok and e["operator"] == "In" and labels.get(e["key"]) in e["values"]
        return ok

    for rule in policy["spec"]["ingress"]:
        if port not in [p["port"] for p in rule["ports"]]:
            continue
        for peer in rule["from"]:
            ns_ok = (matches(peer["namespaceSelector"], namespace) if "namespaceSelector" in peer
                     else not namespace)
            pod_ok = matches(peer["podSelector"], pod) if "podSelector" in peer else True
            if ns_ok and pod_ok:
                return True
    return False


def test_network_policies_admit_clients_to_inference_and_prometheus_to_metrics_only(rendered):
    prometheus = {"namespace": {"kubernetes.io/metadata.name": "monitoring"},
                  "pod": {"app.kubernetes.io/name": "prometheus"}}
    stranger = {"namespace": {"kubernetes.io/metadata.name": "elsewhere"}, "pod": {"app": "x"}}
    client = {"namespace": {"autobatch.dev/inference-clients": "true"}, "pod": {"app": "gateway"}}
    neighbour = {"namespace": {}, "pod": {"app": "client"}}  # same namespace
    for name, objects in rendered.items():
        policies = find(objects, "NetworkPolicy")
        for w in workloads(objects):
            labels = w["spec"]["template"]["metadata"]["labels"]
            (policy,) = [p for p in policies
                         if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
            assert policy["spec"]["policyTypes"] == ["Ingress"]
            ports = {p["name"] for c in w["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
            for port in ports:
                inference = port in ("http", "grpc")
                assert _admits(policy, port, **neighbour), (name, port)
                assert _admits(policy, port, **client) is inference, (name, port)
                assert _admits(policy, port, **prometheus) is not inference, (name, port)
                assert not _admits(policy, port, **stranger), (name, port)


def test_every_triton_gets_one_gpu_and_tolerates_the_gpu_taint(rendered):
    for name, objects in rendered.items():
        for dep in _triton_pods(objects):
            c = container(dep, "triton")
            assert c["resources"]["limits"]["nvidia.com/gpu"] == 1, name
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
                dep["spec"]["template"]["spec"]["tolerations"]
        for dep in find(objects, "Deployment"):
            if dep not in _triton_pods(objects):
                assert "nvidia.com/gpu" not in json.dumps(dep), name


# -- one place for the model and the Prometheus release ----------------------------------------


RUNBOOKS = "https://git.example.com/platform/autobatch/blob/v0.1.0/docs/runbook.md"


def test_renaming_the_model_and_the_release_is_one_edit_per_overlay(tmp_path):
    shutil.copytree(DEPLOY / "k8s", tmp_path / "k8s")
    for overlay in overlays(tmp_path / "k8s" / "overlays"):
        path = overlay / "kustomization.yaml"
        text = path.read_text()
        assert text.count("model=dense_mlp") == 1
        assert text.count("prometheus-release=kube-prometheus-stack") == 1
        assert text.count("runbooks=docs/runbook.md") == 1
        path.write_text(text.replace("model=dense_mlp", "model=resnet50")
                        .replace("prometheus-release=kube-prometheus-stack", "prometheus-release=prom")
                        .replace("runbooks=docs/runbook.md", f"runbooks={RUNBOOKS}"))
        objects = render(overlay)
        assert validate(objects) == [], overlay.name
        for dep in _triton_pods(objects):
            env = container_env(objects, dep, "triton")
            assert "--load-model=resnet50" in [expand(a, env) for a in container(dep, "triton")["args"]]
        dep, _ = _sidecars(objects)[0]
        assert _mounted_config(objects, dep, tmp_path / overlay.name).model == "resnet50"
        for route in find(objects, "HTTPRoute"):
            assert route["spec"]["rules"][0]["matches"][0]["path"]["value"] == "/v2/models/resnet50"
        monitoring = [o for o in objects if o["apiVersion"].startswith("monitoring.coreos.com/")]
        assert len(monitoring) >= 2 and all(o["metadata"]["labels"]["release"] == "prom" for o in monitoring)
        # Every alert links its own section of the runbook, at the address the setting gives.
        (rule,) = find(objects, "PrometheusRule")
        alerts = [r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
        assert len(alerts) >= 7
        assert [a["annotations"]["runbook_url"] for a in alerts] == [
            f"{RUNBOOKS}#{a['alert'].lower()}" for a in alerts], overlay.name
        # Nothing else names the old model: only the profiles' own comments, which describe them.
        profiles = _generated(objects, "ConfigMap", "autobatch-config")
        rest = [o for o in objects if o["metadata"]["name"] != profiles]
        assert "dense_mlp" not in json.dumps(rest), overlay.name


def test_every_overlay_ships_the_alert_rules_and_the_dashboard(rendered):
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())["groups"]
    board = json.loads((DEPLOY / "grafana" / "autobatch.json").read_text())
    for name, objects in rendered.items():
        (rule,) = find(objects, "PrometheusRule")
        assert rule["spec"]["groups"] == rules, name  # one source: rules.yaml
        (cm,) = find(objects, "ConfigMap", "autobatch-dashboard")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(cm["data"]["autobatch.json"]) == board, name
        for monitor in find(objects, "ServiceMonitor"):
            assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"

