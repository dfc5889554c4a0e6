"""`tickwork dlq export` in JSON Lines, CSV and Parquet, loaded back with the csv module,
pyarrow and DuckDB the way docs/GUIDE.md's "Analysing dead letters" says (its code is run here)."""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tickwork.store.dead_letters import EXPORT_COLUMNS

from tests.e2e.conftest import ROOT, TEST_KIND, Cli, Deployment, call
from tests.e2e.test_cli_dlq import LOOPING

COLUMNS = [name for name, _ in EXPORT_COLUMNS]


def _recipes() -> list[str]:
    """The Python blocks of docs/GUIDE.md's "Analysing dead letters" section, in order."""
    guide = (ROOT / "docs" / "GUIDE.md").read_text()
    section = guide.split("## Analysing dead letters\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@contextmanager
def _inside(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def _dead_letters(deployment: Deployment, cli: Cli) -> dict[str, str]:
    """Four dead letters: two over their step budget (one then forked, the other dismissed),
    one looping, and the fork, which fails on its step budget too. Their ids by role."""
    three_steps = deployment.script(
        [
            {"content": "look", "tool_calls": [call("echo", text="1")]},
            {"content": "look again", "tool_calls": [call("echo", text="2")]},
            {"content": "fixed"},
        ]
    )
    loop_path = deployment.tmp / "loop.json"
    loop_path.write_text(json.dumps(LOOPING))
    client = deployment.client
    ids = {
        "forked": client.submit(TEST_KIND, {}, model=three_steps, budgets={"max_steps": 1}).id,
        "dismissed": client.submit(TEST_KIND, {}, model=three_steps, budgets={"max_steps": 1}).id,
        "loop": client.submit(TEST_KIND, {}, model=f"scripted:{loop_path}").id,
    }
    with deployment.worker():
        for sid in ids.values():
            assert client.wait(sid, timeout=60).status.value == "failed"
        # a budget above the kept step's, and not enough: the fork fails on it too
        options = ("--from-step", "1", "--max-steps", "2", "--json")
        fork = cli.inline("dlq", "fork", ids["forked"], *options).json()
        ids["fork"] = fork["id"]
        assert client.wait(fork["id"], timeout=60).status.value == "failed"
    cli.inline("dlq", "dismiss", ids["dismissed"], "--reason", "a test run", "--as", "erin")
    return ids


def test_export_in_every_format_loads_with_pyarrow_duckdb_and_csv(
    deployment: Deployment, cli: Cli
) -> None:
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = _dead_letters(deployment, cli)
    tmp = deployment.tmp
    parquet, csv_path, jsonl = tmp / "dead.parquet", tmp / "dead.csv", tmp / "dead.jsonl"
    # the real entry point once, as a process; the other formats in this process
    wrote = cli("dlq", "export", "--format", "parquet", "--output", str(parquet))
    assert "wrote 4 dead letters" in wrote.stdout
    cli.inline("dlq", "export", "--format", "csv", "-o", str(csv_path))
    jsonl.write_text(cli.inline("dlq", "export").stdout)  # JSON Lines to stdout: the default

    table = pq.read_table(parquet)
    assert table.column_names == COLUMNS
    types = dict(zip(table.column_names, table.schema.types, strict=True))
    assert types["failed_at"] == pa.timestamp("us", tz="UTC")
    assert types["resolved_at"] == types["failed_at"]
    assert types["steps"] == pa.int64() and types["tokens"] == pa.int64()
    assert types["cost_usd"] == pa.float64() and types["forks"] == pa.list_(pa.string())
    from_parquet = {r["session_id"]: r for r in table.to_pylist()}
    with csv_path.open(newline="") as file:
        reader = csv.DictReader(file)
        assert reader.fieldnames == COLUMNS
        from_csv = {r["session_id"]: r for r in reader}
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert all(list(line) == COLUMNS for line in lines)
    from_jsonl = {r["session_id"]: r for r in lines}
    assert set(from_parquet) == set(from_csv) == set(from_jsonl) == set(ids.values())

    forked, fork = from_parquet[ids["forked"]], from_parquet[ids["fork"]]
    assert (forked["status"], forked["forks"]) == ("forked", [ids["fork"]])
    assert (fork["status"], fork["parent_id"], fork["fork_step"]) == ("open", ids["forked"], 1)
    assert fork["code"] == "BUDGET_STEPS" and fork["failed_at"].tzinfo is not None
    dismissed = from_parquet[ids["dismissed"]]
    assert (dismissed["status"], dismissed["closed_by"], dismissed["reason"]) == (
        "dismissed",
        "erin",
        "a test run",
    )
    assert dismissed["resolved_at"] is not None and forked["steps"] == 1
    assert from_parquet[ids["loop"]]["last_tool"] == "echo"
    # the same values in every format, as each writes them
    assert from_csv[ids["forked"]]["forks"] == ids["fork"]
    assert from_csv[ids["fork"]]["fork_step"] == "1" and from_csv[ids["loop"]]["parent_id"] == ""
    assert from_jsonl[ids["forked"]]["forks"] == [ids["fork"]]
    for sid, row in from_parquet.items():
        assert from_jsonl[sid]["failed_at"] == row["failed_at"].isoformat().replace("+00:00", "Z")
        assert from_csv[sid]["failed_at"] == row["failed_at"].isoformat().replace("+00:00", "Z")
        assert from_jsonl[sid]["tokens"] == row["tokens"] == int(from_csv[sid]["tokens"])
        assert from_jsonl[sid]["cost_usd"] == row["cost_usd"] == float(from_csv[sid]["cost_usd"])

    # docs/GUIDE.md's DuckDB recipe, run as written against these files
    duckdb_recipe, _pandas_recipe = _recipes()
    found: dict[str, Any] = {}
    with _inside(tmp):
        exec(duckdb_recipe, found)
    assert [row[:2] for row in found["by_cause"]] == [("BUDGET_STEPS", 3), ("LOOP", 1)]
    assert sum(row[2] for row in found["per_day"]) == 4
    open_letters = Counter(
        r["error_signature"] for r in from_parquet.values() if r["status"] == "open"
    )
    assert sorted(found["top_signatures"]) == sorted(open_letters.items())
    # the CSV through DuckDB's own type detection: counts, numbers and times as typed
    typed = duckdb.sql(f"SELECT code, steps, failed_at FROM read_csv('{csv_path}')")
    assert [str(t) for t in typed.types][1:] == ["BIGINT", "TIMESTAMP WITH TIME ZONE"]
    assert Counter(code for code, _, _ in typed.fetchall()) == {"BUDGET_STEPS": 3, "LOOP": 1}

    # filters as for `dlq ls`; an empty export still has its columns
    none = tmp / "none.parquet"
    cli.inline("dlq", "export", "--code", "DEADLINE", "--format", "parquet", "--output", str(none))
    assert pq.read_table(none).column_names == COLUMNS and pq.read_table(none).num_rows == 0
    loops = cli.inline("dlq", "export", "--format", "csv", "--code", "loop", "--unresolved")
    assert [r["session_id"] for r in csv.DictReader(loops.stdout.splitlines())] == [ids["loop"]]
    snapshots = cli.inline("dlq", "export", "--snapshot", "--since", "1h").stdout.splitlines()
    for line in map(json.loads, snapshots):
        assert line["snapshot"]["session"]["head"]["id"] == line["session_id"]


def test_parquet_without_pyarrow_says_what_to_install(
    deployment: Deployment, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = deployment.tmp / "dead.parquet"
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    refused = cli.inline("dlq", "export", "--format", "parquet", "--output", str(out), ok=False)
    refused.error(2, "needs pyarrow", "pip install 'tickwork[parquet]'")
    assert not out.exists()
    cli.inline("dlq", "export", "--format", "xml", ok=False).error(2, "xml")


def test_the_pandas_recipe(deployment: Deployment, cli: Cli) -> None:
    pytest.importorskip(
        "pandas", reason="docs/GUIDE.md's pandas recipe needs pandas (not in .[test])"
    )
    ids = _dead_letters(deployment, cli)
    cli.inline("dlq", "export", "--format", "parquet", "-o", str(deployment.tmp / "dead.parquet"))
    cli.inline("dlq", "export", "--format", "csv", "-o", str(deployment.tmp / "dead.csv"))
    found: dict[str, Any] = {}
    with _inside(deployment.tmp):
        exec(_recipes()[1], found)
    assert found["by_cause"].to_dict() == {"BUDGET_STEPS": 3, "LOOP": 1}
    assert int(found["per_day"].to_numpy().sum()) == len(ids)


def test_output_dash_is_stdout(
    deployment: Deployment, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--output -` wrote a file named `-` in the working directory ("wrote 6 dead letters
    to - (jsonl)") where a user asks for stdout, as `-` means to most tools."""
    monkeypatch.chdir(tmp_path)
    whole = cli.inline("dlq", "export").stdout
    dashed = cli.inline("dlq", "export", "--output", "-")
    assert dashed.stdout == whole and "wrote" not in dashed.stdout
    assert not (tmp_path / "-").exists()
