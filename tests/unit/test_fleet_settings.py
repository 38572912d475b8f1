"""The fleet's settings in the sidecar YAML, and a Service's ready endpoints read from
EndpointSlices (pure: the API answer is a dict; no cluster runs here, so the
EndpointSlice shape is the discovery.k8s.io/v1 reference's, not a real server's).
The fleet against two real Tritons: tests/integration/test_fleet.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from autobatch.actuators.fleet import Replica, ServiceEndpoints, StaticReplicas, TritonFleetActuator
from autobatch.actuators.gateway import GatewayFailure
from autobatch.actuators.triton import ReloadFailure
from autobatch.controller.app import build_actuator
from autobatch.controller.config import sidecar_config_from_mapping
from autobatch.errors import ConfigError

PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def config(tmp_path: Path, replicas, **top):
    data = {
        "model": "dense_mlp",
        "profiles": {"dir": str(PROFILES / "dense_mlp"), "ladder": ["latency-soft", "aggressive"]},
        "slo": {"p95_ms": 60},
        "signals": {"source": "prometheus", "prometheus_url": "http://127.0.0.1:9090",
                    "selector": {"job": "triton"}},
        "actuator": {"kind": "triton", "replicas": replicas},
        **top,
    }
    return sidecar_config_from_mapping(data, "sidecar.yaml", base=tmp_path)


async def test_a_static_list_builds_a_fleet_in_its_order(tmp_path):
    cfg = config(tmp_path, [{"http_url": "10.0.0.5:8000", "grpc_url": "10.0.0.5:8001"},
                            {"http_url": "http://10.0.0.6:8000", "grpc_url": "10.0.0.6:8001"}])
    assert cfg.actuator.replicas.static == (("http://10.0.0.5:8000", "10.0.0.5:8001"),
                                            ("http://10.0.0.6:8000", "10.0.0.6:8001"))
    act = build_actuator(cfg)
    try:
        assert isinstance(act, TritonFleetActuator)
        assert await act.source.replicas() == [Replica("http://10.0.0.5:8000", "10.0.0.5:8001"),
                                               Replica("http://10.0.0.6:8000", "10.0.0.6:8001")]
    finally:
        await act.aclose()


def test_a_service_outside_a_pod_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cfg = config(tmp_path, {"service": "triton", "namespace": "serving"})
    assert cfg.actuator.replicas.service == "triton" and cfg.actuator.replicas.http_port == "http"
    with pytest.raises(ConfigError, match="actuator.replicas.service = 'triton'.*reachable from a pod"):
        build_actuator(cfg)


@pytest.mark.parametrize(
    ("replicas", "top", "message"),
    [
        ([{"http_url": "10.0.0.5:8000"}], {},
         "actuator.replicas[0].grpc_url = None: is required when load_api is grpc"),
        ([{"http_url": "10.0.0.5:8000", "grpc_url": "grpc://10.0.0.5:8001"}], {},
         "actuator.replicas[0].grpc_url = 'grpc://10.0.0.5:8001': must be HOST:PORT"),
        ([{"http_url": "ftp://x"}], {}, "actuator.replicas[0].http_url = 'ftp://x'"),
        ([{"http_url": "a:1", "grpc_url": "a:2"}, {"http_url": "a:1", "grpc_url": "a:3"}], {},
         "lists a replica twice"),
        ([], {}, "actuator.replicas = []: must be a non-empty list"),
        ({"namespace": "serving"}, {}, "must be a list of {http_url, grpc_url} or {service: NAME}"),
        ({"service": "triton", "http_port": 0}, {}, "actuator.replicas.http_port = 0"),
        ({"service": "triton", "ports": 1}, {}, "actuator.replicas.ports = 1: unknown field"),
        ([{"http_url": "a:1", "grpc_url": "a:2"}], {"signals": {"source": "triton"}},
         "signals.source = 'triton': must be prometheus with actuator.replicas"),
    ],
)
def test_bad_replica_settings_are_one_line_naming_the_field(tmp_path, replicas, top, message):
    with pytest.raises(ConfigError) as err:
        config(tmp_path, replicas, **top)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_replicas_need_the_reload_actuator_in_override_mode(tmp_path):
    with pytest.raises(ConfigError, match="actuator.replicas = .*only kind triton"):
        config(tmp_path, [{"http_url": "a:1", "grpc_url": "a:2"}], actuator={
            "kind": "dry-run", "replicas": [{"http_url": "a:1", "grpc_url": "a:2"}]})


class Api:
    def __init__(self, answer) -> None:
        self.answer = answer
        self.paths: list[str] = []

    async def get(self, path: str):
        self.paths.append(path)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def endpoint_slice(name, ports, endpoints):
    return {"metadata": {"name": name}, "addressType": "IPv4",
            "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports.items()],
            "endpoints": endpoints}


async def test_the_ready_endpoints_of_a_service_are_the_replicas():
    ports = {"http": 8000, "grpc": 8001, "metrics": 8002}
    api = Api({"items": [
        endpoint_slice("triton-abc", ports, [
            {"addresses": ["10.0.0.7"], "conditions": {"ready": True}},
            {"addresses": ["10.0.0.5"], "conditions": {"ready": False}},   # not ready: left out
            {"addresses": ["10.0.0.6"]},                                   # unset: counts as ready
        ]),
        endpoint_slice("triton-def", ports, [{"addresses": ["10.0.0.7"], "conditions": {"ready": True}}]),
    ]})
    source = ServiceEndpoints(api, "serving", "triton")
    assert await source.replicas() == [Replica("http://10.0.0.6:8000", "10.0.0.6:8001"),
                                       Replica("http://10.0.0.7:8000", "10.0.0.7:8001")]
    assert api.paths == ["/apis/discovery.k8s.io/v1/namespaces/serving/endpointslices"
                         "?labelSelector=kubernetes.io%2Fservice-name%3Dtriton"]
    by_number = ServiceEndpoints(api, "serving", "triton", http_port=9000, grpc_port=None)
    assert (await by_number.replicas())[0] == Replica("http://10.0.0.6:9000", None)


async def test_a_missing_port_or_an_unreachable_api_is_a_reload_failure():
    api = Api({"items": [endpoint_slice("triton-abc", {"web": 80}, [{"addresses": ["10.0.0.7"]}])]})
    with pytest.raises(ReloadFailure, match="has no port named 'http' \\(it has: web\\)"):
        await ServiceEndpoints(api, "serving", "triton").replicas()
    down = Api(GatewayFailure("the Kubernetes API server did not answer", reason="unreachable"))
    with pytest.raises(ReloadFailure, match="cannot list the endpoints of Service 'triton'"):
        await ServiceEndpoints(down, "serving", "triton").replicas()


def test_an_empty_static_list_is_refused():
    with pytest.raises(ConfigError, match="empty"):
        StaticReplicas([])
