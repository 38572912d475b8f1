"""The sidecar image, built by podman (`make image-test`), run beside the real Triton.

The image is what scripts/image.sh builds from the Dockerfile (on a Debian base made with
debootstrap; AUTOBATCH_IMAGE names it). Its container gets what the reload overlay's pod
gives it: the files of the projected volume (sidecar.yaml, the profiles, the token,
Triton's restricted-API key, from the rendered overlay) read-only at /etc/autobatch, the
model from the overlay's setting (AUTOBATCH_MODEL), a read-only root file system with a
tmpfs /tmp, every capability dropped, no new privileges. Next to it runs the embedded
Triton started with the overlay's restricted-API flags and the overlay's key; only the
addresses in sidecar.yaml change (the container shares the host's network, and Triton
listens on free loopback ports).

Run by `make image-test` (tests/image/ is not part of `make test`: docs/deploy.md says why).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

import autobatch
from autobatch.lab.process import poll_until
from autobatch.lab.serve import TritonServer, free_port

from ..conftest import REPOSITORY
from ..deploy_support import OVERLAYS, container, container_env, find, materialize, render

STATE = Path(os.environ.get("AUTOBATCH_IMAGE_STATE", Path(__file__).resolve().parents[2] / ".image-build"))
IMAGE = os.environ.get("AUTOBATCH_IMAGE")
GRACE_S = 30
"""The pod's terminationGracePeriodSeconds is 60; the sidecar must be gone well inside it."""

pytestmark = pytest.mark.skipif(not IMAGE, reason="make image-test builds the image and runs this")


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTAINERS_CONF": str(STATE / "containers.conf")}
    cmd = ["podman", "--root", str(STATE / "storage"), "--runroot", str(STATE / "run"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@pytest.fixture(scope="module")
def overlay() -> dict:
    objects = render(OVERLAYS / "reload")
    (dep,) = find(objects, "Deployment", "triton")
    return {"objects": objects, "deployment": dep}


@pytest.fixture(scope="module")
def locked(overlay) -> Iterator[TritonServer]:
    """The embedded Triton, its control APIs locked as the overlay's Triton container locks them."""
    objects, dep = overlay["objects"], overlay["deployment"]
    env = container_env(objects, dep, "triton")
    (secret,) = [s for s in find(objects, "Secret") if s["metadata"]["name"].startswith("triton-api-key")]
    key = base64.b64decode(secret["data"]["key"]).decode().strip()
    spec = f"{env['TRITON_RESTRICTED_APIS']}:{env['TRITON_RESTRICTED_HEADER']}={key}"
    args = [f"--http-restricted-api={spec}", f"--grpc-restricted-protocol={spec}"]
    with TritonServer.on_free_ports(REPOSITORY, models=[env["MODEL"]], extra_args=args) as server:
        server.key = key  # type: ignore[attr-defined]
        server.header = env["TRITON_RESTRICTED_HEADER"]  # type: ignore[attr-defined]
        yield server


def test_the_image_is_labelled_and_runs_as_a_non_root_user():
    (info,) = json.loads(podman("image", "inspect", IMAGE).stdout)
    config = info["Config"]
    assert config["User"] == "10001:10001"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == autobatch.__version__
    assert labels["org.opencontainers.image.title"] == "autobatch"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.base.name"] == "localhost/autobatch-base:bookworm"
    assert config["Entrypoint"] == ["autobatch"]
    assert config["Cmd"] == ["run", "--config", "/etc/autobatch/sidecar.yaml"]
    # Core only: neither torch nor nvidia-pytriton went in.
    found = podman("run", "--rm", "--network", "none", "--entrypoint", "python", IMAGE, "-c",
                   "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('pytriton'))").stdout
    assert found.split() == ["None", "None"]


def test_the_container_reloads_triton_on_a_pin_and_stops_on_sigterm(tmp_path, overlay, locked, capsys):
    objects, dep = overlay["objects"], overlay["deployment"]
    sidecar = container(dep, "autobatch")
    root = tmp_path / "pod"
    materialize(objects, dep, "autobatch", root)
    mount = root / "etc" / "autobatch"
    config = yaml.safe_load((mount / "sidecar.yaml").read_text())
    port = free_port()
    config["server"]["listen"] = f"127.0.0.1:{port}"
    config["triton"].update(http_url=locked.urls.http, metrics_url=locked.urls.metrics,
                            grpc_url=locked.urls.grpc)
    (mount / "sidecar.yaml").write_text(yaml.safe_dump(config))
    # As the kubelet leaves them: owned by root, readable by the pod's group (fsGroup), 0440
    # for the token and the key; the container's user is in that group (--group-add).
    for path in [root, *root.rglob("*")]:
        os.chown(path, 0, 10001)
        path.chmod(0o750 if path.is_dir() else 0o440)
    token = (mount / "token").read_text().strip()
    model = container_env(objects, dep, "autobatch")["AUTOBATCH_MODEL"]
    name = f"autobatch-image-test-{port}"
    t0 = time.monotonic()
    podman("run", "--detach", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp",
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--group-add", "10001",
           "--env", f"AUTOBATCH_MODEL={model}", "--volume", f"{mount}:/etc/autobatch:ro", IMAGE)
    url = f"http://127.0.0.1:{port}"
    try:
        assert podman("exec", name, "id", "-u").stdout.strip() == "10001"

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        def running() -> None:
            state = podman("inspect", name, "--format", "{{.State.Status}}").stdout.strip()
            if state != "running":
                raise AssertionError(f"the container is {state}: {podman('logs', name, check=False).stderr}")

        poll_until(healthy, timeout_s=60, interval_s=0.2, what="the container's /healthz", check=running)
        started_s = time.monotonic() - t0
        ladder = ("triton-default", "efficient")
        # The repository's config is on no rung: the sidecar applies the first one at start.
        status = poll_until(lambda: (s := httpx.get(f"{url}/status", timeout=5).json())["active_profile"]
                            in ladder and s, timeout_s=120, interval_s=0.2,
                            what="the container's live profile on the ladder", check=running)
        assert status["model"] == model
        before = status["active_profile"]
        target = "efficient" if before == "triton-default" else "triton-default"
        r = httpx.post(f"{url}/profile", json={"profile": target},
                       headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert r.status_code == 200, r.text
        t_pin = time.monotonic()
        poll_until(lambda: httpx.get(f"{url}/status", timeout=5).json()["active_profile"] == target,
                   timeout_s=120, interval_s=0.2, what=f"the pin to {target}", check=running)
        pin_s = time.monotonic() - t_pin
        live = httpx.get(f"{locked.urls.http}/v2/models/{model}/config", headers={locked.header: locked.key},
                         timeout=30).json()
        want = yaml.safe_load((mount / "profiles" / model / f"{target}.yaml").read_text())
        assert live["dynamic_batching"].get("preferred_batch_size", []) in (
            want["dynamic_batching"]["preferred_batch_size"], [32])  # Triton reads [] as [max_batch_size]
        assert live["dynamic_batching"].get("max_queue_delay_microseconds", 0) == \
            want["dynamic_batching"]["max_queue_delay_microseconds"]
        assert locked.key not in json.dumps(httpx.get(f"{url}/status", timeout=5).json())
        t_stop = time.monotonic()
        podman("stop", "--time", str(GRACE_S), name, timeout=GRACE_S + 30)
        stop_s = time.monotonic() - t_stop
        code = podman("inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip()
        logs = podman("logs", name, check=False)
        assert code == "0", logs.stderr
        assert stop_s < GRACE_S, f"SIGTERM took {stop_s:.1f} s"
        assert locked.key not in logs.stdout + logs.stderr
    finally:
        podman("rm", "--force", name, check=False)
    assert sidecar["args"] == ["run", "--config", "/etc/autobatch/sidecar.yaml"]
    with capsys.disabled():
        print(f"\n[image] {IMAGE}: /healthz after {started_s:.1f} s, pin {before} -> {target} live in "
              f"{pin_s:.1f} s, SIGTERM -> exit 0 in {stop_s:.1f} s")

