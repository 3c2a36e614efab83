#!/usr/bin/env bash
# Install everything, then run the built-in payments demo on local Spark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/lowwater demo "$@"
