"""Tests that need a SparkSession (the shared one of tests/conftest.py) or a lowwater process."""
