"""The deployment files: docker-compose.yml validated by Compose itself, and both it and
ops/Dockerfile read for what a deployment relies on: images and Python packages pinned,
nothing administrative published beyond loopback, a healthcheck for every service, git in
the image."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.services import missing

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "ops" / "Dockerfile"
CONSTRAINTS = ROOT / "ops" / "constraints.txt"
#: one-shot jobs: they run to their end, so "healthy" means nothing for them
ONE_SHOT = {"migrate"}
#: an exact release: v2.53.0, 3.11.10-slim-bookworm (not 3.11-slim, 7 or latest)
EXACT = re.compile(r"^v?\d+\.\d+\.\d+([-.][A-Za-z0-9.]+)*$")
#: Postgres numbers its releases major.minor: 16.4 is exact
EXACT_POSTGRES = re.compile(r"^\d+\.\d+([-.][A-Za-z0-9.]+)*$")


def exact(image: str) -> bool:
    name, _, tag = image.rpartition(":") if ":" in image else (image, "", "")
    return bool((EXACT_POSTGRES if name == "postgres" else EXACT).match(tag))


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        found = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
        if found.returncode == 0:
            return ["docker", "compose"]
    return None


def test_compose_accepts_the_file() -> None:
    command = compose_command()
    if command is None:
        missing("Compose", "neither `docker compose` nor `docker-compose` is installed")
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TICKWORK_", "GRAFANA_"))}
    done = subprocess.run(
        [*command, "-f", "docker-compose.yml", "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_hadolint_accepts_the_dockerfile_where_it_is_installed() -> None:
    if shutil.which("hadolint") is None:
        pytest.skip("hadolint is not installed (Debian has no package); the checks below stand")
    done = subprocess.run(
        ["hadolint", "--ignore", "DL3008", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_base_image_is_an_exact_version() -> None:
    images = [line.split()[1] for line in dockerfile() if line.upper().startswith("FROM ")]

    assert images
    for image in images:
        assert exact(image), f"FROM {image}: pin an exact version (major.minor.patch)"


def test_every_service_image_is_an_exact_version() -> None:
    for name, service in services().items():
        image = str(service["image"])
        assert exact(image), f"{name}: {image} is not pinned to an exact version"
        if "build" in service:
            assert image == f"tickwork:{project_version()}", f"{name}: build it as that"


def test_the_python_packages_are_pinned() -> None:
    installs = [line for line in dockerfile() if "pip install" in line]
    pins = [
        line.split("#")[0].strip()
        for line in CONSTRAINTS.read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {re.split(r"==", p)[0].lower().replace("_", "-") for p in pins}

    assert installs and all("-c /src/ops/constraints.txt" in line for line in installs)
    assert "COPY ops/constraints.txt /src/ops/constraints.txt" in dockerfile()
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^=\s]+", p) for p in pins), pins
    for requirement in declared:
        name = re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, f"{name} (pyproject.toml) is not in ops/constraints.txt"


def test_the_image_has_git() -> None:
    installs = [line for line in dockerfile() if "apt-get install" in line]

    assert any(re.search(r"\bgit\b", line) for line in installs)


def test_every_service_has_a_healthcheck() -> None:
    for name, service in services().items():
        if name in ONE_SHOT:
            assert service.get("restart") == "no", f"{name}: a one-shot job must not restart"
            continue
        check = service.get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"


def test_every_published_port_is_on_loopback() -> None:
    for name, service in services().items():
        for port in service.get("ports") or ():
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_nothing_administrative_is_open_by_default() -> None:
    found = services()
    prometheus, grafana = found["prometheus"], found["grafana"]
    flags = " ".join(prometheus.get("command") or ())
    env = grafana["environment"]
    guard = " ".join(grafana["entrypoint"])

    assert "--web.enable-lifecycle" not in flags and "--web.enable-admin-api" not in flags
    assert str(env["GF_AUTH_ANONYMOUS_ENABLED"]).lower() == "false"
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == "${GRAFANA_ADMIN_PASSWORD:-}"  # no default
    assert 'test -n "$$GF_SECURITY_ADMIN_PASSWORD" ||' in guard and "exit 1" in guard
    assert "admin/admin" not in (ROOT / "docker-compose.yml").read_text()
