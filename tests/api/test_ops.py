"""ops/: the scrape config, the alert rules and the dashboard name only metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Stack
from tests.api.test_dead_letters import BROKEN

OPS = Path(__file__).resolve().parents[2] / "ops"
#: PromQL words that look like metric names but are functions, keywords or labels
WORDS = {
    "sum",
    "max",
    "by",
    "rate",
    "delta",
    "increase",
    "histogram_quantile",
    "le",
    "up",
    "printf",
    "humanizeDuration",
    "value",
    "job",
    "instance",
}

#: the series a family of each type has, even before it has any sample
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def names_in(expr: str) -> set[str]:
    without_labels = re.sub(r"\{[^}]*\}", "", expr)
    without_groupings = re.sub(r"\bby\s*\([^)]*\)", "", without_labels)
    return {
        w for w in re.findall(r"[a-z_][a-z0-9_]*", without_groupings) if w.startswith("tickwork_")
    } - WORDS


def test_every_metric_the_ops_files_name_is_exposed(stack: Stack) -> None:
    stack.wait(stack.submit(BROKEN))  # a dead letter, so its gauge has a series
    stack.waiting()
    exposed = set()
    for family in text_string_to_metric_families(stack.http().get("/metrics").text):
        exposed |= {family.name + s for s in SUFFIXES.get(family.type, ("",))}
    rules = yaml.safe_load((OPS / "prometheus" / "alerts.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    assert {a["alert"] for a in alerts} >= {
        "TickworkDeadLettersGrowing",
        "TickworkApprovalWaitingOverAnHour",
        "TickworkRunnableSessionsNotMoving",
        "TickworkRelayRepublishingALot",
    }
    dashboard = json.loads((OPS / "grafana" / "dashboards" / "tickwork.json").read_text())
    exprs = [a["expr"] for a in alerts] + [
        t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])
    ]
    named = set().union(*(names_in(e) for e in exprs))
    assert named, exprs
    assert named <= exposed, sorted(named - exposed)
    for alert in alerts:
        assert alert["annotations"]["summary"] and alert["labels"]["severity"]


def test_the_scrape_config_reads_the_rules_and_both_jobs() -> None:
    config = yaml.safe_load((OPS / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    assert {j["job_name"] for j in config["scrape_configs"]} == {"tickwork-api", "tickwork-worker"}
    compose = yaml.safe_load((OPS.parent / "docker-compose.yml").read_text())
    for service in ("prometheus", "grafana"):
        assert compose["services"][service]["profiles"] == ["monitoring"]
    ids = [
        p["id"]
        for p in json.loads((OPS / "grafana" / "dashboards" / "tickwork.json").read_text())[
            "panels"
        ]
    ]
    assert len(ids) == len(set(ids))
