"""A throwaway PostgreSQL server for tests: initdb into a temp dir, pg_ctl on a free port.

initdb and postgres refuse to run as root, so as root they run as the ``postgres``
OS user (``runuser``); the data directory is made accessible to that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from pathlib import Path

PASSWORD = "s3cret-pw"  # trust auth ignores it; it is there so tests can check it is never printed


def find_bin(name: str) -> str:
    """``initdb``/``pg_ctl`` from PATH or the Debian layout ``/usr/lib/postgresql/<ver>/bin``."""
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    if not cands:
        msg = f"PostgreSQL's {name} not found: run scripts/ensure-postgres.sh (apt-get install postgresql)"
        raise RuntimeError(msg)
    return cands[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestServer:
    """One server under ``root``; ``url`` carries a password to exercise masking."""

    __test__ = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.user = "lowwater"
        self.url = f"postgresql://{self.user}:{PASSWORD}@127.0.0.1:{self.port}/postgres"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        proc = subprocess.run([*self._as, *args], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            msg = f"{' '.join(args[:2])} failed: {proc.stderr.strip()[-800:]}"
            raise RuntimeError(msg)

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._as:
            os.chmod(self.root, 0o777)  # a fresh mkdtemp under /tmp: reachable by the postgres user
        self._run(find_bin("initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8")
        self.start()

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(find_bin("pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w",
                  "start")

    def stop(self) -> None:
        """Fast shutdown: running transactions are rolled back (what a crashed server does to us)."""
        self._run(find_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
