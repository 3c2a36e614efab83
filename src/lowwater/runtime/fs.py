"""Driver-side file operations through Hadoop's FileSystem API.

State manifests and the summary live next to the checkpoint, which on a cluster
is shared storage (HDFS, S3, a mounted volume): going through the JVM's
Hadoop FileSystem makes the same code work for every scheme Spark can write.

On an object store (``s3a://``, :data:`OBJECT_STORES`) a rename is a copy and
a delete, and ``create(overwrite=false)`` is a check, then a write: so there a
"published atomically" text file is one ``PUT`` at ``close`` (the object
appears whole or not at all, and is never renamed), and an exclusive create
is a conditional ``PUT`` (``If-None-Match: *``, S3A's
``fs.option.create.conditional.overwrite``) that a second writer loses
(docs/adr/0029).
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.sql import SparkSession

# Schemes whose rename is a copy plus a delete and whose objects appear whole when their writer closes them
# (S3A; other stores keep Hadoop's create and rename, e.g. GCS's connector creates exclusively itself).
OBJECT_STORES = frozenset({"s3a"})
CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite"  # PUT with If-None-Match: *
CONDITIONAL_REPLACE = "fs.option.create.conditional.overwrite.etag"  # PUT with If-Match: <etag>


def hidden(name: str) -> bool:
    """Names a landing directory's listing skips: Spark's rule (``HadoopFSUtils.shouldFilterOutPathName``).

    Spark keeps Parquet's ``_metadata``/``_common_metadata`` summaries for its
    own use; they hold no rows, so they are skipped here too.
    """
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def local_files(directory: str) -> list[str]:
    """:meth:`HadoopFS.list_files` on the local file system, through the OS."""
    if not os.path.isdir(directory):
        return []
    out: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not hidden(d)]
        rel = os.path.relpath(root, directory).replace(os.sep, "/")
        prefix = "" if rel == "." else rel + "/"
        out += [prefix + f for f in files if not hidden(f)]
    return sorted(out)


class HadoopFS:
    """A few file operations on any path Spark can address.

    Every JVM call is a py4j round trip, and the engine lists the state
    directory twice a step: on the local file system (``file:`` paths, or
    plain ones when it is the default) listing and existence checks are done
    by Python directly, hiding Hadoop's ``.crc`` side files as Hadoop does.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark.sparkContext._jvm  # noqa: SLF001
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
        self._path_class = self._jvm.org.apache.hadoop.fs.Path
        self._systems: dict[tuple[str, str], object] = {}
        self._exclusive: dict[tuple[str, str], str | None] = {}  # conditional_create's answer per bucket
        self._default_local = str(self._conf.get("fs.defaultFS") or "file:///").startswith("file:")

    def _path(self, path: str):  # noqa: ANN202
        p = self._path_class(path)
        parts = urlsplit(path)
        where = (parts.scheme, parts.netloc)
        if where not in self._systems:
            self._systems[where] = p.getFileSystem(self._conf)
        return p, self._systems[where]

    def setting(self, key: str) -> str | None:
        """The session's Hadoop setting ``key`` (None when unset): a writer of its own reads S3A's this way."""
        value = self._conf.get(key)
        return None if value is None else str(value)

    def local_path(self, path: str) -> str | None:
        """The OS path of ``path`` when it is on the local file system, else None."""
        parts = urlsplit(path)
        if parts.scheme == "file" and parts.netloc in ("", "localhost"):
            return parts.path
        if not parts.scheme and self._default_local:
            return path
        return None

    def exists(self, path: str) -> bool:
        local = self.local_path(path)
        if local is not None:
            return os.path.exists(local)
        p, fs = self._path(path)
        return bool(fs.exists(p))

    def list_names(self, path: str) -> list[str]:
        local = self.local_path(path)
        if local is not None:
            if not os.path.isdir(local):
                return []
            return sorted(n for n in os.listdir(local) if not (n.startswith(".") and n.endswith(".crc")))
        p, fs = self._path(path)
        if not fs.exists(p):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(p))

    def list_files(self, path: str) -> list[str]:
        """Data files under ``path`` (recursively), as sorted ``/``-separated names relative to it.

        Skips what Spark's file sources skip: names starting with ``.`` or with
        ``_`` (unless ``k=v``-style), at any depth, and ``._COPYING_`` files
        still being copied in.
        """
        local = self.local_path(path)
        if local is not None:
            return local_files(local)
        out: list[str] = []
        p, fs = self._path(path)
        if not fs.exists(p):
            return []
        todo = [(p, "")]
        while todo:
            directory, prefix = todo.pop()
            for st in fs.listStatus(directory):
                name = str(st.getPath().getName())
                if hidden(name):
                    continue
                if st.isDirectory():
                    todo.append((st.getPath(), f"{prefix}{name}/"))
                else:
                    out.append(prefix + name)
        return sorted(out)

    def read_text(self, path: str) -> str:
        p, fs = self._path(path)
        stream = fs.open(p)
        try:
            reader = self._jvm.java.io.BufferedReader(self._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            lines = []
            line = reader.readLine()
            while line is not None:
                lines.append(line)
                line = reader.readLine()
            return "\n".join(lines)
        finally:
            stream.close()

    def object_store(self, path: str) -> bool:
        """Is ``path`` on an object store (rename is a copy; an object appears whole at ``close``)?"""
        return urlsplit(path).scheme in OBJECT_STORES

    def write_text_atomic(self, path: str, text: str) -> None:
        """Replace ``path`` with ``text`` so no reader sees it half-written or missing.

        A file system: a temporary file renamed over ``path``. An object store:
        one ``PUT`` of ``path`` itself (never a rename, which is a copy there).
        """
        p, fs = self._path(path)
        if self.object_store(path):
            self._put(fs.create(p, True), text)
            return
        tmp, _ = self._path(path + ".tmp")
        out = fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        if fs.exists(p):
            fs.delete(p, False)
        if not fs.rename(tmp, p):
            msg = f"could not rename {tmp} to {p}"
            raise OSError(msg)

    def create_new(self, path: str, text: str) -> bool:
        """Create ``path`` holding ``text`` unless it exists (False then).

        Hadoop's ``create(overwrite=false)``: atomic on HDFS. On an object store a
        conditional ``PUT`` (``If-None-Match: *``) whose losing writer gets 412;
        :meth:`conditional_create` says whether the store honours it.
        """
        p, fs = self._path(path)
        if self.object_store(path):
            builder = fs.createFile(p).overwrite(False).must(CONDITIONAL_CREATE, True)
            return self._put_if(builder, p, fs, text)
        try:
            out = fs.create(p, False)
        except Exception:
            if fs.exists(p):
                return False
            raise
        self._put(out, text)
        return True

    def _put(self, out, text: str) -> None:  # noqa: ANN001 - a Java FSDataOutputStream
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()  # on an object store: the PUT

    def _put_if(self, builder, p, fs, text: str) -> bool:  # noqa: ANN001 - Java objects
        """Build and write a conditional create; False when its condition failed (HTTP 412, or it exists)."""
        try:
            self._put(builder.build(), text)
        except Py4JJavaError as e:
            failed = str(e.java_exception.getClass().getName())
            if failed.endswith(("RemoteFileChangedException", "FileAlreadyExistsException")):
                return False
            raise
        return True

    def conditional_create(self, path: str) -> str | None:
        """None when a create at ``path`` is exclusive, else why not (object stores: the client and the store).

        The client must offer S3A's conditional create, and the store must
        refuse a second one: checked once per bucket by creating a probe
        object twice next to ``path``.
        """
        if not self.object_store(path):
            return None
        p, fs = self._path(path)
        where = urlsplit(path)
        key = (where.scheme, where.netloc)
        if key in self._exclusive:
            return self._exclusive[key]
        reason = None
        if not fs.hasPathCapability(p, CONDITIONAL_CREATE):
            reason = f"this {where.scheme}:// client offers no conditional create ({CONDITIONAL_CREATE})"
        else:
            probe = f"{path.rstrip('/')}.probe-{uuid.uuid4().hex}"
            try:
                if not self.create_new(probe, "1"):
                    reason = "a fresh probe object could not be created"
                elif self.create_new(probe, "2"):
                    reason = "the store accepted a second create of one object: it ignores If-None-Match"
            except Py4JJavaError as e:  # e.g. 501 Not Implemented from a store without conditional writes
                first = str(e.java_exception.toString()).splitlines()[0][:200]
                reason = f"the store refused a conditional create: {first}"
            finally:
                self.delete(probe)
        self._exclusive[key] = reason
        return reason

    def etag(self, path: str) -> str | None:
        """The object's version tag (object stores), None when absent or unknown."""
        p, fs = self._path(path)
        try:
            tag = fs.getFileStatus(p).getEtag()  # S3AFileStatus is an EtagSource
        except Py4JError:  # absent, or a file system without etags
            return None
        return str(tag) if tag else None

    def replace_if(self, path: str, text: str, etag: str) -> bool:
        """Overwrite ``path`` only if it is still the version ``etag`` (``If-Match``); False otherwise."""
        p, fs = self._path(path)
        builder = fs.createFile(p).overwrite(True).must(CONDITIONAL_REPLACE, etag)
        return self._put_if(builder, p, fs, text)

    def delete(self, path: str) -> None:
        p, fs = self._path(path)
        if fs.exists(p):
            fs.delete(p, True)

    def size(self, path: str) -> int:
        """Total bytes under ``path`` (0 when absent)."""
        p, fs = self._path(path)
        if not fs.exists(p):
            return 0
        return int(fs.getContentSummary(p).getLength())

    def sizes_by_child(self, path: str) -> dict[str, int]:
        """Bytes of each direct child directory of ``path``."""
        p, fs = self._path(path)
        if not fs.exists(p):
            return {}
        out = {}
        for st in fs.listStatus(p):
            if st.isDirectory():
                out[str(st.getPath().getName())] = int(fs.getContentSummary(st.getPath()).getLength())
        return out
