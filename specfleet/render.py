"""Terminal rendering (rich): tables for people; the CLI prints JSON for programs."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from specfleet import serving


def image_text(plan: Mapping[str, Any]) -> str:
    """The serving image with what a reader checks it for: the engine version inside it and
    whether its digest is pinned (``vLLM 0.26.0, pinned``; ``vLLM unknown, tag only``)."""
    if not plan.get("image"):
        return "-"
    engine = "TensorRT-LLM" if plan.get("backend") == "trtllm" else "vLLM"
    version = plan.get("trtllm_version") if engine == "TensorRT-LLM" else plan.get("vllm_version")
    pinned = "pinned" if plan.get("image_digest") else "tag only"
    return f"{plan['image']} ({engine} {version or 'unknown'}, {pinned})"


def tokens_text(plan: Mapping[str, Any], tokens: object) -> str:
    """k with what the rollout may measure besides it: the canary's sweep, a per-batch-size table."""
    shown = str(tokens)
    if plan.get("sweep"):  # its key's canary measures these (specfleet.sweep)
        shown += f" (sweep k={','.join(map(str, plan['sweep']['tokens']))})"
    if plan.get("batch_table"):  # measured when c=8 alone loses (specfleet.batch_table)
        shown += " (per-batch-size table if c=8 loses)"
    return shown


def plan_table(plans: Sequence[dict]) -> Table:
    table = Table(title=f"specfleet plan: {len(plans)} unit(s)", show_lines=False)
    # "cc": the GPU's compute capability, what decides which checkpoint the unit can run.
    for column in ("host", "class", "cc", "L4T", "model", "image", "method", "k", "util", "reasons"):
        table.add_column(column, overflow="fold")
    for plan in plans:
        spec = plan["speculative"] or {}
        speculation = serving.speculation(plan["speculative"] and plan["serving"])
        trtllm = plan.get("backend") == "trtllm"
        if plan["refused"]:
            method = "[red]REFUSED[/red]"
        elif trtllm:
            method = f"{speculation['method'] or 'none'} (trtllm {spec.get('decoding_type', '-')})"
        else:
            method = speculation["method"] or "none"
        util = plan["gpu_memory_utilization"]
        # TensorRT-LLM has no utilisation cap: show its KV share of the memory left after weights.
        kv_fraction = plan.get("kv_cache_free_gpu_memory_fraction")
        shown_util = f"kv {kv_fraction:.2f}" if trtllm and kv_fraction is not None else (
            f"{util:.2f}" if util is not None else "-"
        )
        tokens = tokens_text(plan, speculation["num_speculative_tokens"]) if speculation["method"] else "-"
        table.add_row(
            plan["host"],
            plan["device_class"],
            plan.get("compute_capability") or "-",
            plan.get("l4t") or "-",
            plan["model"],
            image_text(plan),
            method,
            tokens,
            shown_util,
            "; ".join(plan["reasons"]) or "-",
        )
    return table


def trtllm_details(plans: Sequence[dict]) -> str:
    """For each TensorRT-LLM plan: its commands and the options YAML files they name.

    Printed after the plan table: for vLLM the whole config is in the argv, for TensorRT-LLM
    half of it (speculation, KV share, CUDA graphs) is in the YAML, so a table alone would
    hide what the unit will serve. Jetson-only plans print nothing here.
    """
    blocks = []
    for plan in plans:
        if plan.get("backend") != "trtllm" or plan["refused"]:
            continue
        lines = [f"# {plan['host']}: {plan['device_class']}, {plan['image']}"]
        variants = [("speculative", plan["serving"]), ("baseline", plan["baseline_serving"])]
        if not plan["speculative"]:
            variants = [("baseline only", plan["baseline_serving"])]
        for label, spec in variants:
            lines.append(f"## {label}: {shlex.join(serving.argv(spec))}")
            for path, text in serving.files(spec).items():
                lines.append(f"# {path}")
                lines.append(text.rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def print_table(table: Table) -> None:
    # A fixed width when not on a terminal keeps CI logs and README output readable.
    console = Console(width=None if Console().is_terminal else 200)
    console.print(table)


def plan_summary_lines(plans: Sequence[dict]) -> list[str]:
    """One line per unit, its reasons indented below: readable in playbook output, where
    a wide table would be folded."""
    lines = []
    for plan in plans:
        if plan["refused"]:
            shown = "REFUSED"
        else:
            speculation = serving.speculation(plan["speculative"] and plan["serving"])
            method = speculation["method"] or "baseline only"
            tokens = f" k={tokens_text(plan, speculation['num_speculative_tokens'])}" if speculation["method"] else ""
            shown = f"{method}{tokens} util={plan['gpu_memory_utilization']:.2f} {image_text(plan)}"
            shared = plan.get("side_by_side")
            if shared:  # both serve at once while measured, each with its share (specfleet.plan)
                shown += (f" (measured side by side: baseline {shared['baseline']:.2f}, candidate "
                          f"{shared['speculative']:.2f} on port {shared['port']})")
        lines.append(f"{plan['host']}: {plan['device_class']} L4T {plan.get('l4t') or '-'}: {shown}")
        lines.extend(f"    - {reason}" for reason in plan["reasons"])
    return lines


def manifest_table(summary: Sequence[dict]) -> Table:
    table = Table(title="store manifests written")
    for column in ("name", "id", "files", "size"):
        table.add_column(column)
    for entry in summary:
        table.add_row(entry["name"], entry["id"], str(entry["files"]), f"{entry['bytes'] / 2**30:.2f} GiB")
    return table


def hardware_line(unit: Mapping[str, Any]) -> str:
    """What a benchmark ran on, for its context: the module, its class and its software
    (DGX OS on a DGX Spark, JetPack and L4T on a Jetson)."""
    if unit.get("dgx_os"):
        software = f"DGX OS {unit['dgx_os']}"
    else:
        software = f"JetPack {unit.get('jetpack')}, L4T {unit.get('l4t')}"
    return f"{unit.get('module')} ({unit.get('device_class')}), {software}"
