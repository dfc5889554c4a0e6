"""Benchmark: a repair job's environment (issue 22, docs/DESIGN.md section 13),
built once and reused.

A project depending on 20 packages (tiny wheels made here, served by a package index on
127.0.0.1) gets its environment by `--setup auto` with the index allowed; the environment
step of a session's first tick (`tickwork.worker.files.environments.prepare`) is timed:

- cold: the build (a venv at /env, the project and its 20 dependencies installed by pip
  in the sandbox, the result packed and stored in the artifact store);
- warm: another session on the same host (found ready, this host's copy mounted);
- other host: another session on a host with its own TICKWORK_WORKSPACES_DIR (the
  environment unpacked from the artifact store, setup not run again);

and the ratio build / reuse (the target: at least 10x). SQLite in a temporary folder.

    python ops/bench/environments.py [--deps 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ops.bench import common


def project(root: Path, deps: list[str]) -> None:
    root.mkdir(parents=True)
    quoted = ", ".join(f'"{d}"' for d in deps)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "benchpkg"\nversion = "0.1"\ndependencies = [{quoted}]\n'
        '[tool.setuptools]\npackages = ["benchpkg"]\n'
    )
    (root / "benchpkg").mkdir()
    imports = "".join(f"import {d}\n" for d in deps)
    (root / "benchpkg" / "__init__.py").write_text(imports + "def add(a, b):\n    return a + b\n")
    (root / "test_benchpkg.py").write_text(
        "import unittest\nfrom benchpkg import add\n\n"
        "class T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )


def wheels(folder: Path, count: int) -> list[str]:
    from tickwork.package_index import make_wheel

    names = [f"benchdep{i:02d}" for i in range(count)]
    for name in names:
        body = "".join(f"def f{j}(x):\n    return x + {j}\n" for j in range(200))
        make_wheel(folder, name, modules={f"{name}/__init__.py": body, f"{name}/more.py": body})
    return names


def session(tw: Any, source: Path) -> Any:
    from tickwork.testing import write_script

    return tw.submit(
        "repair",
        {"workspace": str(source), "test_command": "python -m unittest", "setup": "auto"},
        model=write_script([{"content": "done"}], source.parent / "scripts"),
    )


def timed(rt: Any, head: Any) -> tuple[float, Any]:
    from tickwork.worker.files import environments

    started = time.perf_counter()
    found = environments.prepare(rt, head)
    return time.perf_counter() - started, found


def record(found: Any) -> dict[str, Any]:
    result = found.head.result if hasattr(found, "head") else found.result
    return dict(result["environment"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from tickwork.client import Tickwork
    from tickwork.package_index import serving
    from tickwork.testing import embedded_settings

    with tempfile.TemporaryDirectory(prefix="tickwork-bench-env-") as tmp:
        root = Path(tmp)
        names = wheels(root / "wheels", args.deps)
        project(root / "src", names)
        with serving(root / "wheels") as index:
            os.environ["TICKWORK_PIP_INDEX_URL"] = index.url
            os.environ["TICKWORK_EGRESS_ALLOW"] = index.address
            settings = embedded_settings(root / "deploy", workspaces_dir=root / "host-a")
            other = settings.model_copy(update={"workspaces_dir": root / "host-b"})
            rt_a, _ = common.in_process_runtime(settings)
            tw = Tickwork(settings)
            try:
                cold_s, built = timed(rt_a, session(tw, root / "src"))
                env = record(built)
                assert env["status"] == "ready" and env["built"], env
                warm = [timed(rt_a, session(tw, root / "src"))[0] for _ in range(args.repeat)]
                hosts = []
                for i in range(args.repeat):
                    host = other.model_copy(update={"workspaces_dir": root / f"host-b{i}"})
                    rt_b, _ = common.in_process_runtime(host)
                    took, found = timed(rt_b, session(tw, root / "src"))
                    assert not record(found).get("built"), record(found)
                    hosts.append(took)
                    rt_b.store.close()
                row = rt_a.store.environments.find()[0]
            finally:
                tw.close()
                rt_a.store.close()
    warm_s, host_s = statistics.median(warm), statistics.median(hosts)
    figures = {
        "deps": args.deps,
        "cold_build_s": round(cold_s, 3),
        "setup_s": env.get("build_s"),
        "packed_bytes": row.size,
        "warm_same_host_s": round(warm_s, 4),
        "other_host_s": round(host_s, 4),
        "build_over_warm": round(cold_s / warm_s, 1),
        "build_over_other_host": round(cold_s / host_s, 1),
        "builds": row.attempts,
    }
    print(f"environment of a project with {args.deps} dependencies from a loopback index")
    print(
        f"  cold build       {cold_s:8.2f} s  (setup {env.get('build_s')} s, {row.size:,} B packed)"
    )
    n, warm_x, host_x = args.repeat, figures["build_over_warm"], figures["build_over_other_host"]
    print(f"  warm, same host  {warm_s:8.4f} s  median of {n}: build / reuse {warm_x}x")
    print(f"  other host       {host_s:8.4f} s  median of {n}: build / reuse {host_x}x")
    print(f"  target: reuse at least 10x faster than the build; builds run: {row.attempts}")
    common.emit("environments", figures)


if __name__ == "__main__":
    main()
