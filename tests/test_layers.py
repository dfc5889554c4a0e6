"""The layer rules of docs/DESIGN.md section 1, read from the source with `ast`: each layer imports
only the layers below it, and no modules of worker/ or tickwork/ import each other in a
circle.

Every import counts, wherever it stands: at the top, inside a function (imported on first
use) or under `if TYPE_CHECKING:`. A name in a string (Celery's `include=["tickwork.tasks.tick"]`)
is not an import. `tests/fsm/test_boundary.py` guards what fsm/ may import from outside.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the layers, lowest first, as installed (the folders stay at the top of the repository)
LAYERS = ("tickwork.fsm", "tickwork.store", "tickwork.worker", "tickwork.tasks", "tickwork")
#: installed package -> its folder in the repository
FOLDERS = {
    "tickwork.fsm": "fsm",
    "tickwork.store": "store",
    "tickwork.worker": "worker",
    "tickwork.tasks": "tasks",
    "tickwork": "tickwork",
}
#: worker's sub-packages, lowest first: each imports only the ones before it
WORKER = ("config", "sandbox", "models", "tools", "files", "jobs", "observers", "tick")
#: (importer's layer, imported layer) -> why it is allowed for now; each names its issue
KNOWN: dict[tuple[str, str], str] = {}
#: cycles (as sorted module tuples) left for a later issue, with the reason
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    top = next(name for name, folder in FOLDERS.items() if folder == parts[0])
    return ".".join([top, *parts[1:]])


def layer_of(name: str) -> str | None:
    """The layer a module belongs to, or None for a module outside tickwork."""
    return next((lay for lay in LAYERS if name == lay or name.startswith(lay + ".")), None)


def path_of(name: str) -> Path | None:
    layer = layer_of(name)
    if layer is None:
        return None
    rest = name[len(layer) :].lstrip(".")
    return ROOT / FOLDERS[layer] / rest.replace(".", "/")


def is_package(name: str) -> bool:
    path = path_of(name)
    return path is not None and (path / "__init__.py").is_file()


def is_module(name: str) -> bool:
    path = path_of(name)
    return is_package(name) or (path is not None and path.with_suffix(".py").is_file())


def sources() -> Iterator[Path]:
    for layer in LAYERS:
        yield from sorted((ROOT / FOLDERS[layer]).rglob("*.py"))


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every module `path` imports, relative imports resolved; a name
    imported from a package is the submodule when there is one."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield node.lineno, sub if is_module(sub) else target


def graph() -> dict[str, set[str]]:
    """module -> the modules of the five layers it imports."""
    edges: dict[str, set[str]] = {}
    for path in sources():
        edges[module_name(path)] = {
            target for _, target in imports(path) if layer_of(target) and is_module(target)
        }
    return edges


def test_each_layer_imports_only_the_layers_below_it() -> None:
    found = []
    for path in sources():
        layer = layer_of(module_name(path))
        for line, target in imports(path):
            other = layer_of(target)
            if other is None or LAYERS.index(other) <= LAYERS.index(layer):
                continue
            if (layer, other) not in KNOWN:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    why = "a layer imports one above it (docs/DESIGN.md section 1):\n"
    assert not found, why + "\n".join(found)


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def worker_part(name: str) -> str | None:
    """The sub-package of worker/ a module belongs to (None outside worker/ or for
    worker/__init__.py)."""
    if not name.startswith("tickwork.worker."):
        return None
    return name.split(".")[2]


def test_worker_sub_packages_import_only_the_ones_below() -> None:
    """worker/ by concern: configuration, the sandbox, models, tools, files, jobs,
    observers, the tick; no arrow runs back up."""
    assert {
        p.name for p in (ROOT / "worker").iterdir() if p.is_dir() and p.name != "__pycache__"
    } == set(WORKER)
    assert [p.name for p in (ROOT / "worker").glob("*.py")] == ["__init__.py"]
    found = []
    for path in sources():
        part = worker_part(module_name(path))
        if part is None:
            continue
        for line, target in imports(path):
            other = worker_part(target)
            if other is not None and WORKER.index(other) > WORKER.index(part):
                found.append(f"{path.relative_to(ROOT)}:{line} ({part}) imports {target} ({other})")
    assert not found, "a worker sub-package imports one above it:\n" + "\n".join(found)


@pytest.mark.parametrize("layer", ["tickwork.worker", "tickwork"])
def test_no_modules_import_each_other_in_a_circle(layer: str) -> None:
    edges = {
        name: {t for t in targets if layer_of(t) == layer}
        for name, targets in graph().items()
        if layer_of(name) == layer
    }
    found = [c for c in cycles(edges) if c not in KNOWN_CYCLES]
    assert not found, "modules that import each other (move the shared piece down):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


#: store/ modules that hold the tables and the engine: only store/ may import them
STORE_INSIDES = (
    "tickwork.store.schema",
    "tickwork.store.engine",
    "tickwork.store.core",
    "tickwork.store.postgres",
)
#: names of store/ that build an engine or a store other than by `open_store`
STORE_NAMES = (
    "tickwork.store.make_engine",
    "tickwork.store.CoreStore",
    "tickwork.store.PostgresStore",
)
#: engine methods that open a connection or a transaction, or close the pool
ENGINE_CALLS = ("connect", "begin", "dispose", "execution_options", "raw_connection")
#: modules above store/ allowed to reach the tables or the engine, with the reason
DATABASE_EXCEPTIONS: dict[str, str] = {}


def database_uses(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each place `source` (a module above store/) reaches the database
    other than through the `Store` port: an import of the store's insides (its tables,
    engine, implementations), an `.engine` attribute, a call of an engine's
    connect/begin/dispose."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            names = []
        for name in names:
            if name.startswith(STORE_INSIDES) or name in STORE_NAMES:
                yield node.lineno, f"imports {name}"
        if isinstance(node, ast.Attribute) and node.attr == "engine":
            yield node.lineno, f"reads .engine of {ast.unparse(node.value)}"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ENGINE_CALLS
            and "engine" in ast.unparse(node.func.value).lower()
        ):
            yield node.lineno, f"calls {ast.unparse(node.func)}"


def test_nothing_above_store_touches_tables_or_the_engine() -> None:
    """worker/, tasks/ and tickwork/ reach the database through the `Store` port
    (store/port.py), made by `store.open_store`: the relay's scans, dead letters, the
    gauges and the health check are its methods."""
    found = []
    for path in sources():
        name = module_name(path)
        if layer_of(name) not in ("tickwork.worker", "tickwork.tasks", "tickwork"):
            continue
        if name in DATABASE_EXCEPTIONS:
            continue
        uses = database_uses(path.read_text())
        found += [f"{path.relative_to(ROOT)}:{line} {what}" for line, what in uses]
    assert not found, "reaches the database beside the Store port:\n" + "\n".join(found)


def test_the_database_guard_sees_what_it_looks_for() -> None:
    probe = (
        "from tickwork.store.schema import sessions\n"
        "from tickwork.store import make_engine, open_store\n"
        "import tickwork.store.postgres\n"
        "def f(rt):\n"
        "    with rt.store.engine.connect() as conn:\n"
        "        pass\n"
        "    engine.begin()\n"
        "    open_store('sqlite://').close()\n"
    )
    assert sorted(database_uses(probe)) == [
        (1, "imports tickwork.store.schema"),
        (1, "imports tickwork.store.schema.sessions"),
        (2, "imports tickwork.store.make_engine"),
        (3, "imports tickwork.store.postgres"),
        (5, "calls rt.store.engine.connect"),
        (5, "reads .engine of rt.store"),
        (7, "calls engine.begin"),
    ]


#: the database libraries: only store/ imports them (it translates their errors, store/edge.py)
DATABASE_LIBRARIES = ("sqlalchemy", "psycopg", "alembic")


def database_imports(path: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for line, target in imports(path)
        if any(target == lib or target.startswith(lib + ".") for lib in DATABASE_LIBRARIES)
    ]


def test_nothing_above_store_imports_sqlalchemy_or_psycopg() -> None:
    """Above store/, a database failure is one of tickwork's errors (`StoreUnavailable`,
    `StoreError`, in tickwork.fsm.errors), never SQLAlchemy's or psycopg's exception: the
    API, the CLI and the tick handle them without knowing which library the store uses."""
    found = [
        hit
        for path in sources()
        if layer_of(module_name(path)) in ("tickwork.worker", "tickwork.tasks", "tickwork")
        for hit in database_imports(path)
    ]
    assert not found, "imports a database library above store/ (ask the store):\n" + "\n".join(
        found
    )
    # the check sees what it looks for: store/ itself imports them
    assert database_imports(ROOT / "store" / "edge.py")


#: what the HTTP API must not import: the command line's modules and libraries
NOT_FOR_THE_API = ("typer", "rich", "click", "tickwork.options", "tickwork.render", "tickwork.cli")


def test_the_http_api_does_not_import_the_command_line() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in sorted((ROOT / "tickwork" / "api").rglob("*.py"))
        for line, target in imports(path)
        if any(
            target == n or target.startswith(n + ".") or target.startswith(n + "_")
            for n in NOT_FOR_THE_API
        )
    ]
    assert not found, "the HTTP API imports the CLI (share it through tickwork/parsing.py):\n" + (
        "\n".join(found)
    )


def test_the_guard_sees_every_kind_of_import() -> None:
    relay = {t for _, t in imports(ROOT / "worker" / "tick" / "relay.py")}
    assert {
        "tickwork.store.relay",
        "tickwork.worker.observers.metrics",
        "tickwork.worker.tick.runtime",
    } <= relay
    # imported inside a function, on first use
    assert "tickwork.api.previews" in {t for _, t in imports(ROOT / "tickwork" / "cli_sessions.py")}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]


#: what the remote client must not load: the store's client, the worker, Celery, the API's app
NOT_FOR_THE_REMOTE_CLIENT = ("celery", "tickwork.client", "tickwork.worker", "tickwork.api.app")


def test_importing_the_remote_client_loads_no_server() -> None:
    """`tickwork --server` and `tickwork.remote` take the API's bodies, not its server: a
    helper imported from a route's module pulled in the store's client and Celery."""
    script = (
        "import json, sys\n"
        "import tickwork.remote, tickwork.remote.plans, tickwork.remote.stream\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m in {NOT_FOR_THE_REMOTE_CLIENT!r}"
        " or m.startswith(('celery.', 'tickwork.worker.')))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == []
