"""Kubernetes as the gateway: weights of a Gateway API HTTPRoute (or GRPCRoute), or an
Istio VirtualService.

The change is a **JSON Patch** (RFC 6902), one ``test`` and one ``add`` per variant::

    [{"op": "test", "path": "/spec/rules/0/backendRefs/1/name", "value": "triton-throughput"},
     {"op": "add",  "path": "/spec/rules/0/backendRefs/1/weight", "value": 25}, ...]

Why this patch type: the API server refuses a strategic merge patch for custom
resources, and a JSON merge patch replaces a list whole (a concurrent edit of
the rule would be overwritten). The ``test`` ops make the API server refuse
the patch (HTTP 422) if the list was reordered since it was read.

Where the patch goes: **in-cluster** (``KUBERNETES_SERVICE_HOST`` set and a
service-account token mounted) it is a ``PATCH`` through the API server, with
the route read before (for the indices) and after (to verify); the service
account needs ``get`` and ``patch`` on the route
(``deploy/k8s/overlays/gateway/rbac.yaml``). **Otherwise** it is printed as a
``kubectl patch`` command line against a copy of the route read from its
manifest (``manifest:``), updated as if applied.

Weights: autobatch writes percents. An HTTPRoute (GRPCRoute) weight is
proportional (0..1,000,000; absent means 1); Istio's must add up to 100. Only
the rule named by ``rule`` (an index) is touched, and it should hold only the
variants: another backend in it keeps its weight and takes its share.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from autobatch.actuators.gateway.backend import GatewayFailure
from autobatch.actuators.gateway.steps import percents, shares
from autobatch.errors import ConfigError

__all__ = [
    "GRPCROUTE",
    "HTTPROUTE",
    "SERVICE_ACCOUNT_DIR",
    "VIRTUALSERVICE",
    "KINDS",
    "InCluster",
    "KubernetesApi",
    "KubernetesRoute",
    "RouteKind",
    "RouteRef",
    "apply_json_patch",
    "load_manifest",
    "read_weights",
    "weight_patch",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class RouteKind:
    """Where one kind of route keeps its weighted backends."""

    kind: str
    group: str
    version: str
    plural: str
    rules: str
    """The list of rules under ``spec``."""
    backends: str
    """The list of weighted backends in one rule."""
    default_weight: float
    """The weight of a backend that sets none."""
    percent: bool
    """Weights are percents that must sum to 100."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


HTTPROUTE = RouteKind(
    kind="HTTPRoute", group="gateway.networking.k8s.io", version="v1", plural="httproutes",
    rules="rules", backends="backendRefs", default_weight=1.0, percent=False,
)
GRPCROUTE = RouteKind(
    kind="GRPCRoute", group="gateway.networking.k8s.io", version="v1", plural="grpcroutes",
    rules="rules", backends="backendRefs", default_weight=1.0, percent=False,
)
VIRTUALSERVICE = RouteKind(
    kind="VirtualService", group="networking.istio.io", version="v1", plural="virtualservices",
    rules="http", backends="route", default_weight=0.0, percent=True,
)
KINDS = {"httproute": HTTPROUTE, "grpcroute": GRPCROUTE, "virtualservice": VIRTUALSERVICE}


@dataclass(frozen=True)
class RouteRef:
    """One rule of one route object."""

    kind: RouteKind
    namespace: str
    name: str
    rule: int = 0
    version: str | None = None
    """API version to use instead of the kind's default (e.g. Istio's ``v1beta1``)."""

    @property
    def path(self) -> str:
        version = self.version or self.kind.version
        return (
            f"/apis/{self.kind.group}/{version}/namespaces/{self.namespace}/"
            f"{self.kind.plural}/{self.name}"
        )

    def describe(self) -> str:
        return f"{self.kind.kind} {self.namespace}/{self.name} {self.kind.rules}[{self.rule}]"


# -- pure: reading, patching ---------------------------------------------------------------


def _target_of(kind: RouteKind, backend: Mapping[str, Any]) -> str | None:
    """The name a variant uses for one backend: an HTTPRoute backendRef's ``name``;
    an Istio destination's ``host``, or ``host/subset`` when it has a subset."""
    if not kind.percent:
        name = backend.get("name")
        return str(name) if name else None
    dest = backend.get("destination") or {}
    host = dest.get("host")
    if not host:
        return None
    subset = dest.get("subset")
    return f"{host}/{subset}" if subset else str(host)


def _backends(obj: Mapping[str, Any], ref: RouteRef) -> list[Mapping[str, Any]]:
    rules = (obj.get("spec") or {}).get(ref.kind.rules)
    if not isinstance(rules, list) or ref.rule >= len(rules):
        count = len(rules) if isinstance(rules, list) else 0
        raise GatewayFailure(
            f"{ref.describe()}: the route has {count} {ref.kind.rules}; set `rule` to one of them",
            reason="unavailable",
        )
    backends = rules[ref.rule].get(ref.kind.backends)
    if not isinstance(backends, list) or not backends:
        raise GatewayFailure(f"{ref.describe()}: the rule has no {ref.kind.backends}", reason="unavailable")
    return backends


def read_weights(obj: Mapping[str, Any], ref: RouteRef) -> dict[str, float]:
    """Weight of every backend of the rule, by target name."""
    backends = _backends(obj, ref)
    out: dict[str, float] = {}
    for b in backends:
        target = _target_of(ref.kind, b)
        if target is None:
            continue
        weight = b.get("weight")
        if weight is None:
            weight = 100.0 if ref.kind.percent and len(backends) == 1 else ref.kind.default_weight
        out[target] = float(weight)
    return out


def weight_patch(obj: Mapping[str, Any], ref: RouteRef, weights: Mapping[str, int]) -> list[dict[str, Any]]:
    """The JSON Patch setting ``weights`` (by target) in the rule of ``obj``."""
    backends = _backends(obj, ref)
    index = {_target_of(ref.kind, b): i for i, b in enumerate(backends)}
    if ref.kind.percent and sum(weights.values()) != 100:
        weights = percents(shares(weights)) if any(weights.values()) else dict(weights)
    base = f"/spec/{ref.kind.rules}/{ref.rule}/{ref.kind.backends}"
    ops: list[dict[str, Any]] = []
    for target, weight in weights.items():
        if target not in index:
            raise GatewayFailure(
                f"{ref.describe()} has no backend {target!r} (it has: "
                f"{', '.join(str(t) for t in index if t)})",
                reason="unavailable",
            )
        i = index[target]
        if not ref.kind.percent:
            ops.append({"op": "test", "path": f"{base}/{i}/name", "value": target})
        else:
            host, _, subset = target.partition("/")
            ops.append({"op": "test", "path": f"{base}/{i}/destination/host", "value": host})
            if subset:
                ops.append({"op": "test", "path": f"{base}/{i}/destination/subset", "value": subset})
        ops.append({"op": "add", "path": f"{base}/{i}/weight", "value": int(weight)})
    return ops


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def apply_json_patch(doc: Any, ops: Sequence[Mapping[str, Any]]) -> Any:
    """``doc`` with the ``test``/``add``/``replace`` ops applied (RFC 6902), as a new object.

    Only what :func:`weight_patch` emits; a failed ``test`` raises ``ValueError``
    as the API server answers 422.
    """
    out = json.loads(json.dumps(doc))
    for op in ops:
        parts = _pointer(op["path"])
        parent: Any = out
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent[p]
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            value = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if value != op["value"]:
                raise ValueError(f"test failed at {op['path']}: {value!r} != {op['value']!r}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if kind == "add":
                    parent.insert(len(parent) if last == "-" else int(last), op["value"])
                else:
                    parent[int(last)] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ValueError(f"replace of a missing member at {op['path']}")
                parent[last] = op["value"]
        else:
            raise ValueError(f"unsupported op {kind!r}")
    return out


def load_manifest(path: Path, ref: RouteRef) -> dict[str, Any]:
    """The route object from a manifest file (several ``---`` documents are fine)."""
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the route manifest: {exc}", source=str(path)) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}", source=str(path)) from exc
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != ref.kind.kind:
            continue
        meta = doc.get("metadata") or {}
        if meta.get("name") == ref.name and (meta.get("namespace") or ref.namespace) == ref.namespace:
            return doc
    raise ConfigError(
        f"{path}: no {ref.kind.kind} named {ref.namespace}/{ref.name} in it", source=str(path)
    )


# -- the API server ----------------------------------------------------------------------------


@dataclass(frozen=True)
class InCluster:
    """Where the API server is and how to authenticate, as a pod sees it."""

    base_url: str
    token_path: Path
    ca_path: Path
    namespace: str | None = None

    @classmethod
    def detect(
        cls, env: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR
    ) -> InCluster | None:
        """From ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the mounted service account;
        None when either is missing (not in a pod, or ``automountServiceAccountToken: false``)."""
        env = os.environ if env is None else env
        host = env.get("KUBERNETES_SERVICE_HOST")
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        token = sa_dir / "token"
        if not host or not token.is_file():
            return None
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 service address
        ns_file = sa_dir / "namespace"
        namespace = ns_file.read_text(encoding="utf-8").strip() if ns_file.is_file() else None
        return cls(f"https://{host}:{port}", token, sa_dir / "ca.crt", namespace or None)


def _default_client(base_url: str, ca_path: Path, timeout_s: float) -> httpx.AsyncClient:
    try:
        context = ssl.create_default_context(cafile=str(ca_path))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{ca_path}: cannot load the API server's CA: {exc}", source=str(ca_path)) from exc
    return httpx.AsyncClient(base_url=base_url, verify=context, timeout=timeout_s)


class KubernetesApi:
    """GET and JSON-PATCH one object through the API server, with the pod's token.

    The token is read again for every request: projected service-account tokens
    are rotated by the kubelet (hourly), and a long-running sidecar must not
    keep an expired one.

    Args:
        cluster: the API server and credentials (:meth:`InCluster.detect`).
        client_factory: ``(base_url, ca_path, timeout_s) -> httpx.AsyncClient``;
            tests pass one that returns a client on a fake API server.
    """

    def __init__(
        self,
        cluster: InCluster,
        *,
        timeout_s: float = 5.0,
        client_factory: Callable[[str, Path, float], httpx.AsyncClient] = _default_client,
    ) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self._factory = client_factory
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = self._factory(self.cluster.base_url, self.cluster.ca_path, self.timeout_s)
        return self._client

    def _headers(self) -> dict[str, str]:
        try:
            token = self.cluster.token_path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise GatewayFailure(
                f"cannot read the service-account token {self.cluster.token_path}: {exc}",
                reason="unreachable",
            ) from exc
        return {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    async def get(self, path: str) -> dict[str, Any]:
        return await self._send("GET", path)

    async def patch(self, path: str, ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return await self._send("PATCH", path, content=json.dumps(list(ops)), content_type=JSON_PATCH)

    async def _send(
        self, method: str, path: str, *, content: str | None = None, content_type: str | None = None
    ) -> dict[str, Any]:
        headers = self._headers()
        if content_type:
            headers["Content-Type"] = content_type
        try:
            r = await self._http().request(method, path, content=content, headers=headers)
        except httpx.HTTPError as exc:
            raise GatewayFailure(
                f"the Kubernetes API server at {self.cluster.base_url} did not answer "
                f"{method} {path} ({type(exc).__name__}: {exc})",
                reason="unreachable",
            ) from exc
        if r.status_code != 200:
            try:
                detail = r.json().get("message") or r.text
            except ValueError:
                detail = r.text
            detail = str(detail).strip()[:300]
            hint = {
                401: "; the service-account token was not accepted",
                403: "; the service account needs get and patch on this resource (RBAC)",
                404: "; check the route's namespace and name",
                422: "; the route changed since it was read (a backend moved?)",
            }.get(r.status_code, "")
            reason = "unavailable" if r.status_code == 404 else "rejected"
            raise GatewayFailure(
                f"the API server answered {method} {path} with HTTP {r.status_code}: {detail}{hint}",
                reason=reason,
            )
        try:
            data = r.json()
        except ValueError as exc:
            raise GatewayFailure(f"the API server's answer to {method} {path} is not JSON",
                                 reason="rejected") from exc
        if not isinstance(data, dict):
            raise GatewayFailure(f"the API server's answer to {method} {path} is not an object",
                                 reason="rejected")
        return data

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class KubernetesRoute:
    """The weights of one route rule, as a :class:`~autobatch.actuators.gateway.backend.WeightsBackend`.

    With ``api`` it reads and patches the live object; without it, it prints each
    patch through ``out`` as a ``kubectl patch`` line and applies it to its copy
    of ``manifest`` (``changes_traffic`` is then False: nothing moved, so the
    actuator has nothing to guard and reports a dry run).
    """

    def __init__(
        self,
        ref: RouteRef,
        *,
        api: KubernetesApi | None = None,
        manifest: Mapping[str, Any] | None = None,
        out: Callable[[str], Any] = print,
    ) -> None:
        if api is None and manifest is None:
            raise ConfigError(
                "a Kubernetes route without API access needs its manifest (`manifest:`) to know "
                "the order of its backends",
                field="manifest",
            )
        self.ref = ref
        self.api = api
        self._object = json.loads(json.dumps(manifest)) if manifest is not None else None
        self.out = out
        self.kind = ref.kind.kind.lower()
        self.changes_traffic = api is not None
        self.patches: list[list[dict[str, Any]]] = []
        """Every patch sent or printed, oldest first."""

    async def _object_now(self) -> dict[str, Any]:
        if self.api is not None:
            self._object = await self.api.get(self.ref.path)
        assert self._object is not None
        return self._object

    async def read(self) -> dict[str, float]:
        return read_weights(await self._object_now(), self.ref)

    async def write(self, weights: Mapping[str, int]) -> None:
        obj = await self._object_now()
        ops = weight_patch(obj, self.ref, weights)
        self.patches.append(ops)
        if self.api is not None:
            self._object = await self.api.patch(self.ref.path, ops)
            return
        self.out(self.command(ops))
        try:
            self._object = apply_json_patch(obj, ops)
        except (ValueError, KeyError, IndexError) as exc:
            raise GatewayFailure(
                f"the patch does not apply to the manifest: {exc}", reason="rejected"
            ) from exc

    def command(self, ops: Sequence[Mapping[str, Any]]) -> str:
        """The ``kubectl patch`` line applying ``ops``."""
        body = json.dumps(list(ops), separators=(",", ":"))
        return (
            f"kubectl -n {self.ref.namespace} patch {self.ref.kind.plural}.{self.ref.kind.group} "
            f"{self.ref.name} --type json -p '{body}'"
        )

    async def failure_count(self, target: str) -> float | None:
        return None

    async def aclose(self) -> None:
        if self.api is not None:
            await self.api.aclose()
