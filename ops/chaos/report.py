"""A chaos run's figures: each a value, and for an invariant whether it holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .plan import Plan


@dataclass
class Figure:
    name: str
    value: Any
    #: None: a figure for information; True/False: an invariant and whether it holds
    holds: bool | None = None


@dataclass
class Report:
    plan: Plan
    figures: list[Figure] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    workdir: str = ""

    def add(self, name: str, value: Any, holds: bool | None = None) -> None:
        self.figures.append(Figure(name, value, holds))

    @property
    def broken(self) -> list[Figure]:
        return [f for f in self.figures if f.holds is False]

    @property
    def ok(self) -> bool:
        return not self.broken

    def markdown(self) -> str:
        lines = ["| figure | value | invariant |", "|---|---|---|"]
        for f in self.figures:
            mark = "" if f.holds is None else ("holds" if f.holds else "**BROKEN**")
            lines.append(f"| {f.name} | {f.value} | {mark} |")
        return "\n".join(lines)

    def text(self) -> str:
        width = max(len(f.name) for f in self.figures) + 2
        out = []
        for f in self.figures:
            mark = "" if f.holds is None else ("  ok" if f.holds else "  BROKEN")
            out.append(f"{f.name:<{width}}{f.value}{mark}")
        return "\n".join(out)

    def as_json(self) -> dict[str, Any]:
        return {
            "plan": asdict(self.plan),
            "ok": self.ok,
            "figures": [asdict(f) for f in self.figures],
            "timeline": self.timeline,
            "workdir": self.workdir,
        }
