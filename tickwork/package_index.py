"""A package index on loopback, for tests and benchmarks of environments (issue 22).

- `make_wheel(folder, name, version, modules, requires)`: a pure-Python wheel written by
  hand (a zip with its dist-info), in milliseconds, with no build tool.
- `fetch_wheels(folder, *requirements)`: wheels from the real package registry with the
  sandbox's interpreter's pip (`pip download`), kept in `folder` for the next run.
- `serving(folder)`: a PEP 503 "simple" index of the wheels in `folder` on 127.0.0.1, for
  as long as the `with`; gives its URL (`.../simple/`) and its `ip:port`.

    with serving(wheels) as index:
        os.environ["TICKWORK_PIP_INDEX_URL"] = index.url
        os.environ["TICKWORK_EGRESS_ALLOW"] = index.address
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import subprocess
import threading
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["Index", "fetch_wheels", "make_wheel", "serving"]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def make_wheel(
    folder: Path,
    name: str,
    version: str = "0.1.0",
    modules: Mapping[str, str] | None = None,
    requires: Sequence[str] = (),
) -> Path:
    """A `py3-none-any` wheel of `name` holding `modules` (path in the wheel -> source;
    default: `<name>/__init__.py` with a `VERSION`), depending on `requires`."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    modules = modules or {f"{dist}/__init__.py": f"VERSION = {version!r}\n"}
    info = f"{dist}-{version}.dist-info"
    meta = "".join(
        [
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            *(f"Requires-Dist: {r}\n" for r in requires),
        ]
    )
    files = {
        **modules,
        f"{info}/METADATA": meta,
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tickwork\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for rel, text in sorted(files.items()):
            data = text.encode()
            wheel.writestr(zipfile.ZipInfo(rel, (2020, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{rel},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        wheel.writestr(zipfile.ZipInfo(f"{info}/RECORD", (2020, 1, 1, 0, 0, 0)), "\n".join(record))
    return path


def fetch_wheels(
    folder: Path, *requirements: str, python: str = "/usr/bin/python3", timeout_s: float = 180
) -> list[Path]:
    """Wheels of `requirements` and their dependencies for `python` (the sandbox's), from
    the package registry `pip` is configured for, into `folder` (kept: a second call with
    them there asks pip, which finds them); CalledProcessError if pip cannot get them."""
    folder.mkdir(parents=True, exist_ok=True)
    pip = [python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "--only-binary", ":all:", "--dest", str(folder), *requirements],
        check=True,
        capture_output=True,
        timeout=timeout_s,
        env={"PATH": "/usr/bin:/bin", "HOME": str(folder)},
    )
    return sorted(folder.glob("*.whl"))


@dataclass(frozen=True)
class Index:
    #: the index's URL, for PIP_INDEX_URL
    url: str
    #: its `ip:port`, for an egress allow-list
    address: str


@contextmanager
def serving(folder: Path) -> Iterator[Index]:
    """A simple index (PEP 503) of the wheels in `folder` at http://127.0.0.1:PORT/simple/."""
    root = folder / ".index"
    projects: dict[str, list[str]] = {}
    for wheel in sorted(folder.glob("*.whl")):
        projects.setdefault(_normal(wheel.name.split("-")[0]), []).append(wheel.name)
    for project, wheels in projects.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="/files/{html.escape(w)}">{html.escape(w)}</a>\n' for w in wheels)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    listing = "".join(f'<a href="/simple/{p}/">{p}</a>\n' for p in sorted(projects))
    (root / "simple").mkdir(parents=True, exist_ok=True)
    (root / "simple" / "index.html").write_text(f"<html><body>\n{listing}</body></html>\n")
    files = root / "files"
    files.mkdir(exist_ok=True)
    for wheel in folder.glob("*.whl"):
        target = files / wheel.name
        if not target.exists():
            target.hardlink_to(wheel)

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name="package-index", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield Index(url=f"http://{host}:{port}/simple/", address=f"{host}:{port}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
