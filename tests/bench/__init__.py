"""Tests of the benchmarks' helpers and of the results report (no benchmark runs)."""
