#!/usr/bin/env bash
# The API reference: HTML from the docstrings of `import lowwater as lw` and lowwater.api, rendered by pdoc
# (the dev extra) into docs/api/ (git-ignored), or into the directory given. Open docs/api/lowwater.html.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/api}"
python="${PYTHON:-.venv/bin/python}"
# lowwater (the public names: lw.*) and the modules of lowwater.api they come from (the builders, the
# batch tools, the query handle and foreach_batch's batch); not the engine's modules.
exec "$python" -m pdoc --docformat restructuredtext --no-show-source --footer-text "lowwater" -o "$out" \
  lowwater lowwater.api lowwater.api.pipeline lowwater.api.stream lowwater.api.specs lowwater.api.tools lowwater.api.running \
  lowwater.api.foreach '!lowwater\.reconcile'  # lw.reconcile is the function (api/tools), not that package
