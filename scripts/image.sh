#!/usr/bin/env bash
# `make image`: build the sidecar image from the Dockerfile with podman, on a Debian base
# made here, since no registry image can be pulled on these machines (docs/deploy.md).
#
# 1. debootstrap --variant=minbase bookworm, with python3, python3-venv and ca-certificates
#    (Debian slim plus Python), imported with `podman import` as localhost/autobatch-base:bookworm;
#    made once, then reused from the image store;
# 2. podman build --build-arg BASE=<that base> (the registry's python:3.11-slim-bookworm stays
#    the Dockerfile's default), --isolation chroot, --network host (pip reaches PyPI), and
#    --pull=never (nothing comes from a registry).
#
# podman runs with runc (crun refuses this machine's hybrid cgroups) and a containers.conf
# with `default_ulimits = []` (the hard limit on open files here is 20000, below podman's
# default), named by CONTAINERS_CONF; its store is .image-build/ (gitignored), so nothing
# of the machine's own podman is touched. Prints the image's tag last.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=${AUTOBATCH_IMAGE_STATE:-$PWD/.image-build}
TAG=${AUTOBATCH_IMAGE:-localhost/autobatch:$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')}
BASE=localhost/autobatch-base:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

need=()
for pkg in debootstrap podman runc; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "image: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$STATE"
cat > "$STATE/containers.conf" <<CONF
[containers]
default_ulimits = []
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$STATE/containers.conf"
podman=(podman --root "$STATE/storage" --runroot "$STATE/run")

if ! "${podman[@]}" image exists "$BASE"; then
  start=$SECONDS
  rootfs="$STATE/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$MIRROR" \
    > "$STATE/debootstrap.log" 2>&1 || { tail -20 "$STATE/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | "${podman[@]}" import --quiet - "$BASE" >/dev/null
  rm -rf "$rootfs"
  echo "image: base $BASE made in $((SECONDS - start)) s (debootstrap + podman import)" >&2
fi

# pip inside the build trusts what pip here trusts: this machine reaches PyPI through a
# TLS-intercepting proxy whose CA only the host's bundle holds (a build secret: not in the image).
cert=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
secret=()
[ -n "$cert" ] && [ -f "$cert" ] && secret=(--secret "id=pip-cert,src=$cert")

start=$SECONDS
"${podman[@]}" build --quiet --format docker --isolation chroot --network host --pull=never "${secret[@]}" \
  --build-arg "BASE=$BASE" --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  -t "$TAG" -f Dockerfile . >&2
echo "image: $TAG built in $((SECONDS - start)) s (podman build)" >&2
echo "$TAG"
