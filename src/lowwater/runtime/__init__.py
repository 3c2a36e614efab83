"""Shared Spark helpers below both io and spark: the file system, jobs, built columns, SQL text, the session.

Nothing here knows a source, a sink or an operator; io and spark both build on it
(the layer order is tested by tests/test_layers.py; docs/adr/0030).
"""
