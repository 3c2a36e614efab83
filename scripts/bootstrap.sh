#!/usr/bin/env bash
# Create .venv (Python 3.11) and install lowwater with its pinned dependencies.
# Idempotent: a second run only checks. Needs Java 17 for Spark (installed with
# apt-get when missing and we are root), Chromium for the browser tests and
# promtool for the metric names (the same way).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
if [ -z "$PY" ]; then
  echo "error: lowwater needs Python 3.11 (set PYTHON=/path/to/python3.11)" >&2
  exit 2
fi

if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "Java not found: installing openjdk-17-jre-headless" >&2
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "error: Spark needs Java 17 on PATH (e.g. apt-get install openjdk-17-jre-headless)" >&2
    exit 2
  fi
fi

# Headless Chromium for the dashboard's browser tests (Debian's package; tests fail, never skip, without it).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "Chromium not found: installing chromium (the dashboard's browser tests)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "warning: the dashboard's browser tests need Chromium (apt-get install chromium)" >&2
  fi
fi

# promtool (Debian ships it in the prometheus package) checks the exported metric names in the tests.
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "promtool not found: installing prometheus (its promtool checks the metric names)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "warning: the metric-name test needs promtool (apt-get install prometheus)" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.lowwater-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[dev]'
  touch "$stamp"
fi

# Spark's Kafka connector (on spark.jars when a Kafka source is configured), Delta Lake's jars
# (on spark.jars when [output] kind = "delta"), Hadoop's S3A connector (on spark.jars when a path
# is s3a://) and a Kafka broker for the tests, fetched with Maven from jars/pom.xml into .jars/.
jars_stamp=.jars/.fetched
if [ ! -f "$jars_stamp" ] || [ jars/pom.xml -nt "$jars_stamp" ]; then
  if ! command -v mvn >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      echo "Maven not found: installing maven" >&2
      apt-get update -qq && apt-get install -y -qq maven >/dev/null
    else
      echo "error: fetching the Kafka, Delta and S3A jars needs Maven on PATH (e.g. apt-get install maven)" >&2
      exit 2
    fi
  fi
  rm -rf .jars && mkdir -p .jars
  for profile in connector broker delta s3; do  # mvn -q still prints colour codes: keep its output for a failure
    if ! mvn -q -B -f jars/pom.xml -P "$profile" dependency:copy-dependencies \
        -Djars.dir="$PWD/.jars/$profile" >.jars/mvn.log 2>&1; then
      echo "error: fetching the jars ($profile, jars/pom.xml) failed:" >&2
      grep -a ERROR .jars/mvn.log | head -20 >&2
      exit 1
    fi
  done
  touch "$jars_stamp"
fi
