"""Where the JVM jars a pipeline may need are found, and the one line when they are not.

A source checkout fetches them once with Maven (``scripts/bootstrap.sh``,
``jars/pom.xml``) into ``.jars/<profile>``; an environment variable points at
another folder. A ``pip install`` of the wheel has no checkout: there the jars
come from ``spark.jars.packages`` (Spark fetches them from Maven Central when
the session starts), on the user's cluster or in ``[spark.conf]``. The message
says what applies to where lowwater runs from.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[3]  # the repository root when running from a source checkout


def from_checkout() -> bool:
    """Whether lowwater runs from a source checkout (``jars/pom.xml`` beside ``src/``), not an installed wheel."""
    return (CHECKOUT / "jars" / "pom.xml").is_file()


def folder(env: str, profile: str) -> Path:
    """The jars' folder: ``$env`` if set, else the checkout's ``.jars/<profile>``."""
    return Path(os.environ.get(env) or CHECKOUT / ".jars" / profile)


def local_jars(env: str, profile: str) -> list[str]:
    """The ``*.jar`` files of :func:`folder` (empty when they were not fetched)."""
    where = folder(env, profile)
    return sorted(str(p) for p in where.glob("*.jar")) if where.is_dir() else []


def missing(key: str, what: str, env: str, profile: str, packages: str) -> str:
    """One line: ``what`` was not found, and how to bring it (``packages``: its Maven coordinates)."""
    pkg = f'[spark.conf] "spark.jars.packages" = "{packages}" (or a SparkSession started with it)'
    if from_checkout():
        return (f"{key}: {what}, not found in {folder(env, profile)}: run scripts/bootstrap.sh (fetches it with "
                f"Maven), point {env} at a folder of its jars, or set {pkg}")
    return f"{key}: {what}: set {pkg}, or point {env} at a folder of its jars"
