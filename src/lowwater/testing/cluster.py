"""A real Spark standalone cluster on localhost, for tests.

Starts ``org.apache.spark.deploy.master.Master`` and N
``org.apache.spark.deploy.worker.Worker`` processes with the ``spark-class``
launcher shipped inside the PySpark wheel, on free ports bound to 127.0.0.1,
waits until every worker is ALIVE (the master's ``/json`` endpoint), and
stops them all on exit (SIGTERM, then SIGKILL). Local mode hides closures that
capture driver state, driver-local paths and objects that do not pickle; a
cluster with separate executor JVMs and Python workers does not.

    with LocalStandaloneCluster(workers=2, work_dir=tmp) as c:
        subprocess.run([..., "--set", f"spark.master={c.master_url}"])
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalStandaloneCluster:
    """Context manager: a master and ``workers`` workers on 127.0.0.1."""

    def __init__(
        self, workers: int = 2, cores_per_worker: int = 1, memory_per_worker: str = "1g", work_dir: Path | None = None
    ) -> None:
        self.workers = workers
        self.cores = cores_per_worker
        self.memory = memory_per_worker
        self.work_dir = Path(work_dir or Path.cwd() / "spark-cluster")
        self.spark_home = Path(pyspark.__file__).parent
        self.port = free_port()
        self.ui_port = free_port()
        self.procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_NO_DAEMONIZE": "1",
        }

    def _start(self, name: str, args: list[str]) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.work_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed when the process ends
        cmd = [str(self.spark_home / "bin" / "spark-class"), *args]
        self.procs.append(
            subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self._env(), start_new_session=True)
        )

    def __enter__(self) -> LocalStandaloneCluster:
        self._start("master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
            "--webui-port", str(self.ui_port),
        ])
        for i in range(self.workers):
            work = self.work_dir / f"worker-{i}"
            self._start(f"worker-{i}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(free_port()),
                "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
                "--work-dir", str(work), self.master_url,
            ])
        try:
            self._wait_alive(timeout_s=90)
        except BaseException:
            self.stop()
            raise
        return self

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:  # noqa: S310 - loopback
            state = json.loads(r.read())
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait_alive(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):  # the master's UI is not up yet
                if self.alive_workers() >= self.workers:
                    return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.5)
        tails = []
        for f in sorted(self.work_dir.glob("*.log")):
            tails.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        msg = f"standalone cluster did not come up with {self.workers} workers:\n" + "\n".join(tails)
        raise RuntimeError(msg)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()

    def __exit__(self, *exc: object) -> None:
        self.stop()
