#!/usr/bin/env bash
# Install everything, then run the linter, the type checker and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
if [ -f scripts/ensure-postgres.sh ]; then
  bash scripts/ensure-postgres.sh
fi
.venv/bin/ruff check src tests bench
.venv/bin/mypy src/lowwater/core src/lowwater/config
exec .venv/bin/python -m pytest -q "$@"
