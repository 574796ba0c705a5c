#!/usr/bin/env bash
# Install what owx needs, then start it on this machine's embedded defaults (owx up).
# Options and OWX_* variables pass through: ./scripts/up.sh --port 3233 --platform embedded
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec owx up "$@"
