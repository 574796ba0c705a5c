#!/usr/bin/env bash
# Install what the tests need, then run them all (pytest args pass through).
# Every service the tests use (dockerd, redis-server, pouchdb-server, FRR) is started by the tests' fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --test
status=0
python3 -m pytest tests "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "test: pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit $status
