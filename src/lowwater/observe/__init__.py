"""Watching a pipeline: the metrics model and its exporters (docs/observability.md)."""
