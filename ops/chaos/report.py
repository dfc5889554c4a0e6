"""A chaos run's figures: each a value, and for an invariant whether it holds."""

from __future__ import annotations

from collections.abc import Mapping
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

    def once(self, name: str, counts: Mapping[int, int], *, also: bool = True) -> None:
        """The invariant that each thing counted in `counts` ({times: how many things})
        happened exactly once (and `also`, for what else it needs); shown as the counts."""
        self.add(name, dict(sorted(counts.items())), set(counts) <= {1} and also)

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
