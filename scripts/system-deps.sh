#!/usr/bin/env bash
# Debian packages the integration tests run for real (scripts/apt-packages.txt,
# one per line). Installed only if missing.
set -euo pipefail
cd "$(dirname "$0")"
need=()
while read -r pkg _; do
  case "$pkg" in ''|\#*) continue ;; esac
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done < apt-packages.txt
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "system-deps: installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
