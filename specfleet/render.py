"""Terminal rendering (rich): tables for people; the CLI prints JSON for programs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table


def plan_table(plans: Sequence[dict]) -> Table:
    table = Table(title=f"specfleet plan: {len(plans)} unit(s)", show_lines=False)
    for column in ("host", "class", "L4T", "image", "method", "k", "util", "reasons"):
        table.add_column(column, overflow="fold")
    for plan in plans:
        spec = plan["speculative"] or {}
        if plan["refused"]:
            method = "[red]REFUSED[/red]"
        else:
            method = spec.get("method", "none")
        util = plan["gpu_memory_utilization"]
        table.add_row(
            plan["host"],
            plan["device_class"],
            plan.get("l4t") or "-",
            plan["image"] or "-",
            method,
            str(spec.get("num_speculative_tokens", "-")),
            f"{util:.2f}" if util is not None else "-",
            "; ".join(plan["reasons"]) or "-",
        )
    return table


def print_table(table: Table) -> None:
    # A fixed width when not on a terminal keeps CI logs and README output readable.
    console = Console(width=None if Console().is_terminal else 200)
    console.print(table)


def plan_summary_lines(plans: Sequence[dict]) -> list[str]:
    """One line per unit, its reasons indented below: readable in playbook output, where
    a wide table would be folded."""
    lines = []
    for plan in plans:
        spec = plan["speculative"] or {}
        if plan["refused"]:
            serving = "REFUSED"
        else:
            method = spec.get("method", "baseline only")
            tokens = f" k={spec['num_speculative_tokens']}" if spec else ""
            serving = f"{method}{tokens} util={plan['gpu_memory_utilization']:.2f} {plan['image']}"
        lines.append(f"{plan['host']}: {plan['device_class']} L4T {plan.get('l4t') or '-'}: {serving}")
        lines.extend(f"    - {reason}" for reason in plan["reasons"])
    return lines


def manifest_table(summary: Sequence[dict]) -> Table:
    table = Table(title="store manifests written")
    for column in ("name", "id", "files", "size"):
        table.add_column(column)
    for entry in summary:
        table.add_row(entry["name"], entry["id"], str(entry["files"]), f"{entry['bytes'] / 2**30:.2f} GiB")
    return table
