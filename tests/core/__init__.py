"""Tests of the pure semantic core: no Spark, milliseconds each."""
