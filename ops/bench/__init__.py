"""Benchmarks of the tick: see ops/bench/RESULTS.md for the latest run."""
