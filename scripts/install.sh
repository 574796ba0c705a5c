#!/usr/bin/env bash
# Install what owx needs on a fresh Debian bookworm machine (root): system packages,
# the owx distribution with its extras, and (with --test) the npm test clients.
set -euo pipefail
cd "$(dirname "$0")/.."

SYSTEM_PACKAGES=(docker.io redis-server frr mmdebstrap iproute2 nftables e2fsprogs mount iputils-ping iperf3 ethtool psmisc ca-certificates wrk apache2-utils)
missing=()
for package in "${SYSTEM_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "install: apt packages ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "install: python packages (owx[all,disdel])"
python3 -m pip install -q --disable-pip-version-check -e ".[all,disdel]" 2>&1 | grep -v -e "^WARNING: Running pip as" -e "is ignored: it is neither" || true

if [[ "${1:-}" == "--test" ]]; then
  echo "install: npm test clients (openwhisk, pouchdb-server)"
  npm ci --prefix tests/npm --no-audit --no-fund --loglevel=error >/dev/null
fi
