"""The chaos run: see ops/chaos/README.md and ops/chaos/RESULTS.md."""
