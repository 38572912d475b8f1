"""Kubernetes route weights: the shipped route and patches checked against the published
CRD schemas, offline, and the apply path against a fake API server.

There is no Kubernetes cluster here, so the in-cluster path (token, CA, PATCH
through the API server) is tested only against an ``httpx.MockTransport``
standing in for the API server; no real API server has seen these patches.

The HTTPRoute is the one ``deploy/k8s/overlays/gateway`` renders; it and every
patched route are validated against the Gateway API's published CRD schema, and
the VirtualService (tests/data/k8s: one Service, pools as DestinationRule subsets)
against Istio's, both through ``scripts/crd-schemas`` (tests/deploy_support.py).
JSON Patch documents are checked against the schema below, written here from
RFC 6902: no package ships one.
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from pathlib import Path

import httpx
import jsonschema
import pytest
import yaml

from autobatch.actuators.gateway import GatewayActuator, GatewayFailure, Variant
from autobatch.actuators.gateway.kubernetes import (
    GRPCROUTE,
    HTTPROUTE,
    JSON_PATCH,
    VIRTUALSERVICE,
    InCluster,
    KubernetesApi,
    KubernetesRoute,
    RouteRef,
    apply_json_patch,
    load_manifest,
    read_weights,
    weight_patch,
)
from autobatch.actuators.gateway.settings import build_gateway_actuator
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.errors import ConfigError
from autobatch.profiles import load_profiles

from ..conftest import PROFILES, ROOT
from ..deploy_support import OVERLAYS, find, render, validate_custom

VIRTUALSERVICE_SUBSETS = ROOT / "tests" / "data" / "k8s" / "virtualservice-subsets.yaml"

JSON_PATCH_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["op", "path"],
        "properties": {
            "op": {"enum": ["add", "remove", "replace", "move", "copy", "test"]},
            "path": {"type": "string", "pattern": "^(/([^/~]|~[01])*)*$"},
            "from": {"type": "string"},
            "value": {},
        },
        "allOf": [
            {"if": {"properties": {"op": {"enum": ["add", "replace", "test"]}}},
             "then": {"required": ["value"]}},
            {"if": {"properties": {"op": {"enum": ["move", "copy"]}}}, "then": {"required": ["from"]}},
        ],
        "additionalProperties": False,
    },
}


def check(instance, schema) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(instance)


def published(*objects: dict) -> None:
    """Each object is valid under its CRD's published schema."""
    results = validate_custom(list(objects))
    assert [r.get("ok") for r in results] == [True] * len(objects), results


@functools.cache
def httproute_manifest() -> Path:
    """The gateway overlay's HTTPRoute as rendered (namespace serving), in a file."""
    (route,) = find(render(OVERLAYS / "gateway"), "HTTPRoute")
    path = Path(tempfile.mkdtemp(prefix="autobatch-httproute-")) / "httproute.yaml"
    path.write_text(yaml.safe_dump(route))
    return path


HTTP_REF = RouteRef(HTTPROUTE, "serving", "triton")
VS_REF = RouteRef(VIRTUALSERVICE, "serving", "triton")
VS_HOST = "triton.serving.svc.cluster.local"


# -- the shipped manifests ----------------------------------------------------------------------------


def test_the_manifests_are_valid_under_the_published_schemas():
    route = load_manifest(httproute_manifest(), HTTP_REF)
    docs = [d for d in yaml.safe_load_all(VIRTUALSERVICE_SUBSETS.read_text()) if d]
    published(route, *docs)
    vs = next(d for d in docs if d["kind"] == "VirtualService")
    assert sum(r["weight"] for r in vs["spec"]["http"][0]["route"]) == 100


# -- patches ---------------------------------------------------------------------------------------


def test_an_httproute_patch_is_a_valid_json_patch_that_yields_a_valid_route():
    route = load_manifest(httproute_manifest(), HTTP_REF)
    assert read_weights(route, HTTP_REF) == {"triton-latency": 100.0, "triton-throughput": 0.0}
    ops = weight_patch(route, HTTP_REF, {"triton-latency": 75, "triton-throughput": 25})
    check(ops, JSON_PATCH_SCHEMA)
    assert ops[:2] == [
        {"op": "test", "path": "/spec/rules/0/backendRefs/0/name", "value": "triton-latency"},
        {"op": "add", "path": "/spec/rules/0/backendRefs/0/weight", "value": 75},
    ]
    after = apply_json_patch(route, ops)
    published(after)
    assert read_weights(after, HTTP_REF) == {"triton-latency": 75.0, "triton-throughput": 25.0}
    assert after["spec"]["rules"][0]["matches"] == route["spec"]["rules"][0]["matches"]  # untouched


def test_a_reordered_route_fails_the_patch_instead_of_moving_the_wrong_weight():
    route = load_manifest(httproute_manifest(), HTTP_REF)
    ops = weight_patch(route, HTTP_REF, {"triton-latency": 0, "triton-throughput": 100})
    moved = copy.deepcopy(route)
    moved["spec"]["rules"][0]["backendRefs"].reverse()
    with pytest.raises(ValueError, match="test failed"):
        apply_json_patch(moved, ops)


def test_a_grpcroute_is_patched_like_an_httproute():
    route = load_manifest(httproute_manifest(), HTTP_REF)
    route["kind"] = "GRPCRoute"
    del route["spec"]["rules"][0]["matches"]
    ref = RouteRef(GRPCROUTE, "serving", "triton")
    assert ref.path == "/apis/gateway.networking.k8s.io/v1/namespaces/serving/grpcroutes/triton"
    after = apply_json_patch(route, weight_patch(route, ref, {"triton-latency": 50, "triton-throughput": 50}))
    published(after)
    assert read_weights(after, ref) == {"triton-latency": 50.0, "triton-throughput": 50.0}


def test_a_virtualservice_patch_tests_host_and_subset_and_keeps_the_sum_at_100():
    vs = load_manifest(VIRTUALSERVICE_SUBSETS, VS_REF)
    lat, thr = f"{VS_HOST}/latency", f"{VS_HOST}/throughput"
    assert read_weights(vs, VS_REF) == {lat: 100.0, thr: 0.0}
    # A first step when nobody else holds weight: the planner gives 25 to the target
    # and 0 to the rest, which Istio would refuse; the patch is normalised to 100.
    ops = weight_patch(vs, VS_REF, {lat: 0, thr: 25})
    check(ops, JSON_PATCH_SCHEMA)
    assert {"op": "test", "path": "/spec/http/0/route/1/destination/subset", "value": "throughput"} in ops
    after = apply_json_patch(vs, ops)
    published(after)
    weights = [r["weight"] for r in after["spec"]["http"][0]["route"]]
    assert weights == [0, 100] and sum(weights) == 100
    ops = weight_patch(vs, VS_REF, {lat: 75, thr: 25})
    assert [r["weight"] for r in apply_json_patch(vs, ops)["spec"]["http"][0]["route"]] == [75, 25]


def test_unknown_backends_and_rules_are_named():
    route = load_manifest(httproute_manifest(), HTTP_REF)
    with pytest.raises(GatewayFailure, match="has no backend 'nope'"):
        weight_patch(route, HTTP_REF, {"nope": 100})
    with pytest.raises(GatewayFailure, match="the route has 1 rules; set `rule`"):
        read_weights(route, RouteRef(HTTPROUTE, "serving", "triton", rule=3))
    with pytest.raises(ConfigError, match="no HTTPRoute named serving/other"):
        load_manifest(httproute_manifest(), RouteRef(HTTPROUTE, "serving", "other"))


# -- the actuator: printing -----------------------------------------------------------------------


def ladder():
    profiles = load_profiles(PROFILES / "dense_mlp")
    return [profiles["latency-soft"], profiles["aggressive"]]


VARIANTS = {
    "latency-soft": Variant("latency-soft", "triton-latency", "dense_mlp"),
    "aggressive": Variant("aggressive", "triton-throughput", "dense_mlp"),
}


async def test_without_a_cluster_the_patch_is_printed_as_a_kubectl_line():
    lines: list[str] = []
    route = KubernetesRoute(HTTP_REF, manifest=load_manifest(httproute_manifest(), HTTP_REF),
                            out=lines.append)
    act = GatewayActuator(ladder(), VARIANTS, route)
    assert await act.live_profile() == "latency-soft"
    result = await act.apply(ladder()[1])
    assert result.ok and result.reason == "dry_run" and "nothing was applied" in result.message
    (line,) = lines
    assert line.startswith(
        "kubectl -n serving patch httproutes.gateway.networking.k8s.io triton --type json -p '"
    )
    ops = json.loads(line.split(" -p ", 1)[1].strip("'"))
    check(ops, JSON_PATCH_SCHEMA)
    assert ops[1] == {"op": "add", "path": "/spec/rules/0/backendRefs/0/weight", "value": 0}
    assert await act.live_profile() == "aggressive"
    assert (await act.apply(ladder()[1])).reason == "unchanged" and len(lines) == 1


# -- the actuator: a fake API server ---------------------------------------------------------------


class FakeApiServer:
    """Holds one route; answers GET and JSON-PATCH like the API server would."""

    def __init__(self, obj: dict, token: str) -> None:
        self.obj = obj
        self.token = token
        self.requests: list[httpx.Request] = []
        self.forbid = False

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return httpx.Response(401, json={"kind": "Status", "message": "Unauthorized"})
        if request.url.path != HTTP_REF.path:
            return httpx.Response(404, json={"kind": "Status", "message": "not found"})
        if request.method == "GET":
            return httpx.Response(200, json=self.obj)
        if request.method != "PATCH":
            return httpx.Response(405)
        if self.forbid:
            return httpx.Response(403, json={"kind": "Status", "message": "httproutes is forbidden"})
        if request.headers.get("Content-Type") != JSON_PATCH:
            return httpx.Response(415, json={"kind": "Status", "message": "unsupported media type"})
        ops = json.loads(request.content)
        try:
            jsonschema.validate(ops, JSON_PATCH_SCHEMA)
            patched = apply_json_patch(self.obj, ops)
        except (ValueError, jsonschema.ValidationError) as exc:
            return httpx.Response(422, json={"kind": "Status", "message": str(exc)[:200]})
        # The API server checks a patched custom resource against its CRD's schema.
        (result,) = validate_custom([patched])
        if result.get("ok") is not True:
            return httpx.Response(422, json={"kind": "Status", "message": str(result.get("error"))[:200]})
        self.obj = patched
        return httpx.Response(200, json=self.obj)


def fake_server() -> FakeApiServer:
    return FakeApiServer(load_manifest(httproute_manifest(), HTTP_REF), "token-1")


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[dict[str, str], Path]:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("token-1\n")
    (sa / "ca.crt").write_text("not read by the fake client\n")
    (sa / "namespace").write_text("serving\n")
    return {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, sa


def test_in_cluster_detection(cluster, tmp_path):
    env, sa = cluster
    found = InCluster.detect(env, sa)
    assert found == InCluster("https://10.0.0.1:443", sa / "token", sa / "ca.crt", "serving")
    assert InCluster.detect({"KUBERNETES_SERVICE_HOST": "fd00::1"}, sa).base_url == "https://[fd00::1]:443"
    assert InCluster.detect({}, sa) is None
    assert InCluster.detect(env, tmp_path / "none") is None


async def test_in_cluster_the_patch_goes_through_the_api_server(cluster):
    env, sa = cluster
    server = fake_server()
    made: list[tuple[str, Path]] = []

    def factory(base_url: str, ca_path: Path, timeout_s: float) -> httpx.AsyncClient:
        made.append((base_url, ca_path))
        return httpx.AsyncClient(base_url=base_url, transport=httpx.MockTransport(server.handler))

    api = KubernetesApi(InCluster.detect(env, sa), client_factory=factory)
    act = GatewayActuator(ladder(), VARIANTS, KubernetesRoute(HTTP_REF, api=api), steps=(25, 50, 100))
    try:
        result = await act.apply(ladder()[1])
        assert result.ok and result.reason == "applied", result.message
        assert made == [("https://10.0.0.1:443", sa / "ca.crt")]
        patches = [r for r in server.requests if r.method == "PATCH"]
        assert len(patches) == 3 and all(r.headers["Content-Type"] == JSON_PATCH for r in patches)
        assert read_weights(server.obj, HTTP_REF) == {"triton-latency": 0.0, "triton-throughput": 100.0}
        assert await act.live_profile() == "aggressive"

        # The kubelet rotates the token; the next request carries the new one.
        (sa / "token").write_text("token-2\n")
        server.token = "token-2"
        assert await act.reconcile(ladder()[1]) is None

        server.forbid = True
        refused = await act.apply(ladder()[0])
        assert not refused.ok and refused.reason == "rejected" and "RBAC" in refused.message
        assert read_weights(server.obj, HTTP_REF) == {"triton-latency": 0.0, "triton-throughput": 100.0}

        server.forbid = False
        # Someone reordered the backends and put the traffic back on latency meanwhile.
        refs = server.obj["spec"]["rules"][0]["backendRefs"]
        refs.reverse()
        refs[0]["weight"], refs[1]["weight"] = 0, 100
        assert [r["name"] for r in refs] == ["triton-throughput", "triton-latency"]
        again = await act.reconcile(ladder()[1])  # re-read, so the new order is patched right
        assert again is not None and again.ok and again.reason == "reapplied", again
        assert read_weights(server.obj, HTTP_REF) == {"triton-latency": 0.0, "triton-throughput": 100.0}
    finally:
        await act.aclose()


async def test_an_unreachable_api_server_is_reported(cluster):
    env, sa = cluster

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    api = KubernetesApi(
        InCluster.detect(env, sa),
        client_factory=lambda url, ca, t: httpx.AsyncClient(
            base_url=url, transport=httpx.MockTransport(down)
        ),
    )
    act = GatewayActuator(ladder(), VARIANTS, KubernetesRoute(HTTP_REF, api=api))
    try:
        result = await act.apply(ladder()[1])
        assert not result.ok and result.reason == "unreachable" and "did not answer" in result.message
    finally:
        await act.aclose()


# -- from the sidecar YAML ----------------------------------------------------------------------------


def k8s_config(tmp_path: Path, **over):
    data = {
        "model": "dense_mlp",
        "profiles": {"dir": str(PROFILES / "dense_mlp"), "ladder": ["latency-soft", "aggressive"]},
        "slo": {"p95_ms": 60},
        "actuator": {
            "kind": "gateway", "gateway": "httproute", "route": "triton",
            "manifest": str(httproute_manifest()), "guard": False,
            "variants": {"latency-soft": {"backend": "triton-latency"},
                         "aggressive": {"backend": "triton-throughput"}},
            **over,
        },
    }
    return sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)


async def test_apply_auto_uses_the_api_server_in_a_pod_and_prints_outside(cluster, tmp_path):
    env, sa = cluster
    server = fake_server()

    def factory(url, ca, timeout_s):
        return httpx.AsyncClient(base_url=url, transport=httpx.MockTransport(server.handler))

    def build(cfg, **kwargs):
        return build_gateway_actuator(cfg.actuator.gateway, cfg.profiles, source=cfg.source, **kwargs)

    inside = build(k8s_config(tmp_path), env=env, service_account_dir=sa, client_factory=factory)
    lines: list[str] = []
    outside = build(k8s_config(tmp_path, namespace="serving"), env={}, service_account_dir=sa,
                    out=lines.append)
    try:
        assert inside.backend.changes_traffic and inside.backend.ref.namespace == "serving"  # the pod's
        assert (await inside.apply(ladder()[1])).reason == "applied"
        assert not outside.backend.changes_traffic
        assert (await outside.apply(ladder()[1])).reason == "dry_run" and len(lines) == 1
    finally:
        await inside.aclose()
        await outside.aclose()
    with pytest.raises(ConfigError, match="actuator.apply = 'api': not running in a Kubernetes pod"):
        build(k8s_config(tmp_path, apply="api"), env={}, service_account_dir=sa)


def test_the_istio_overlay_routes_by_host_and_patches_into_a_valid_virtualservice(tmp_path):
    """deploy/k8s/overlays/gateway-istio: one pool per destination host, no subsets."""
    (vs,) = find(render(OVERLAYS / "gateway-istio"), "VirtualService")
    path = tmp_path / "vs.yaml"
    path.write_text(yaml.safe_dump(vs))
    vs = load_manifest(path, VS_REF)
    lat, thr = (f"triton-{pool}.serving.svc.cluster.local" for pool in ("latency", "throughput"))
    assert read_weights(vs, VS_REF) == {lat: 100.0, thr: 0.0}
    ops = weight_patch(vs, VS_REF, {lat: 50, thr: 50})
    check(ops, JSON_PATCH_SCHEMA)
    assert {"op": "test", "path": "/spec/http/0/route/1/destination/host", "value": thr} in ops
    after = apply_json_patch(vs, ops)
    published(after)
    assert read_weights(after, VS_REF) == {lat: 50.0, thr: 50.0}
