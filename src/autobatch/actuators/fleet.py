"""A batching profile applied to a fleet of Triton replicas, one replica at a time.

``actuator: {kind: triton, replicas: ...}`` in the sidecar YAML. Each replica has
its own :class:`~autobatch.actuators.triton.TritonReloadActuator` (the one-server
reload: config read, merge, load, read-back verification, its own rollback); this
module only orders them. One :meth:`TritonFleetActuator.apply`:

1. lists the replicas (a static list, or the ready endpoints of a Kubernetes Service
   read from its EndpointSlices) and reads the profile each one runs;
2. applies the profile to the first replica, waits until the model is READY there
   and its live config reads back as the profile, then goes on to the next: at most
   one replica reloads at any time, so the fleet keeps its capacity but one copy;
3. if one replica refuses (or fails verification, or never becomes READY), that
   replica rolls itself back, and the replicas already changed in this step are put
   back on the profile each ran before, in reverse order. The fleet then runs what it
   ran before the step, and the result says so (``rolled_back``).

Replicas that answer but run different profiles (a restarted replica that lost its
override, a replica added by a scale-up) are brought to the wanted one by
:meth:`TritonFleetActuator.reconcile`, also one at a time. The decision that drives
the fleet should read the whole fleet: ``signals.source: prometheus`` with a
selector matching every replica (docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from autobatch.access import RestrictedApi, http_headers
from autobatch.actuators.base import ActuationResult
from autobatch.actuators.triton import ReloadFailure, TritonReloadActuator
from autobatch.errors import ActuationError, ConfigError
from autobatch.profiles import Profile

__all__ = [
    "Replica",
    "ReplicaSource",
    "ServiceEndpoints",
    "StaticReplicas",
    "TritonFleetActuator",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replica:
    """One Triton server of the fleet."""

    http_url: str
    """``http://host:port``: config reads, readiness, and loads when ``load_api`` is http."""
    grpc_url: str | None = None
    """``host:port``: where loads go when ``load_api`` is grpc (None: over HTTP)."""

    @property
    def name(self) -> str:
        return self.http_url.split("://", 1)[-1]


class ReplicaSource(Protocol):
    async def replicas(self) -> list[Replica]:
        """The replicas to act on now, in the order they are changed."""
        ...

    async def aclose(self) -> None: ...


class StaticReplicas:
    """A fixed list of replicas, in the order given."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        if not replicas:
            raise ConfigError("actuator.replicas: the list of replicas is empty", field="actuator.replicas")
        self._replicas = list(replicas)

    async def replicas(self) -> list[Replica]:
        return list(self._replicas)

    async def aclose(self) -> None:
        return None


class ServiceEndpoints:
    """The ready endpoints of a Kubernetes Service, from ``discovery.k8s.io/v1`` EndpointSlices.

    The service account needs ``list`` on ``endpointslices`` in the namespace.
    ``api`` is anything with an ``async get(path) -> dict`` (the gateway's
    :class:`~autobatch.actuators.gateway.kubernetes.KubernetesApi` in a pod).
    Endpoints whose ``conditions.ready`` is false are left out (unset counts as
    ready, as the API documents); a replica is its first address. Ports are found by
    name in the slice (``http_port``/``grpc_port``), or are numbers.
    """

    def __init__(
        self,
        api: Any,
        namespace: str,
        service: str,
        *,
        http_port: str | int = "http",
        grpc_port: str | int | None = "grpc",
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.service = service
        self.http_port = http_port
        self.grpc_port = grpc_port
        selector = quote(f"kubernetes.io/service-name={service}", safe="")
        self.path = (f"/apis/discovery.k8s.io/v1/namespaces/{quote(namespace, safe='')}"
                     f"/endpointslices?labelSelector={selector}")

    def _port(self, want: str | int, ports: dict[str, int], slice_name: str) -> int:
        if isinstance(want, int):
            return want
        if want.isdigit():
            return int(want)
        if want not in ports:
            raise ReloadFailure(
                f"EndpointSlice {self.namespace}/{slice_name} of Service {self.service!r} has no port "
                f"named {want!r} (it has: {', '.join(sorted(ports)) or 'none'})"
            )
        return ports[want]

    async def replicas(self) -> list[Replica]:
        try:
            data = await self.api.get(self.path)
        except ActuationError as exc:
            raise ReloadFailure(f"cannot list the endpoints of Service {self.service!r}: {exc}") from exc
        found: dict[str, Replica] = {}
        for item in data.get("items") or []:
            ports = {str(p.get("name") or ""): int(p["port"]) for p in item.get("ports") or [] if "port" in p}
            name = (item.get("metadata") or {}).get("name", "?")
            http = self._port(self.http_port, ports, name)
            grpc = self._port(self.grpc_port, ports, name) if self.grpc_port is not None else None
            for ep in item.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False or not ep.get("addresses"):
                    continue
                addr = str(ep["addresses"][0])
                host = f"[{addr}]" if ":" in addr else addr
                found[addr] = Replica(f"http://{host}:{http}", f"{host}:{grpc}" if grpc else None)
        return [found[a] for a in sorted(found)]

    async def aclose(self) -> None:
        close = getattr(self.api, "aclose", None)
        if close is not None:
            await close()


class TritonFleetActuator:
    """Apply batching profiles to one model on every replica of a fleet, one replica at a time.

    Args:
        source: where the replicas come from (:class:`StaticReplicas`, :class:`ServiceEndpoints`).
        model, ladder: as for :class:`TritonReloadActuator`.
        reloader: ``Replica -> TritonReloadActuator``; by default one with
            ``load_timeout_s``, ``request_timeout_s`` and the replica's gRPC URL for loads
            (``load_api="grpc"``) or none (``"http"``).
        ready_timeout_s: how long a replica may take to answer READY after its load.
        restricted_api: the key of Triton's restricted APIs, the same on every replica:
            sent with each replica's config reads and loads, and its READY polls (in case
            ``health`` is locked too).
        clock, sleep: injected for the durations and the READY poll.
    """

    name = "triton"

    def __init__(
        self,
        source: ReplicaSource,
        model: str,
        ladder: Sequence[Profile],
        *,
        reloader: Callable[[Replica], TritonReloadActuator] | None = None,
        load_api: str = "grpc",
        load_timeout_s: float = 120.0,
        request_timeout_s: float = 5.0,
        ready_timeout_s: float = 120.0,
        restricted_api: RestrictedApi | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.source = source
        self.model = model
        self.ladder = tuple(ladder)
        self.clock = clock
        self.sleep = sleep
        self.ready_timeout_s = ready_timeout_s
        self.request_timeout_s = request_timeout_s

        def default(r: Replica) -> TritonReloadActuator:
            return TritonReloadActuator(
                r.http_url, model, self.ladder, clock=clock, request_timeout_s=request_timeout_s,
                load_timeout_s=load_timeout_s, grpc_url=r.grpc_url if load_api == "grpc" else None,
                restricted_api=restricted_api,
            )

        self._make = reloader or default
        self._reloaders: dict[Replica, TritonReloadActuator] = {}
        self._http = httpx.AsyncClient(timeout=request_timeout_s, headers=http_headers(restricted_api))
        self._lock = asyncio.Lock()
        self.last_replicas: list[Replica] = []
        """The replicas of the latest step, in the order they were changed."""
        self.last_steps: list[tuple[str, ActuationResult]] = []
        """Each replica's result in the latest apply, rollbacks included, in order."""

    def _reloader(self, r: Replica) -> TritonReloadActuator:
        if r not in self._reloaders:
            self._reloaders[r] = self._make(r)
        return self._reloaders[r]

    def _profile(self, name: str | None) -> Profile | None:
        return next((p for p in self.ladder if p.name == name), None)

    async def _list(self) -> list[Replica]:
        replicas = await self.source.replicas()
        if not replicas:
            raise ReloadFailure(f"no ready replica of {self.model!r} to act on")
        self.last_replicas = replicas
        for gone in [r for r in self._reloaders if r not in replicas]:
            await self._reloaders.pop(gone).aclose()
        return replicas

    async def _ready(self, r: Replica, profile: Profile) -> str | None:
        """None once ``r`` serves the model READY on ``profile``; else why not, at the deadline."""
        url = f"{r.http_url}/v2/models/{quote(self.model, safe='')}/ready"
        deadline = self.clock() + self.ready_timeout_s
        why = "no answer"
        while True:
            try:
                status = (await self._http.get(url)).status_code
                why = f"/v2/models/{self.model}/ready answered {status}"
                if status == 200:
                    live = await self._reloader(r).live_profile()
                    if live == profile.name:
                        return None
                    why = f"the live config reads back as {live or 'no ladder profile'}, not {profile.name}"
            except httpx.HTTPError as exc:
                why = f"{type(exc).__name__}: {exc}"
            if self.clock() > deadline:
                return f"{r.name} not READY on {profile.name} after {self.ready_timeout_s:g} s ({why})"
            await self.sleep(0.2)

    # -- the protocol ----------------------------------------------------------------------
    async def apply(
        self, profile: Profile, *, urgent: bool = False, saturated: bool = False
    ) -> ActuationResult:
        async with self._lock:
            t0 = self.clock()
            self.last_steps = []
            try:
                replicas = await self._list()
            except ReloadFailure as exc:
                return self._result(profile, t0, ok=False, reason="unreachable", message=str(exc))
            before = {r: await self._reloader(r).live_profile() for r in replicas}
            changed: list[Replica] = []
            load_s = 0.0
            for r in replicas:
                result = await self._reloader(r).apply(profile)
                self.last_steps.append((r.name, result))
                load_s += result.load_s or 0.0
                if result.ok:
                    if result.reason != "unchanged":
                        changed.append(r)
                    not_ready = await self._ready(r, profile)
                    if not_ready is None:
                        continue
                    result = ActuationResult.since(profile, t0, self.clock(), ok=False,
                                                   reason="verify_failed", message=not_ready)
                return await self._roll_back(profile, r, result, changed, before, t0, load_s)
            what = "already live" if not changed else f"loaded on {len(changed)}"
            return self._result(
                profile, t0, ok=True, reason="applied" if changed else "unchanged", active=profile.name,
                load_s=load_s if changed else None,
                message=f"{profile.name} on {len(replicas)} replicas of {self.model}, one at a time "
                        f"({what}; {', '.join(r.name for r in replicas)})",
            )

    async def _roll_back(
        self,
        profile: Profile,
        failed: Replica,
        failure: ActuationResult,
        changed: list[Replica],
        before: dict[Replica, str | None],
        t0: float,
        load_s: float,
    ) -> ActuationResult:
        """Put every replica this step changed back on what it ran before, last changed first."""
        notes: list[str] = []
        # The failed replica is whole again if it rolled itself back (or nothing was
        # loaded there); if it loaded but never came READY, it is rolled back below.
        ok = failed in changed or failure.rolled_back or (
            failure.active is not None and failure.active == before.get(failed))
        for r in reversed(changed):
            previous = self._profile(before[r])
            if previous is None:
                ok = False
                notes.append(f"{r.name}: ran no ladder profile before, left on {profile.name}")
                continue
            back = await self._reloader(r).apply(previous)
            self.last_steps.append((r.name, back))
            load_s += back.load_s or 0.0
            if back.ok:
                notes.append(f"{r.name} back on {previous.name}")
            else:
                ok = False
                notes.append(f"{r.name}: rolling back to {previous.name} failed: {back.message}")
        names = {before[r] for r in before}
        active = names.pop() if ok and len(names) == 1 else None
        message = f"{profile.name} failed on {failed.name} ({failure.reason}): {failure.message}"
        if changed:
            message += "; " + "; ".join(notes)
        log.warning("%s", message)
        return self._result(profile, t0, ok=False, reason=failure.reason, message=message,
                            active=active, rolled_back=ok, load_s=load_s or None)

    async def live_profile(self) -> str | None:
        """The profile every replica runs; None when they disagree or one cannot be read."""
        async with self._lock:
            try:
                replicas = await self._list()
            except ReloadFailure as exc:
                log.warning("%s: cannot list the replicas: %s", self.model, exc)
                return None
            names = [await self._reloader(r).live_profile() for r in replicas]
            if len(set(names)) == 1:
                return names[0]
            log.warning("%s: the replicas run different profiles: %s", self.model,
                        ", ".join(f"{r.name}={n}" for r, n in zip(replicas, names)))
            return None

    async def reconcile(self, profile: Profile) -> ActuationResult | None:
        """Bring every replica that drifted (restarted, added) back to ``profile``, one at a time."""
        async with self._lock:
            t0 = self.clock()
            try:
                replicas = await self._list()
            except ReloadFailure as exc:
                return self._result(profile, t0, ok=False, reason="unreachable",
                                    message=f"cannot check that {profile.name} is still live: {exc}")
            done: list[tuple[Replica, ActuationResult]] = []
            for r in replicas:
                result = await self._reloader(r).reconcile(profile)
                if result is None:
                    continue
                if result.ok:
                    not_ready = await self._ready(r, profile)
                    if not_ready is not None:
                        result = ActuationResult.since(profile, t0, self.clock(), ok=False,
                                                       reason="verify_failed", message=not_ready)
                done.append((r, result))
                if not result.ok:
                    break  # one replica at a time: the next waits for the next tick
            if not done:
                return None
            ok = all(res.ok for _, res in done)
            return self._result(
                profile, t0, ok=ok, reason="reapplied" if ok else done[-1][1].reason,
                active=profile.name if ok else None,
                load_s=sum(res.load_s or 0.0 for _, res in done) or None,
                message="; ".join(f"{r.name}: {res.message}" for r, res in done),
            )

    async def aclose(self) -> None:
        for reloader in self._reloaders.values():
            await reloader.aclose()
        self._reloaders.clear()
        await self._http.aclose()
        await self.source.aclose()

    def _result(self, profile: Profile, t0: float, **fields: Any) -> ActuationResult:
        return ActuationResult.since(profile, t0, self.clock(), **fields)
