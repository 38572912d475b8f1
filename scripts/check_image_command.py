"""The container image's exact command, run from a core-only install against the files
the reload overlay mounts, on every `make test` (the image itself is built and run with
podman by `make image-test`: tests/image/test_image.py).

    .venv/bin/python scripts/check_image_command.py CORE_VENV/bin

1. renders deploy/k8s/overlays/reload and writes the sidecar container's mounts (the
   projected ConfigMap + Secret volume at /etc/autobatch) under a temporary root;
2. checks the Deployment runs the Dockerfile's CMD;
3. runs the Dockerfile's ENTRYPOINT + CMD with CORE_VENV/bin first on PATH and the
   container's environment (AUTOBATCH_MODEL from the overlay's settings), each
   absolute path under a mount moved under the temporary root. In the mounted
   sidecar.yaml only the addresses change: the listen port to a free loopback one
   (9400 may be taken on a shared machine) and Triton's to a closed port, so the
   check never touches a server someone else runs;
4. waits for /healthz to answer 200 and /metrics to hold autobatch_ series, then
   sends SIGTERM and expects exit code 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autobatch.lab.process import poll_until  # noqa: E402
from autobatch.lab.serve import free_port  # noqa: E402
from tests.deploy_support import (  # noqa: E402
    OVERLAYS,
    container,
    container_env,
    environ_without_venv,
    find,
    image_command,
    materialize,
    render,
    shell_line,
)


def main(core_bin: Path) -> int:
    objects = render(OVERLAYS / "reload")
    (deployment,) = find(objects, "Deployment", "triton")
    sidecar = container(deployment, "autobatch")
    command = image_command()
    if sidecar.get("command") not in (None, command[:1]) or sidecar.get("args") not in (None, command[1:]):
        print(f"check-image: the Deployment runs {sidecar.get('command')} {sidecar.get('args')}, "
              f"the image {command}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="autobatch-image-") as tmp:
        root = Path(tmp)
        files = materialize(objects, deployment, "autobatch", root)
        mounts = [m["mountPath"] for m in sidecar["volumeMounts"]]
        argv = [str(root / a.lstrip("/")) if any(a.startswith(m + "/") for m in mounts) else a
                for a in command]
        config_path = Path(argv[-1])
        config = yaml.safe_load(config_path.read_text())
        port, closed = free_port(), free_port()
        config["server"]["listen"] = f"127.0.0.1:{port}"
        config["triton"].update(
            http_url=f"http://127.0.0.1:{closed}",
            metrics_url=f"http://127.0.0.1:{closed}/metrics",
            grpc_url=f"127.0.0.1:{closed}",
        )
        config_path.write_text(yaml.safe_dump(config))
        env = environ_without_venv()
        env["PATH"] = f"{core_bin}{os.pathsep}{env.get('PATH', '')}"
        # The container's environment as the pod sets it (AUTOBATCH_MODEL: the overlay's model).
        env.update(container_env(objects, deployment, "autobatch"))
        print(f"check-image: {shell_line(command)} with {len(files)} mounted files "
              f"({', '.join(str(f.relative_to(root)) for f in files)})")
        proc = subprocess.Popen(argv, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            url = f"http://127.0.0.1:{port}"

            def alive() -> None:
                if proc.poll() is not None:
                    raise RuntimeError(f"the sidecar exited with {proc.returncode}: {proc.stdout.read()}")

            def healthy() -> bool:
                try:
                    return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            poll_until(healthy, timeout_s=60, what="/healthz to answer 200", interval_s=0.1, check=alive)
            metrics = httpx.get(f"{url}/metrics", timeout=2).text
            if "autobatch_active_profile" not in metrics:
                print("check-image: /metrics has no autobatch_active_profile", file=sys.stderr)
                return 1
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = proc.stdout.read() if proc.stdout else ""
        if rc != 0:
            print(f"check-image: exit code {rc} after SIGTERM:\n{output}", file=sys.stderr)
            return 1
    print("check-image: /healthz 200, /metrics served, SIGTERM -> exit 0")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
