"""Every alert rule has a runbook section with its exact name, and every alert the runbook
names is a rule."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

OPS = Path(__file__).resolve().parents[2] / "ops"


def rules() -> list[dict[str, object]]:
    loaded = yaml.safe_load((OPS / "prometheus" / "alerts.yml").read_text())
    return [r for g in loaded["groups"] for r in g["rules"]]


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_runbook_section_and_every_section_an_alert() -> None:
    runbook = (OPS / "RUNBOOK.md").read_text()
    alerts = {str(r["alert"]) for r in rules()}
    sections = set(re.findall(r"^### (Tickwork\w+)\s*$", runbook, flags=re.M))
    named = set(re.findall(r"\bTickwork[A-Z]\w+", runbook))

    assert alerts == sections, (sorted(alerts - sections), sorted(sections - alerts))
    assert named <= alerts, sorted(named - alerts)


def test_every_alert_links_to_its_runbook_section() -> None:
    headings = {anchor(h) for h in re.findall(r"^#+ (.+)$", (OPS / "RUNBOOK.md").read_text(), re.M)}
    for rule in rules():
        link = rule["annotations"]["runbook"]  # type: ignore[index]
        assert link == f"ops/RUNBOOK.md#{str(rule['alert']).lower()}"
        assert link.split("#")[1] in headings


def test_no_live_worker_is_an_alert_on_the_workers_scrape_job() -> None:
    config = yaml.safe_load((OPS / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"] for j in config["scrape_configs"]}
    (rule,) = [r for r in rules() if r["alert"] == "TickworkNoLiveWorker"]

    assert "tickwork-worker" in jobs
    assert rule["expr"] == 'absent(up{job="tickwork-worker"} == 1)'
    assert rule["labels"] == {"severity": "critical"}


def test_flower_is_not_published_without_authentication() -> None:
    compose = yaml.safe_load((OPS.parent / "docker-compose.yml").read_text())
    flower = compose["services"]["flower"]
    script = " ".join(flower["command"])

    assert all(str(p).startswith("127.0.0.1:") for p in flower["ports"])
    assert 'test -n "$$FLOWER_BASIC_AUTH" ||' in script and "exit 1" in script
    assert "FLOWER_UNAUTHENTICATED_API" not in flower["environment"]
    assert "FLOWER_UNAUTHENTICATED_API" not in script


def test_webhook_cards_given_up_are_an_alert_on_the_workers_counter() -> None:
    """A card given up is told to nobody but a log line; the operators hear of it."""
    (rule,) = [r for r in rules() if r["alert"] == "TickworkWebhookCardsFailing"]

    assert 'tickwork_webhook_deliveries_total{outcome="failed"}' in str(rule["expr"])
    assert rule["labels"] == {"severity": "warning"}
