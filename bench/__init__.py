"""Benchmarks: lowwater against native Spark (python -m bench); results in bench/results/."""
