"""The Grafana dashboard's PromQL, read once for the tests that check it."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "evalfleet-quality.json"

#: Values for Grafana's variables, so an expression is plain PromQL.
_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*[a-zA-Z_]\w*\)$", re.S)


def dashboard_expressions() -> list[str]:
    """Every PromQL expression in the dashboard (panels and variables), variables filled."""
    dashboard = json.loads(DASHBOARD.read_text())
    raw = [target["expr"] for panel in dashboard["panels"]
           for target in panel.get("targets", []) if target.get("expr")]
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") == "query":
            raw.append(variable["definition"])
    return [to_promql(expr) for expr in raw]


def to_promql(expr: str) -> str:
    """Grafana's form of a query as Prometheus reads it."""
    for name, value in _VARIABLES.items():
        expr = expr.replace(name, value)
    expr = re.sub(r"\$\{?[a-zA-Z_]\w*\}?", ".*", expr)  # $rule, ${segment}: match all
    match = _LABEL_VALUES.match(expr.strip())
    return match.group(1) if match else expr


def metric_names(expr: str) -> set[str]:
    """The evalfleet metric names an expression reads."""
    return set(re.findall(r"\bevalfleet_[a-z0-9_]+", expr))
