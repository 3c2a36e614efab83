"""Pipeline configuration: TOML in, validated frozen dataclasses out.

A wrong configuration is reported as one :class:`ConfigError` line that names
the key (the CLI prints it and exits with code 2); nothing reaches Spark.

One module per part of the file:

* ``errors``    -- :class:`ConfigError` and the typed reads that name the key;
* ``source``    -- ``[source]`` or ``[[source]]`` tables (:class:`SourceConfig`);
* ``watermark`` -- a source's watermark table and the checks that need its columns;
* ``window``    -- ``[window]`` (:class:`WindowConfig`);
* ``output``    -- ``[output]`` and ``[output.postgres]``;
* ``runtime``   -- ``[trigger]``, ``[late]``, ``[spark]``;
* ``overrides`` -- relative paths and ``--set``;
* ``pipeline``  -- :class:`PipelineConfig`, :func:`parse_config`, :func:`load_config`, :func:`check_columns`.
"""

from lowwater.config.errors import ConfigError
from lowwater.config.output import (
    OUTPUT_KINDS,
    PG_TABLE_KEYS,
    PG_URL_ENV,
    OutputConfig,
    PostgresConfig,
)
from lowwater.config.overrides import apply_overrides, parse_override, resolve
from lowwater.config.pipeline import PipelineConfig, check_columns, load_config, parse_config
from lowwater.config.runtime import SparkConfig
from lowwater.config.source import FORMATS, TIME_UNITS, SourceConfig, check_source_path
from lowwater.config.watermark import describe_generator, describe_strategy
from lowwater.config.window import ACCUMULATION_MODES, WINDOW_TYPES, WindowConfig

_resolve = resolve  # the name before the split

__all__ = [
    "ACCUMULATION_MODES",
    "FORMATS",
    "OUTPUT_KINDS",
    "PG_TABLE_KEYS",
    "PG_URL_ENV",
    "TIME_UNITS",
    "WINDOW_TYPES",
    "ConfigError",
    "OutputConfig",
    "PipelineConfig",
    "PostgresConfig",
    "SourceConfig",
    "SparkConfig",
    "WindowConfig",
    "apply_overrides",
    "check_columns",
    "check_source_path",
    "describe_generator",
    "describe_strategy",
    "load_config",
    "parse_config",
    "parse_override",
    "resolve",
]
