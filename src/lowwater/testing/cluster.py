"""A real Spark standalone cluster on localhost, for tests.

Starts ``org.apache.spark.deploy.master.Master`` and N
``org.apache.spark.deploy.worker.Worker`` processes with the ``spark-class``
launcher shipped inside the PySpark wheel, all bound to 127.0.0.1, and stops
them all on exit (SIGTERM, then SIGKILL). Local mode hides closures that
capture driver state, driver-local paths and objects that do not pickle; a
cluster with separate executor JVMs and Python workers does not.

Robust on machines whose hostname does not resolve (or resolves elsewhere):
every process -- daemons, and the drivers started with :meth:`client_env` /
:attr:`driver_conf` -- binds to and advertises 127.0.0.1
(``SPARK_LOCAL_IP``, ``SPARK_LOCAL_HOSTNAME``, ``spark.driver.host``,
``spark.driver.bindAddress``). Fast: the workers start only once the master
answers on its port (a worker that finds no master backs off 5-15 s before
retrying), daemon heaps are small, and a port taken between choosing it and
binding it (``spark.port.maxRetries = 0``: fail instead of silently moving to
the next port) restarts that daemon on fresh ports.

    with LocalStandaloneCluster(workers=2, work_dir=tmp) as c:
        subprocess.run([..., "--master", c.master_url], env=c.client_env())
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

LOOPBACK = "127.0.0.1"
DAEMON_MEMORY = "256m"  # master and worker JVMs only route messages; executors get their own heap
BIND_ATTEMPTS = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((LOOPBACK, port)) == 0


def loopback_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for any Spark JVM that must bind to and advertise 127.0.0.1 only."""
    return {
        **(os.environ if base is None else base),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_LOCAL_HOSTNAME": LOOPBACK,
        "PYSPARK_PYTHON": sys.executable,
    }


class LocalStandaloneCluster:
    """Context manager: a master and ``workers`` workers on 127.0.0.1."""

    def __init__(
        self,
        workers: int = 2,
        cores_per_worker: int = 1,
        memory_per_worker: str = "1g",
        work_dir: Path | None = None,
        start_timeout_s: float = 60,
    ) -> None:
        self.workers = workers
        self.cores = cores_per_worker
        self.memory = memory_per_worker
        self.work_dir = Path(work_dir or Path.cwd() / "spark-cluster")
        self.spark_home = Path(pyspark.__file__).parent
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.ui_port = 0
        self.procs: dict[str, subprocess.Popen] = {}
        self.startup_s: float | None = None

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def driver_conf(self) -> dict[str, str]:
        """Spark settings a driver (``spark-submit`` or ``SparkSession``) needs to talk to this cluster."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
        }

    def client_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for a driver process (its JVM binds and advertises 127.0.0.1)."""
        return loopback_env(base)

    def _env(self) -> dict[str, str]:
        env = loopback_env()
        env.update({
            "SPARK_HOME": str(self.spark_home),
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # Fail on a taken port (we retry on fresh ones) instead of binding the next one silently.
            "SPARK_DAEMON_JAVA_OPTS": "-Dspark.port.maxRetries=0 -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            "SPARK_WORKER_DIR": str(self.work_dir),
        })
        env.pop("SPARK_CONF_DIR", None)
        return env

    def _start(self, name: str, args: list[str]) -> subprocess.Popen:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.work_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed when the process ends
        cmd = [str(self.spark_home / "bin" / "spark-class"), *args]
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self._env(), start_new_session=True)
        log.close()
        self.procs[name] = p
        return p

    def _wait(self, what: str, ready, proc: subprocess.Popen, deadline: float) -> bool:  # noqa: ANN001
        """Poll ``ready()`` until true; False if ``proc`` died first (a port was taken)."""
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return True
            if proc.poll() is not None:
                return False
            time.sleep(0.1)
        self._fail(f"{what} not up after {self.start_timeout_s:.0f} s")
        return False

    def _start_master(self, deadline: float) -> None:
        for _ in range(BIND_ATTEMPTS):
            self.port, self.ui_port = free_port(), free_port()
            p = self._start("master", [
                "org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(self.port),
                "--webui-port", str(self.ui_port),
            ])
            if self._wait("master", lambda: port_open(self.port) and self.master_state() == "ALIVE", p, deadline):
                return
        self._fail(f"master did not start in {BIND_ATTEMPTS} attempts")

    def _start_worker(self, i: int) -> subprocess.Popen:
        return self._start(f"worker-{i}", [
            "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK, "--port", str(free_port()),
            "--webui-port", str(free_port()), "--cores", str(self.cores), "--memory", self.memory,
            "--work-dir", str(self.work_dir / f"worker-{i}"), self.master_url,
        ])

    def __enter__(self) -> LocalStandaloneCluster:
        t0 = time.monotonic()
        deadline = t0 + self.start_timeout_s
        try:
            self._start_master(deadline)
            for i in range(self.workers):
                self._start_worker(i)
            attempts = dict.fromkeys(range(self.workers), 1)
            while self.alive_workers() < self.workers:
                for i in range(self.workers):
                    p = self.procs[f"worker-{i}"]
                    if p.poll() is not None:  # its port was taken: again, on fresh ports
                        if attempts[i] >= BIND_ATTEMPTS:
                            self._fail(f"worker-{i} did not start in {BIND_ATTEMPTS} attempts")
                        attempts[i] += 1
                        self._start_worker(i)
                if time.monotonic() > deadline:
                    self._fail(f"{self.workers} workers not ALIVE after {self.start_timeout_s:.0f} s")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _status(self) -> dict:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ui_port}/json/", timeout=2) as r:  # noqa: S310
            return json.loads(r.read())

    def master_state(self) -> str | None:
        return self._status().get("status")

    def alive_workers(self) -> int:
        try:
            state = self._status()
        except OSError:
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _fail(self, what: str) -> None:
        tails = []
        for f in sorted(self.work_dir.glob("*.log")):
            tails.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        msg = f"standalone cluster: {what}:\n" + "\n".join(tails)
        raise RuntimeError(msg)

    def stop(self) -> None:
        procs = list(self.procs.values())
        for p in reversed(procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()

    def __exit__(self, *exc: object) -> None:
        self.stop()
