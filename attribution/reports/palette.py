"""The colours of every chart and page: one per outcome, one per event kind, the same wherever it is drawn.

Outcomes are a fixed set (docs/verdict.md), each with its colour here: the dashboard's badges, the fleet charts
and the timeline's verdict use them. An event kind's colour follows from the kinds catalog (rules/kinds.yaml):
the cause kinds take the colours of CAUSE_COLORS in catalog order, the symptom kinds those of SYMPTOM_COLORS, so
no two causes share a colour (nor two symptoms), and neighbours in the catalog (one family: GPU, NVLink,
InfiniBand, ...) never look alike. A kind the catalog does not name (stored by an older rule pack) takes a colour
from its name. A page is drawn with one `Palette`; the service builds it from its rule pack, the static pages
from the rule pack shipped with attribution.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Mapping

#: One colour per outcome of a verdict, and for jobs with no verdict yet.
OUTCOME_COLORS = {
    "gpu_hardware": "#c62828", "nvlink": "#ef6c00", "nvswitch_fabric": "#8d6e63", "network": "#1565c0",
    "host": "#00838f", "application": "#7b1fa2", "scheduler": "#757575", "unknown": "#9e9d24",
    "none": "#2e7d32", "not attributed yet": "#bdbdbd",
}
#: Outcomes whose badge needs dark text.
LIGHT_OUTCOMES = frozenset({"not attributed yet"})
#: 40 distinct colours, enough for every cause kind of the catalog (36; tests/reports/test_palette.py says when
#: the catalog outgrows them).
CAUSE_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#6b6ecf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#9edae5", "#dbdb8d", "#393b79",
    "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194", "#3182bd",
    "#9c9ede", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd", "#e6550d", "#31a354", "#756bb1", "#fd8d3c", "#74c476",
)
#: 24 distinct colours for the symptom kinds (20 in the catalog).
SYMPTOM_COLORS = (
    "#f28e2b", "#4e79a7", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7", "#9c755f", "#bab0ac", "#e15759",
    "#a0cbe8", "#ffbe7d", "#8cd17d", "#d4a6c8", "#f1ce63", "#86bcb6", "#fabfd2", "#d7b5a6", "#79706e", "#499894",
    "#b6992d", "#d37295", "#6a9f58", "#967662",
)
#: Roles of the timeline's marks that are not coloured by kind.
ROOT_COLOR = "#c62828"
CAUSE_COLOR = "#6a1b9a"
CONTEXT_COLOR = "#8a8f98"
#: What a chart draws where there is no kind (a failed job without a root-cause event).
NO_KIND_COLOR = "#bdbdbd"


@dataclass(frozen=True)
class Palette:
    causes: tuple[str, ...] = ()  # the cause kinds of the catalog, in its order
    symptoms: tuple[str, ...] = ()  # the symptom kinds, likewise

    @classmethod
    def of(cls, kinds: Mapping) -> "Palette":
        """From a rule pack's kinds (RuleSet.kinds: name -> KindSpec, in catalog order)."""
        return cls.from_roles((name, spec.role) for name, spec in kinds.items())

    @classmethod
    def from_roles(cls, kinds: Iterable[tuple[str, str]]) -> "Palette":
        pairs = list(kinds)
        return cls(causes=tuple(k for k, role in pairs if role == "cause"),
                   symptoms=tuple(k for k, role in pairs if role == "symptom"))

    @classmethod
    def shipped(cls) -> "Palette":
        """The palette of the rule pack shipped with attribution (its kinds.yaml only)."""
        import yaml

        from attribution.resources import rules_dir

        doc = yaml.safe_load((rules_dir() / "kinds.yaml").read_text(encoding="utf-8")) or {}
        return cls.from_roles((name, (spec or {}).get("role", "")) for name, spec in (doc.get("kinds") or {}).items())

    def kind(self, kind: str | None) -> str:
        """The colour of an event kind."""
        if not kind or kind.startswith("("):  # "(no root cause event)"
            return NO_KIND_COLOR
        for names, colors in ((self.causes, CAUSE_COLORS), (self.symptoms, SYMPTOM_COLORS)):
            if kind in names:
                return colors[names.index(kind) % len(colors)]
        digest = int.from_bytes(hashlib.sha256(kind.encode("utf-8", "replace")).digest()[:4], "big")
        return CAUSE_COLORS[digest % len(CAUSE_COLORS)]

    def kinds(self, names: Iterable[str]) -> tuple[list[str], list[str]]:
        """A colour scale over these kinds: (domain, range) for Vega-Lite."""
        domain = list(dict.fromkeys(names))
        return domain, [self.kind(k) for k in domain]


def outcome_color(outcome: str | None) -> str:
    return OUTCOME_COLORS.get(outcome or "not attributed yet", NO_KIND_COLOR)


def outcome_scale(present: Iterable[str]) -> tuple[list[str], list[str]]:
    """(domain, range) over the outcomes present, in the fixed order of OUTCOME_COLORS."""
    present = set(present)
    domain = [o for o in OUTCOME_COLORS if o in present] + sorted(present - set(OUTCOME_COLORS))
    return domain, [outcome_color(o) for o in domain]


def outcome_css() -> str:
    """CSS classes giving each outcome its colour: `o-<outcome>` a badge, `v-<outcome>` a verdict's border."""
    rules = []
    for outcome, color in OUTCOME_COLORS.items():
        text = "#1d2127" if outcome in LIGHT_OUTCOMES else "#ffffff"
        name = outcome.replace(" ", "-")
        rules.append(f".o-{name} {{ background: {color}; color: {text}; }} "
                     f".verdict.v-{name} {{ border-left-color: {color}; }}")
    return "\n".join(rules)


def outcome_class(outcome: str | None, prefix: str = "o") -> str:
    """The CSS class of an outcome's colour (outcome_css): `o` for a badge, `v` for a verdict's border."""
    return f"{prefix}-" + (outcome if outcome in OUTCOME_COLORS else "not attributed yet").replace(" ", "-")
