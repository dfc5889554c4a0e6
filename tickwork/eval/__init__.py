"""Evaluations: run a task set of repair jobs with one model configuration, store the run,
compare two runs and chart cost against success (`tickwork eval`): docs/EVAL.md
(`tickwork docs eval`).

- `tasks`: the task set (JSON Lines, checked as untrusted input);
- `model`: a run's configuration, each task's figures, a run and a comparison;
- `runner`: one ordinary `repair` session a task through the client, N at a time;
- `runs`: where runs are kept (the state folder's `evals/`);
- `tables`: runs and comparisons as Rich tables, JSON and Parquet rows;
- `checks`: a task's expected tests, run on a completed session's result;
- `chart`: cost against success as a PNG.

The demo's task set ships in the wheel (`tickwork/examples/eval`, `examples/eval` in a
checkout) and runs offline with scripted models: `tickwork eval --demo`.
"""
