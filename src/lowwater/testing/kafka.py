"""A throwaway single-node Kafka broker for tests: KRaft (broker + controller in one JVM) on free ports.

The broker's jars are fetched by ``scripts/bootstrap.sh`` (``jars/pom.xml``,
profile ``broker``) into ``.jars/broker``; it runs in its own JVM with a small
heap, never on Spark's classpath. Test data goes in with a real client
(``confluent-kafka``) with explicit partitions and record timestamps; the
broker accepts timestamps of any age (``log.message.timestamp.*.max.ms``) and
never deletes by time (``log.retention.ms = -1``), so fixed past or future
event times are safe.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

BROKER_JARS = Path(__file__).resolve().parents[3] / ".jars" / "broker"
FOREVER_MS = str(2**62)


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (bound together: one closed before the next is asked for may come back)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class TestBroker:
    """One broker under ``root``: :meth:`start`, :meth:`create_topic`, :meth:`produce`, :meth:`stop`."""

    __test__ = False

    def __init__(self, root: Path, jars: Path = BROKER_JARS) -> None:
        if not any(jars.glob("kafka_2.13-*.jar")):
            msg = f"Kafka broker jars not found in {jars}: run scripts/bootstrap.sh (fetches them with Maven)"
            raise RuntimeError(msg)
        self.root = root
        self.jars = jars
        self.port, self.controller_port = _free_ports(2)
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self._admin = None
        self.props = root / "server.properties"
        self.log = root / "broker.log"

    def _java(self, main: str, *args: str) -> list[str]:
        return ["java", "-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-cp", f"{self.jars}/*", main, *args]

    def _write_props(self) -> None:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.root / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            # Test timestamps are fixed: accept any age, never delete by time (Kafka 4's defaults do both).
            "log.message.timestamp.after.max.ms": FOREVER_MS,
            "log.message.timestamp.before.max.ms": FOREVER_MS,
            "log.retention.ms": "-1",
        }
        self.props.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start(self, timeout_s: float = 90.0) -> None:
        """Format the storage (first start only), start the JVM, wait until the admin API answers."""
        self.root.mkdir(parents=True, exist_ok=True)
        if not (self.root / "data" / "meta.properties").exists():
            self._write_props()
            # "--cluster-id=<id>": an id may start with "-", which the tool's parser takes for an option.
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            fmt = subprocess.run(self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c",
                                            str(self.props)), capture_output=True, text=True, check=False)
            if fmt.returncode != 0:
                text = (fmt.stderr or fmt.stdout).strip()
                cause = next((ln for ln in text.splitlines() if "Exception" in ln), "")  # the trace's tail hides it
                msg = f"kafka-storage format failed: {cause[:800]} ... {text[-800:]}"
                raise RuntimeError(msg)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self._java("kafka.Kafka", str(self.props)), stdout=out,
                                         stderr=subprocess.STDOUT)
        self._wait(timeout_s)

    def _wait(self, timeout_s: float) -> None:
        admin = self.admin()
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                msg = f"the Kafka broker exited ({self.proc.returncode}): {self.log.read_text()[-800:]}"
                raise RuntimeError(msg)
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    self.stop()
                    msg = f"the Kafka broker did not answer within {timeout_s:.0f}s: {self.log.read_text()[-800:]}"
                    raise RuntimeError(msg) from None
                time.sleep(0.3)

    def admin(self):  # noqa: ANN201 - confluent_kafka.admin.AdminClient
        """An admin client (kept: a client destroyed before its futures resolve fails them)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            # log_level 0: "connection refused" while the broker starts is expected, not news.
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return self._admin

    def create_topic(self, name: str, partitions: int) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=30)
        deadline = time.monotonic() + 30
        while len(admin.list_topics(name, timeout=5).topics[name].partitions) < partitions:
            if time.monotonic() > deadline:
                msg = f"topic {name} did not get its {partitions} partitions"
                raise RuntimeError(msg)
            time.sleep(0.1)

    def delete_topic(self, name: str) -> None:
        self.admin().delete_topics([name])[name].result(timeout=30)

    def produce(self, topic: str, records: Iterable[tuple[int, int, bytes | str | None]]) -> int:
        """Write ``(partition, timestamp_ms, value)`` records in the given order (per partition: offset order)."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "acks": "all",
                             "enable.idempotence": True, "log_level": 3})
        errors: list[str] = []

        def done(err, _msg) -> None:  # noqa: ANN001 - confluent_kafka's callback
            if err is not None:
                errors.append(str(err))

        n = 0
        for partition, ts_ms, value in records:
            data = value.encode() if isinstance(value, str) else value
            producer.produce(topic, value=data, partition=partition, timestamp=ts_ms, on_delivery=done)
            producer.poll(0)
            n += 1
        if producer.flush(30) != 0 or errors:
            msg = f"producing to {topic} failed: {errors[:3] or 'not delivered within 30s'}"
            raise RuntimeError(msg)
        return n

    def stop(self) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after 20 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
