"""A throwaway S3-compatible server for tests: moto's server on a free 127.0.0.1 port, one bucket.

``moto`` (the dev extras) answers the S3 REST API in memory, honours
``If-None-Match: *`` and ``If-Match`` on ``PUT``, and is strongly consistent
like S3 itself; it checks no signature, so any credentials do. Spark reaches
it through Hadoop's S3A connector (``.jars/s3``, ``io/s3.py``) with the
settings of :meth:`TestS3Server.spark_s3` / :meth:`TestS3Server.hadoop_conf`.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from lowwater.config.runtime import S3Config

BUCKET = "lowwater-tests"
KEY, SECRET = "testing", "testing"  # moto checks no signature


def _free_port() -> int:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
    finally:
        s.close()


class TestS3Server:
    """:meth:`start` moto's S3 server with :data:`BUCKET`, :meth:`stop` it (its process, by pid)."""

    __test__ = False

    def __init__(self, log: Path) -> None:
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                msg = f"moto's S3 server exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}"
                raise RuntimeError(msg)
            try:
                self._request("PUT", f"/{BUCKET}")  # creates the bucket
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    msg = f"moto's S3 server did not answer on {self.endpoint} within {timeout_s:.0f} s"
                    raise RuntimeError(msg) from None
                time.sleep(0.2)

    def _request(self, method: str, path: str, body: bytes | None = None) -> bytes:
        # urllib's default body type is a form, which moto's Flask would parse away
        headers = {"Authorization": f"AWS {KEY}:unchecked"}  # an unsigned GET of a private object is refused
        if body is not None:
            headers["Content-Type"] = "application/octet-stream"
        req = urllib.request.Request(self.endpoint + path, data=body, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - our own server on 127.0.0.1
            return r.read()

    def put(self, key: str, body: bytes) -> None:
        """Upload one object (e.g. a landed file), as any S3 client would."""
        self._request("PUT", f"/{BUCKET}/{key}", body)

    def get(self, key: str) -> bytes:
        return self._request("GET", f"/{BUCKET}/{key}")

    def url(self, prefix: str) -> str:
        """``s3a://`` URL of ``prefix`` in the bucket."""
        return f"s3a://{BUCKET}/{prefix.strip('/')}"

    def spark_s3(self) -> S3Config:
        """The ``[spark.s3]`` table that reaches this server."""
        return S3Config(self.endpoint, "us-east-1", True, KEY, SECRET)

    def toml(self) -> str:
        """The same as a ``[spark.s3]`` TOML table."""
        return (f'[spark.s3]\nendpoint = "{self.endpoint}"\nregion = "us-east-1"\npath_style_access = true\n'
                f'access_key = "{KEY}"\nsecret_key = "{SECRET}"\n')

    def hadoop_conf(self) -> dict[str, str]:
        return self.spark_s3().hadoop_conf()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
