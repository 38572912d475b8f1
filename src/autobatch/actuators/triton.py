"""Swap a model's batching profile through Triton's model-repository load API.

One :meth:`TritonReloadActuator.apply` is, in order:

1. read the live config, ``GET /v2/models/M/config``;
2. merge the profile's batching fields into it (:meth:`Profile.merge_into`);
3. validate the profile against the live config (and, in file mode, check the
   repository's ``config.pbtxt`` it is merged into has the same inputs and outputs);
4. ``POST /v2/repository/models/M/load`` with ``{"parameters": {"config": "<json>"}}``;
5. read the config back and compare the batching fields, normalised as Triton
   normalises a config (:mod:`autobatch.actuators.triton_config`, pure);
6. report how long the load took (:attr:`ActuationResult.load_s`) and the whole step.

If 4 or 5 fails, the last good profile is put back and checked the same way.

What Triton does with such a load (a second copy serves meanwhile, a refused
load leaves the old one, loads are serialised, an override is lost on restart),
with figures and the tests that show it: docs/triton-facts.md.

Applying the profile that is already live sends no load (reason ``unchanged``):
the merged config is not always byte-identical to the live one, and any
difference would cost a full two-copy reload for nothing.

File mode (``repository=``) also rewrites the repository's ``config.pbtxt``
atomically before the load, so the profile survives a restart (comments in the
file are lost); on failure the previous file is put back the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from autobatch.access import RestrictedApi, http_headers, refusal
from autobatch.actuators.base import ActuationResult
from autobatch.actuators.triton_config import batching_view, differences, matches, profile_flags
from autobatch.errors import ActuationError, ConfigError, ProfileError
from autobatch.profiles import Profile, parse_pbtxt, render_pbtxt

__all__ = ["ReloadFailure", "TritonReloadActuator"]

log = logging.getLogger(__name__)

_ERROR_CHARS = 400


class ReloadFailure(ActuationError):
    """A failed step of a reload; ``reason`` is the :data:`~autobatch.actuators.base.REASONS` entry."""

    reason = "unreachable"


class _Unreachable(ReloadFailure):
    reason = "unreachable"


class _Unavailable(ReloadFailure):
    reason = "unavailable"


class _Refused(ReloadFailure):
    reason = "rejected"


class _LoadTimeout(ReloadFailure):
    reason = "timeout"


class _ReadTimeout(ReloadFailure):
    """A config read that got no answer in time: Triton accepts connections and hangs."""

    reason = "timeout"


class _VerifyFailed(ReloadFailure):
    reason = "verify_failed"


class _Forbidden(ReloadFailure):
    """Triton's restricted API refused the request: no key, or the wrong one."""

    reason = "forbidden"


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        data = None
    text = data.get("error") if isinstance(data, dict) else None
    text = str(text if text else response.text).strip()
    return text[:_ERROR_CHARS] or f"HTTP {response.status_code}"


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` so a reader sees the old file or the new one, never half.

    The temporary file is in the same directory, so ``os.replace`` is a rename
    within one file system; the file is synced before the rename and the
    directory after it, so a crash leaves one of the two whole.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class TritonReloadActuator:
    """Apply batching profiles to one Triton model by reloading it with a config override.

    Args:
        http_url: Triton's HTTP endpoint, ``http://host:port`` (``host:port`` works too).
        model: the model to swap.
        ladder: the profiles the controller moves between; :meth:`live_profile`
            names the one the live config matches.
        client: an ``httpx.AsyncClient`` to send through (tests pass one with a
            ``MockTransport``); by default the actuator makes its own and
            :meth:`aclose` closes it. A client passed in is left open.
        clock: seconds, for the durations reported; ``time.monotonic`` by default.
        repository: file mode: the model repository holding ``<model>/config.pbtxt``;
            the profile is written there too, so it survives a Triton restart.
            None (default) only sends config overrides, which a restart drops.
        request_timeout_s: for each config read. A read is a few milliseconds;
            5 s only gives up on a server that accepts connections but hangs.
        load_timeout_s: for the load request, which returns when the new copy is
            in (about 3 s for ``dense_mlp`` on a CPU; minutes for a large model on
            a GPU). After it the step counts as failed with reason ``timeout``.
            Triton does not cancel the load, so the rollback loads the last good
            profile again, which Triton runs after the stray load; that rollback
            load may take twice this long.
        grpc_url: send the load request over gRPC (``host:port``) instead of HTTP.
            Measured here (benchmarks/reload_vs_shift.py): while a load request
            runs on Triton's HTTP endpoint, some HTTP inference requests wait for
            it to finish (p99 of HTTP clients during a swap 2.9-5.6 s); with the
            load sent over gRPC the same swap kept their p99 at 49 ms against
            43 ms with no swap. Config reads stay on HTTP. None: HTTP.
        restricted_api: the header and key Triton's restricted APIs expect
            (:mod:`autobatch.access`), sent with every config read and load (as gRPC
            metadata over gRPC). A refusal for want of it is reason ``forbidden``,
            one line naming the setting; nothing is loaded. None: no key is sent.
    """

    name = "triton"

    def __init__(
        self,
        http_url: str,
        model: str,
        ladder: Sequence[Profile],
        *,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        repository: str | Path | None = None,
        request_timeout_s: float = 5.0,
        load_timeout_s: float = 120.0,
        grpc_url: str | None = None,
        restricted_api: RestrictedApi | None = None,
    ) -> None:
        for field, value in (("request_timeout_s", request_timeout_s), ("load_timeout_s", load_timeout_s)):
            if not value > 0:
                raise ConfigError(f"{field} = {value!r}: must be > 0 seconds", field=field, value=value)
        ladder = tuple(ladder)
        for p in ladder:
            if p.model is not None and p.model != model:
                raise ConfigError(
                    f"{p.source}: model = {p.model!r}: the ladder of {model!r} holds only its profiles",
                    source=p.source,
                    field="model",
                    value=p.model,
                )
        url = http_url.rstrip("/")
        self.http_url = url if "://" in url else f"http://{url}"
        self.model = model
        self.ladder = ladder
        self.clock = clock
        self.repository = Path(repository) if repository is not None else None
        self.request_timeout_s = request_timeout_s
        self.load_timeout_s = load_timeout_s
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=request_timeout_s)
        self._lock = asyncio.Lock()
        self._last_good: Profile | None = None
        quoted = quote(model, safe="")
        self._config_url = f"{self.http_url}/v2/models/{quoted}/config"
        self._load_url = f"{self.http_url}/v2/repository/models/{quoted}/load"
        self.grpc_url = grpc_url.split("://", 1)[-1] if grpc_url else None
        self.restricted_api = restricted_api
        self._headers = http_headers(restricted_api)
        self._grpc: Any = None

    @property
    def config_path(self) -> Path | None:
        """The repository's ``config.pbtxt`` of the model, in file mode."""
        return self.repository / self.model / "config.pbtxt" if self.repository else None

    @property
    def last_good(self) -> str | None:
        """The profile a failure rolls back to: the last one applied and verified."""
        return self._last_good.name if self._last_good else None

    # -- the protocol ----------------------------------------------------------------
    async def apply(
        self, profile: Profile, *, urgent: bool = False, saturated: bool = False
    ) -> ActuationResult:
        async with self._lock:
            t0 = self.clock()
            try:
                live = await self._read_config()
            except ReloadFailure as exc:
                return self._result(profile, t0, ok=False, reason=exc.reason, message=str(exc))
            return await self._apply_on(profile, live, t0, ok_reason="applied")

    async def live_profile(self) -> str | None:
        """The ladder profile the live config matches; None if none does or Triton cannot be read."""
        async with self._lock:
            try:
                live = await self._read_config()
            except ReloadFailure as exc:
                log.warning("%s: cannot read the live profile: %s", self.model, exc)
                return None
            return self._name_of(live)

    async def reconcile(self, profile: Profile) -> ActuationResult | None:
        """Re-apply ``profile`` if the live config is no longer it.

        A Triton restart brings the repository's ``config.pbtxt`` back, dropping an
        override; so does someone else loading the model. Pass the profile that
        should be live (after a refused apply, the result's ``active``, not the
        refused one, which would be tried again on every call). Returns None when
        the profile is live; a result with reason ``reapplied`` when it was put
        back; a failed result when Triton cannot be read or the re-apply failed.
        """
        async with self._lock:
            t0 = self.clock()
            try:
                live = await self._read_config()
            except ReloadFailure as exc:
                return self._result(
                    profile,
                    t0,
                    ok=False,
                    reason=exc.reason,
                    message=f"cannot check that {profile.name} is still live: {exc}",
                )
            if matches(profile, live) and self._file_matches(profile):
                return None
            found = self._name_of(live)
            log.warning(
                "%s: the live config is %s, not %s (Triton restarted, or the model was "
                "loaded by someone else); re-applying %s",
                self.model,
                found or "no ladder profile",
                profile.name,
                profile.name,
            )
            result = await self._apply_on(profile, live, t0, ok_reason="reapplied")
            if result.ok:
                result = replace(
                    result,
                    message=f"the live config was {found or 'no ladder profile'}, not "
                    f"{profile.name} (Triton restarted or the model was reloaded); {result.message}",
                )
            return result

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()
        if self._grpc is not None:
            await self._grpc.close()
            self._grpc = None

    # -- the steps ---------------------------------------------------------------------
    async def _apply_on(
        self, profile: Profile, live: dict[str, Any], t0: float, *, ok_reason: str
    ) -> ActuationResult:
        if self._last_good is None:
            self._last_good = self._match(live)
        path = self.config_path
        previous_text: str | None = None
        try:
            if profile.model is not None and profile.model != self.model:
                raise ProfileError(
                    f"{profile.source}: model = {profile.model!r}: this actuator swaps "
                    f"{self.model!r}; use that model's profiles"
                )
            base: dict[str, Any] = live
            if path is not None:
                try:
                    previous_text = path.read_text(encoding="utf-8")
                except OSError as exc:
                    raise ProfileError(f"{path}: cannot read the model config: {exc}") from exc
                base = parse_pbtxt(previous_text, str(path))
            profile.validate_against(live, base=base if path is not None else None)
            desired = profile.merge_into(base)
            text = render_pbtxt(desired, str(path)) if path is not None else None
        except ProfileError as exc:
            return self._result(
                profile, t0, ok=False, reason="invalid", message=str(exc), active=self._name_of(live)
            )

        in_file = path is None or matches(profile, base)
        if matches(profile, live) and in_file:
            self._last_good = profile
            return self._result(
                profile,
                t0,
                ok=True,
                reason="unchanged",
                active=profile.name,
                message=f"{profile.name} is already live on {self.model}; nothing loaded",
            )

        restore_text: str | None = None
        if path is not None and text is not None and not in_file:
            try:
                write_atomic(path, text)
                restore_text = previous_text
            except OSError as exc:
                return self._result(
                    profile,
                    t0,
                    ok=False,
                    reason="write_failed",
                    active=self._name_of(live),
                    message=f"{path}: cannot write the profile: {exc}; nothing was loaded",
                )

        load_s: float | None = None
        try:
            load_s = await self._load(desired)
            after = await self._read_config()
            flags = profile_flags(profile)
            want, got = batching_view(desired, **flags), batching_view(after, **flags)
            if want != got:
                raise _VerifyFailed(
                    f"Triton accepted {profile.name} but its config reads back different: "
                    f"{differences(want, got)}"
                )
        except ReloadFailure as exc:
            return await self._roll_back(profile, exc, live, restore_text, t0, load_s)

        self._last_good = profile
        log.info("%s: %s live and verified, loaded in %.2f s", self.model, profile.name, load_s)
        return self._result(
            profile,
            t0,
            ok=True,
            reason=ok_reason,
            active=profile.name,
            load_s=load_s,
            message=f"{profile.name} loaded and verified on {self.model} in {load_s:.2f} s",
        )

    async def _roll_back(
        self,
        profile: Profile,
        failure: ReloadFailure,
        before: dict[str, Any],
        restore_text: str | None,
        t0: float,
        load_s: float | None,
    ) -> ActuationResult:
        """Put the last good profile back, or confirm Triton kept it, after ``failure``.

        ``restore_text`` is the config.pbtxt this step replaced, in file mode.
        """
        what = f"{profile.name} on {self.model} failed ({failure.reason}): {failure}"
        path = self.config_path
        notes: list[str] = []
        if path is not None and restore_text is not None:
            try:
                write_atomic(path, restore_text)
            except OSError as exc:
                notes.append(f"{path} could not be restored: {exc}")
        good = self._last_good
        # When the failed profile *is* the last good one (a re-apply after a restart),
        # the state to return to is what ran before this step.
        if good is not None and matches(good, profile.merge_into(before)):
            good = None
        target_name = good.name if good is not None else self._name_of(before)
        label = target_name or "the previous config"
        # A load that timed out at our end is still running in Triton, and a config
        # read may show the old config until it ends: "still live" cannot be trusted
        # then. Loads of one model are serialised, so loading the target again waits
        # for the stray load and lands after it (a no-op if the stray one failed).
        timed_out = isinstance(failure, _LoadTimeout)
        try:
            current = await self._read_config(timeout_s=self.load_timeout_s)
            if good is not None:
                target = good.merge_into(current)
                flags = profile_flags(good)
            else:
                target = before
                flags = {"count": True, "kind": True}
            if not timed_out and batching_view(current, **flags) == batching_view(target, **flags):
                how = "Triton kept it serving"
            else:
                # Waits for the stray load after a timeout, then for its own.
                await self._load(target, timeout_s=2 * self.load_timeout_s if timed_out else None)
                after = await self._read_config()
                if batching_view(after, **flags) != batching_view(target, **flags):
                    raise _VerifyFailed(
                        f"{label} reads back different: "
                        f"{differences(batching_view(target, **flags), batching_view(after, **flags))}"
                    )
                how = "loaded it again"
        except ReloadFailure as exc:
            active = None
            with contextlib.suppress(ReloadFailure):
                active = self._name_of(await self._read_config())
            message = f"{what}; rolling back to {label} failed too: {exc}"
            if notes:
                message += "; " + "; ".join(notes)
            log.error("%s", message)
            return self._result(
                profile,
                t0,
                ok=False,
                reason=failure.reason,
                message=message,
                active=active,
                load_s=load_s,
            )
        message = f"{what}; rolled back to {label} ({how})"
        if notes:
            message += "; " + "; ".join(notes)
        log.warning("%s", message)
        return self._result(
            profile,
            t0,
            ok=False,
            reason=failure.reason,
            message=message,
            active=target_name,
            rolled_back=True,
            load_s=load_s,
        )

    # -- the boundary: httpx in, ReloadFailure out ----------------------------------------
    async def _read_config(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        timeout_s = timeout_s or self.request_timeout_s
        try:
            r = await self._client.get(self._config_url, headers=self._headers, timeout=timeout_s)
        except (httpx.ConnectTimeout, httpx.ReadTimeout, httpx.WriteTimeout) as exc:
            raise _ReadTimeout(
                f"Triton at {self.http_url} did not answer a config read within {timeout_s:g} s "
                "(it accepts connections but hangs)"
            ) from exc
        except httpx.HTTPError as exc:
            raise _Unreachable(
                f"Triton at {self.http_url} did not answer ({type(exc).__name__}: {exc}); is it running?"
            ) from exc
        if r.status_code != 200:
            self._check_refusal(r, f"the config read of {self.model!r}")
            raise _Unavailable(
                f"Triton answered {r.status_code} for the config of {self.model!r}: "
                f"{_error_text(r)}; is the model loaded?"
            )
        try:
            data = r.json()
        except ValueError as exc:
            raise _Unavailable(f"Triton's config of {self.model!r} is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _Unavailable(f"Triton's config of {self.model!r} is not a JSON object")
        return data

    async def _load(self, config: Mapping[str, Any], *, timeout_s: float | None = None) -> float:
        """Load ``config`` as an override; the seconds the load took."""
        if self.grpc_url is not None:
            return await self._load_grpc(config, timeout_s=timeout_s or self.load_timeout_s)
        body = {"parameters": {"config": json.dumps(config)}}
        start = self.clock()
        timeout_s = timeout_s or self.load_timeout_s
        try:
            r = await self._client.post(self._load_url, json=body, headers=self._headers, timeout=timeout_s)
        except httpx.ConnectTimeout as exc:
            raise _Unreachable(f"Triton at {self.http_url} did not accept a connection: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise _LoadTimeout(
                f"the load of {self.model!r} took longer than {timeout_s:g} s "
                "(raise load_timeout_s for large models)"
            ) from exc
        except httpx.HTTPError as exc:
            raise _Unreachable(
                f"Triton at {self.http_url} did not answer the load ({type(exc).__name__}: {exc})"
            ) from exc
        if r.status_code != 200:
            self._check_refusal(r, f"the load of {self.model!r}")
            raise _Refused(f"Triton refused the load: {_error_text(r)}")
        return self.clock() - start

    def _check_refusal(self, r: httpx.Response, what: str) -> None:
        """Raise :class:`_Forbidden` if ``r`` is the restricted API's refusal."""
        message = refusal(what, _error_text(r), self.restricted_api) if r.status_code == 403 else None
        if message is not None:
            raise _Forbidden(message)

    async def _load_grpc(self, config: Mapping[str, Any], *, timeout_s: float) -> float:
        import tritonclient.grpc.aio as grpcclient
        from tritonclient.utils import InferenceServerException

        if self._grpc is None:
            self._grpc = grpcclient.InferenceServerClient(self.grpc_url)
        start = self.clock()
        try:
            headers = self.restricted_api.grpc_headers if self.restricted_api else None
            await self._grpc.load_model(self.model, config=json.dumps(config), client_timeout=timeout_s,
                                        headers=headers)
        except InferenceServerException as exc:
            status = str(exc.status() or "")
            # Triton answers a restricted protocol with UNAVAILABLE: tell it from a dead server.
            refused = refusal(f"the load of {self.model!r} (gRPC)", str(exc.message() or ""),
                              self.restricted_api)
            if refused is not None:
                raise _Forbidden(refused) from exc
            if "DEADLINE_EXCEEDED" in status:
                raise _LoadTimeout(
                    f"the load of {self.model!r} took longer than {timeout_s:g} s "
                    "(raise load_timeout_s for large models)"
                ) from exc
            if "UNAVAILABLE" in status:
                raise _Unreachable(
                    f"Triton at {self.grpc_url} (gRPC) did not answer the load: {exc.message()}"
                ) from exc
            raise _Refused(f"Triton refused the load: {exc.message()}") from exc
        return self.clock() - start

    # -- helpers -----------------------------------------------------------------------
    def _candidates(self) -> list[Profile]:
        out = list(self.ladder)
        if self._last_good is not None and all(p.name != self._last_good.name for p in out):
            out.append(self._last_good)
        return out

    def _match(self, config: Mapping[str, Any]) -> Profile | None:
        for p in self._candidates():
            if matches(p, config):
                return p
        return None

    def _name_of(self, config: Mapping[str, Any]) -> str | None:
        p = self._match(config)
        return p.name if p else None

    def _file_matches(self, profile: Profile) -> bool:
        path = self.config_path
        if path is None:
            return True
        try:
            return matches(profile, parse_pbtxt(path.read_text(encoding="utf-8"), str(path)))
        except (OSError, ProfileError):
            return False

    def _result(self, profile: Profile, t0: float, **fields: Any) -> ActuationResult:
        return ActuationResult.since(profile, t0, self.clock(), **fields)
