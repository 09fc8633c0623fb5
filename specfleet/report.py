"""The fleet report of one rollout run: JSON, CSV, Markdown and one self-contained HTML page.

A run folder holds ``units/<host>.json``, one record per unit written by the rollout; the
report is assembled from them once, by the controller, so no two writers share a file.
Pure rendering functions plus one ``write_report`` that does the I/O.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import write_file

from specfleet import batch_table, sweep, variables

DECISIONS = ("kept", "reverted", "failed")
CSV_COLUMNS = (
    "host", "device_class", "model", "power", "decision", "method", "num_speculative_tokens", "serving",
    "workload", "speedup_c1", "speedup_c1_bounds", "tpot_p50_baseline_ms", "tpot_p50_speculative_ms", "speedup_c8",
    "acceptance_rate", "mean_acceptance_length", "blocks", "baseline_drift", "output_check", "reasons",
    "draft_sweep", "batch_table",
)


# The Markdown table's optional columns: (row column, title, the unit record's field).
OPTIONAL_COLUMNS = (("draft_sweep", "k sweep", "sweep"), ("batch_table", "batch table", "batch_table"))

RUNS_ENV = "SPECFLEET_RUNS_DIR"


def runs_root() -> Path:
    """Where rollout runs are kept: ``$SPECFLEET_RUNS_DIR``, else ``runs/`` in the working
    directory (the checkout, or wherever an installed collection's playbook is run from)."""
    return Path(os.environ.get(RUNS_ENV) or "runs").absolute()


def run_folder(run_id: str) -> Path:
    """One run's folder: ``units/<host>.json`` written by the rollout, the report beside them."""
    if not variables.is_file_name(run_id):
        raise ValueError(f"specfleet_run_id: {variables.shown(run_id)} cannot name a folder (letters, digits, "
                         "'.', '_' or '-')")
    return runs_root() / run_id


def unit_file(run_dir: Path, host: str) -> Path:
    """A unit's record in its run's folder (read back by load_run); a host name that would
    leave the folder is refused."""
    return variables.unit_file(run_dir / "units", host, ".json")


def load_run(run_dir: Path) -> list[dict[str, Any]]:
    units = run_dir / "units"
    return [json.loads(path.read_text()) for path in sorted(units.glob("*.json"))] if units.is_dir() else []


def latest_run(runs_dir: Path) -> Path | None:
    runs = sorted(path for path in runs_dir.iterdir() if (path / "units").is_dir()) if runs_dir.is_dir() else []
    return runs[-1] if runs else None


def gated(record: Mapping) -> tuple[str | None, Mapping]:
    """(workload, the gate's own figures for it) of the primary workload the unit was gated on
    (specfleet.gate.decide; the measurement names the gated workloads in order, since a record
    read back from JSON written with sorted keys has lost the figures' order), or (None, {}) for
    a unit the gate did not judge."""
    figures = record.get("figures") or {}
    order = [*((record.get("measurement") or {}).get("workloads") or []), *figures]
    for workload in order:
        if isinstance(figures.get(workload), Mapping):
            return workload, figures[workload]
    return None, {}


def speedup(record: Mapping, concurrency: str = "c1") -> float | None:
    """Throughput with speculation over without, as the gate measured it (medians)."""
    key = "throughput_gain_c1" if concurrency == "c1" else "throughput_change_c8"
    change = (gated(record)[1].get(key) or {}).get("value")
    return round(1.0 + change, 3) if change is not None else None


def tpot_p50(record: Mapping, side: str) -> float | None:
    """TPOT p50 at c=1 in ms of ``side`` (baseline or candidate), as the gate read it."""
    return (gated(record)[1].get("tpot_drop_c1") or {}).get(side)


def acceptance(record: Mapping) -> Mapping | None:
    return gated(record)[1].get("acceptance_c1")


def speedup_bounds(record: Mapping) -> str | None:
    """The c=1 speedup's one-sided bounds at the gate's confidence, as "1.28..1.41"."""
    gain = gated(record)[1].get("throughput_gain_c1") or {}
    if gain.get("lower") is None or gain.get("upper") is None:
        return None
    return f"{1 + gain['lower']:.2f}..{1 + gain['upper']:.2f}"


def drift(record: Mapping) -> float | None:
    """The baseline's largest change between two of its blocks (+0.04: 4 % slower)."""
    return ((record.get("measurement") or {}).get("drift") or {}).get("value")


def output_check(record: Mapping) -> str | None:
    """The token-level output check in a few words: identical answers, ties, divergences."""
    found = (record.get("measurement") or {}).get("output_check") or {}
    if not found.get("compared"):
        return None
    text = f"{found.get('identical', 0)}/{found['compared']} identical"
    if found.get("ties"):
        text += f", {len(found['ties'])} numerics tie(s)"
    if found.get("diverged"):
        text += f", {len(found['diverged'])} DIVERGED"
    if found.get("unstable"):
        text += f", {len(found['unstable'])} unstable"
    return text


def power(record: Mapping) -> str | None:
    """The unit's power mode and clocks as its measurements recorded them (the bench context;
    jetson_power's summary), None when nothing was measured."""
    for side in ("baseline", "speculative"):
        context = (record.get(side) or {}).get("context") or {}
        if context.get("power"):
            return str(context["power"])
    return None


def row(record: Mapping) -> dict[str, Any]:
    accepted = acceptance(record) or {}
    return {
        "host": record["host"],
        "device_class": record.get("device_class"),
        "model": record.get("model"),
        "power": power(record),
        "decision": record.get("decision"),
        "method": record.get("method"),
        "num_speculative_tokens": record.get("num_speculative_tokens"),
        "draft_sweep": sweep.report_text(record.get("sweep")),
        "batch_table": batch_table.report_text(record.get("batch_table")),
        "serving": record.get("serving"),
        "workload": gated(record)[0],
        "speedup_c1": speedup(record),
        "speedup_c1_bounds": speedup_bounds(record),
        "tpot_p50_baseline_ms": tpot_p50(record, "baseline"),
        "tpot_p50_speculative_ms": tpot_p50(record, "candidate"),
        "speedup_c8": speedup(record, concurrency="c8"),
        "acceptance_rate": accepted.get("rate"),
        "mean_acceptance_length": accepted.get("mean_length"),
        "blocks": len((record.get("measurement") or {}).get("blocks") or []) or None,
        "baseline_drift": drift(record),
        "output_check": output_check(record),
        "reasons": "; ".join(record.get("reasons") or []),
    }


def summary(records: Sequence[Mapping]) -> dict[str, Any]:
    counts = Counter(record.get("decision") for record in records)
    return {
        "units": len(records),
        **{decision: counts.get(decision, 0) for decision in DECISIONS},
        "by_decision": {
            decision: [record["host"] for record in records if record.get("decision") == decision]
            for decision in DECISIONS
        },
    }


def summary_lines(records: Sequence[Mapping], run_id: str = "") -> list[str]:
    """The compact end-of-playbook summary: one line per unit, then the totals."""
    lines = []
    for record in records:
        ratio = speedup(record)
        figure = f" x{ratio:.2f} c=1" if ratio else ""
        reason = (record.get("reasons") or [""])[0]
        lines.append(f"{record['host']}: {record.get('decision', '?').upper()} "
                     f"{record.get('method') or '-'}{figure} ({record.get('serving') or 'nothing'} serving) - {reason}")
    totals = summary(records)
    lines.append(f"run {run_id}: {totals['units']} units: {totals['kept']} kept, "
                 f"{totals['reverted']} reverted, {totals['failed']} failed")
    return lines


def to_csv(records: Sequence[Mapping]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for record in records:
        writer.writerow(row(record))
    return buffer.getvalue()


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def to_markdown(records: Sequence[Mapping], run_id: str) -> str:
    totals = summary(records)
    # Columns shown only when a unit has something in them: a k sweep, a per-batch-size table.
    optional = [(column, title) for column, title, field in OPTIONAL_COLUMNS
                if any(record.get(field) for record in records)]
    lines = [
        f"# specfleet rollout {run_id}",
        "",
        f"{totals['units']} units: **{totals['kept']} kept**, {totals['reverted']} reverted, "
        f"{totals['failed']} failed.",
        "",
        "| host | class | power | decision | method | k |" + "".join(f" {title} |" for _, title in optional)
        + " speedup c=1 (bounds) | TPOT p50 base/spec (ms) | speedup c=8 | acceptance | blocks | baseline drift "
        "| outputs |",
        "|---|---|---|---|---|---|" + "---|" * len(optional) + "---|---|---|---|---|---|---|",
    ]
    for record in records:
        values = row(record)
        lines.append(
            f"| {values['host']} | {values['device_class']} | {_fmt(values['power'])} | {values['decision']} | "
            f"{values['method'] or '-'} | {_fmt(values['num_speculative_tokens'])} | "
            + "".join(f"{_fmt(values[column])} | " for column, _ in optional) + f"{_fmt(values['speedup_c1'])} "
            f"({_fmt(values['speedup_c1_bounds'])}) | "
            f"{_fmt(values['tpot_p50_baseline_ms'], 1)} / {_fmt(values['tpot_p50_speculative_ms'], 1)} | "
            f"{_fmt(values['speedup_c8'])} | {_fmt(values['acceptance_rate'])} | {_fmt(values['blocks'])} | "
            f"{_pct(values['baseline_drift'])} | {_fmt(values['output_check'])} |"
        )
    lines += ["", "## Reasons", ""]
    for record in records:
        lines.append(f"- **{record['host']}** ({record.get('decision')}):")
        lines += [f"  - {reason}" for reason in record.get("reasons") or []]
    return "\n".join(lines) + "\n"


# --- HTML with inline SVG plots -------------------------------------------------------------

COLOURS = {"kept": "#2e7d32", "reverted": "#f9a825", "failed": "#c62828", None: "#757575"}


def _bar_chart(title: str, items: Sequence[tuple[str, float | None, str]], reference: float | None = None) -> str:
    """Horizontal bars, one per (label, value, colour); missing values are drawn as text."""
    width, bar_h, left = 640, 18, 170
    known = [value for _, value, _ in items if value is not None]
    top = max(known + ([reference] if reference else []) + [1e-9])
    scale = (width - left - 60) / top
    height = 30 + bar_h * len(items) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
             f'<text x="4" y="16" font-weight="bold">{html.escape(title)}</text>']
    for index, (label, value, colour) in enumerate(items):
        y = 26 + index * bar_h
        parts.append(f'<text x="4" y="{y + 13}" font-size="12">{html.escape(label)}</text>')
        if value is None:
            parts.append(f'<text x="{left}" y="{y + 13}" font-size="12" fill="#757575">not measured</text>')
            continue
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{value * scale:.1f}" height="{bar_h - 4}" fill="{colour}"/>')
        parts.append(f'<text x="{left + value * scale + 4:.1f}" y="{y + 13}" font-size="12">{value:.2f}</text>')
    if reference:
        x = left + reference * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="22" x2="{x:.1f}" y2="{height - 4}" stroke="#000" stroke-dasharray="4"/>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _acceptance_chart(records: Sequence[Mapping]) -> str:
    width, height, left, bottom = 640, 240, 40, 200
    series = [(r["host"], (acceptance(r) or {}).get("per_position")) for r in records]
    workload = _shown_workload(records)
    series = [(host, values) for host, values in series if values]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img">',
             f'<text x="4" y="16" font-weight="bold">Acceptance per draft position ({workload}, c=1)</text>',
             f'<line x1="{left}" y1="{bottom}" x2="{width - 10}" y2="{bottom}" stroke="#000"/>']
    if not series:
        parts.append(f'<text x="{left}" y="100" fill="#757575">no speculative server reported acceptance</text>')
    longest = max((len(values) for _, values in series), default=1)
    step = (width - left - 20) / max(longest - 1, 1)
    for index, (host, values) in enumerate(series):
        colour = f"hsl({(index * 47) % 360},60%,40%)"
        points = " ".join(f"{left + i * step:.1f},{bottom - v * (bottom - 30):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}">'
                     f"<title>{html.escape(host)}</title></polyline>")
    parts.append("</svg>")
    return "".join(parts)


def _shown_workload(records: Sequence[Mapping]) -> str:
    """The gated workload the charts show (the first one the gate judged)."""
    names = {gated(record)[0] for record in records} - {None}
    return ", ".join(sorted(names)) or "gated workload"


def to_html(records: Sequence[Mapping], run_id: str) -> str:
    totals = summary(records)
    workload = html.escape(_shown_workload(records))
    speedups = [(r["host"], speedup(r), COLOURS.get(r.get("decision"), COLOURS[None])) for r in records]
    tpot = []
    for r in records:
        tpot.append((f"{r['host']} base", tpot_p50(r, "baseline"), "#90a4ae"))
        tpot.append((f"{r['host']} spec", tpot_p50(r, "candidate"), COLOURS.get(r.get("decision"), COLOURS[None])))
    table_rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(value))}</td>" for value in row(r).values()) + "</tr>"
        for r in records
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>specfleet rollout {html.escape(run_id)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:3px 6px}}
.kept{{color:{COLOURS['kept']}}}.failed{{color:{COLOURS['failed']}}}</style>
</head><body>
<h1>specfleet rollout {html.escape(run_id)}</h1>
<p>{totals['units']} units: <b class="kept">{totals['kept']} kept</b>, {totals['reverted']} reverted,
<b class="failed">{totals['failed']} failed</b>.</p>
{_bar_chart(f"Speedup at concurrency 1 ({workload}; dashed line = 1.0)", speedups, reference=1.0)}
{_bar_chart(f"TPOT p50, baseline vs speculative (ms, {workload}, c=1)", tpot)}
{_acceptance_chart(records)}
<h2>Units</h2>
<table><tr>{"".join(f"<th>{c}</th>" for c in CSV_COLUMNS)}</tr>{table_rows}</table>
</body></html>
"""


def unrecorded_failure(host: str, run_id: str, task: str, message: str, unreachable: bool,
                       failure_class: str | None = None) -> dict[str, Any]:
    """The record of a unit that failed where the rollout could not write one: it was
    unreachable (Ansible runs no rescue then), or it failed before the rollout reached it
    (prepare, facts, preflight), which left its serving untouched."""
    failure_class = "unreachable" if unreachable else (failure_class or "task_failed")
    if unreachable:
        after = ("not rolled back: the controller lost the unit; once it answers again, run "
                 f"rollout.yml -l {host} (it returns to its release record's known-good or measures again)")
        serving = "unknown"
    else:
        after = "the rollout did not reach it: it serves what it served before (its release record)"
        serving = "unchanged"
    return {
        "host": host,
        "run_id": run_id,
        "decision": "failed",
        "failure": {"task": task, "failure_class": failure_class, "message": message, "decisive_lines": []},
        "reasons": [f"{task}: {failure_class}: {message}", after],
        "serving": serving,
    }


def write_report(run_dir: Path) -> dict[str, Any]:
    """Write report.{json,csv,md,html} into the run folder; returns paths and the summary."""
    records = load_run(run_dir)
    run_id = run_dir.name
    outputs = {
        "report.json": json.dumps({"run_id": run_id, "summary": summary(records), "units": records}, indent=1),
        "report.csv": to_csv(records),
        "report.md": to_markdown(records, run_id),
        "report.html": to_html(records, run_id),
    }
    for name, text in outputs.items():
        write_file(run_dir / name, text)
    return {"run_dir": str(run_dir), "files": sorted(outputs), "summary": summary(records),
            "summary_lines": summary_lines(records, run_id)}
