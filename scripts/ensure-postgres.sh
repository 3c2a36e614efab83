#!/usr/bin/env bash
# Make sure PostgreSQL's server binaries (initdb, pg_ctl) exist; the tests start
# their own throwaway server (tests/conftest.py, fixture pg_server).
set -euo pipefail
have() { command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }
if have; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "PostgreSQL not found: installing the distribution's postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  # The package starts a cluster on 5432 on some systems; the tests do not use it.
  have || { echo "error: postgresql installed but initdb not found" >&2; exit 2; }
else
  echo "error: the tests need PostgreSQL's initdb (apt-get install postgresql, as root)" >&2
  exit 2
fi
