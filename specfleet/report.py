"""The fleet report of one rollout run: JSON, CSV, Markdown and one self-contained HTML page.

Read from the run's folder (specfleet.runs: ``units/<host>.json``, one record per unit written
by the rollout); the report is assembled from them once, by the controller, so no two writers
share a file. Pure rendering functions plus one ``write_report`` that does the I/O.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import write_file

from specfleet import attention, batch_table, compare, gate, loading, runs, sweep
from specfleet.catalog import device_class_names
from specfleet.console import units_text

CSV_COLUMNS = (
    "host", "device_class", "model", "power", "decision", "method", "num_speculative_tokens", "serving",
    "workload", "speedup_c1", "speedup_c1_bounds", "tpot_p50_baseline_ms", "tpot_p50_speculative_ms", "speedup_c8",
    "acceptance_rate", "mean_acceptance_length", "blocks", "baseline_drift", "output_check", "reasons",
    "draft_sweep", "batch_table", "startup", "image",  # new columns last: readers by position keep working
)


# The Markdown table's optional columns: (row column, title, the unit record's field).
OPTIONAL_COLUMNS = (("draft_sweep", "k sweep", "sweep"), ("batch_table", "batch table", "batch_table"))


def invocation(info: Mapping[str, Any]) -> attention.Invocation:
    playbook = info.get("playbook")
    inventory = info.get("inventory")
    return attention.Invocation(
        playbook if isinstance(playbook, str) and playbook else attention.Invocation.playbook,
        tuple(str(path) for path in inventory) if isinstance(inventory, list) else ())


def output_check(record: Mapping) -> str | None:
    """The token-level output check in a few words: identical answers, ties, divergences, how
    many were checked with drafting confirmed on, a batch's divergences, each side's repeats."""
    found = (record.get("measurement") or {}).get("output_check") or {}
    if not found.get("compared"):
        return None
    drafting = found.get("drafting") or {}
    if drafting and not drafting.get("confirmed") and drafting.get("not_drafted"):
        text = f"{gate.NOT_CHECKED_WITH_SPECULATION} (0/{found['compared']} drafted)"
    else:
        text = f"{found.get('identical', 0)}/{found['compared']} identical"
        if drafting:
            text += f", {drafting.get('confirmed', 0)}/{found['compared']} drafting confirmed"
    if found.get("ties"):
        text += f", {len(found['ties'])} numerics tie(s)"
    if found.get("diverged"):
        text += f", {len(found['diverged'])} DIVERGED"
    if found.get("inconclusive"):
        text += f", {len(found['inconclusive'])} inconclusive"
    batched = found.get("batched") or {}
    if batched:
        spec = batched.get("speculative") or {}
        text += (f", c={batched.get('concurrency')} {spec.get('diverged', 0)}/{spec.get('compared', 0)} diverged"
                 + (" BEYOND the baseline's" if batched.get("beyond") else ""))
    for side, entries in (found.get("self") or {}).items():
        if entries:
            text += f", {side} repeats differed {len(entries)}"
    return text


def power(record: Mapping) -> str | None:
    """The unit's power mode and clocks as its measurements recorded them (the bench context;
    jetson_power's summary), None when nothing was measured."""
    found = runs.bench_context(record, "power")
    return str(found) if found else None


def startup(record: Mapping) -> str | None:
    """"baseline 1.2 s (compile cache hit); speculative 3.9 s (compile cache miss)": each side's
    first start of the run (a side already serving was not started), None when none started."""
    starts = record.get("startup") or {}
    parts = [f"{side} {found['seconds']:.1f} s"
             + (f" (compile cache {found['compile_cache']})" if found.get("compile_cache") else "")
             for side, found in sorted(starts.items()) if found.get("seconds") is not None]
    return "; ".join(parts) or None


def row(record: Mapping) -> dict[str, Any]:
    accepted = runs.acceptance(record) or {}
    return {
        "host": record["host"],
        "device_class": record.get("device_class"),
        "model": record.get("model"),
        "image": record.get("image"),
        "power": power(record),
        "decision": record.get("decision"),
        "method": record.get("method"),
        "num_speculative_tokens": record.get("num_speculative_tokens"),
        "draft_sweep": sweep.report_text(record.get("sweep")),
        "batch_table": batch_table.report_text(record.get("batch_table")),
        "serving": record.get("serving"),
        "workload": runs.gated(record)[0],
        "speedup_c1": runs.speedup(record),
        "speedup_c1_bounds": runs.speedup_bounds(record),
        "tpot_p50_baseline_ms": runs.tpot_p50(record, "baseline"),
        "tpot_p50_speculative_ms": runs.tpot_p50(record, "candidate"),
        "speedup_c8": runs.speedup(record, concurrency="c8"),
        "acceptance_rate": accepted.get("rate"),
        "mean_acceptance_length": accepted.get("mean_length"),
        "blocks": len((record.get("measurement") or {}).get("blocks") or []) or None,
        "baseline_drift": runs.drift(record),
        "output_check": output_check(record),
        "startup": startup(record),
        "reasons": "; ".join(record.get("reasons") or []),
    }


def summary(records: Sequence[Mapping]) -> dict[str, Any]:
    counts = Counter(record.get("decision") for record in records)
    return {
        "units": len(records),
        **{decision: counts.get(decision, 0) for decision in runs.DECISIONS},
        "by_decision": {
            decision: [record["host"] for record in records if record.get("decision") == decision]
            for decision in runs.DECISIONS
        },
    }


def summary_lines(records: Sequence[Mapping], run_id: str = "") -> list[str]:
    """The compact end-of-playbook summary: one line per unit, then the totals."""
    lines = []
    for record in records:
        ratio = runs.speedup(record)
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


def _class_order(name: str | None) -> tuple[int, str]:
    order = device_class_names()
    return (order.index(name) if name in order else len(order), str(name))


def _range_text(values: Sequence[float]) -> str:
    """"median (min .. max)", or "-" without values."""
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f} .. {max(values):.2f})"


def method_text(record: Mapping) -> str:
    """"eagle3 k=5", "ngram", or "-" for a unit without speculation planned."""
    method = record.get("method")
    if not method:
        return "-"
    tokens = record.get("num_speculative_tokens")
    return f"{method} k={tokens}" if tokens else str(method)


def class_summary(records: Sequence[Mapping]) -> list[dict[str, Any]]:
    """Per device class (in device_classes.yml's order): its records, decisions, the c=1 speedups
    measured and what was kept."""
    classes: dict[Any, list[Mapping]] = {}
    for record in records:
        classes.setdefault(record.get("device_class"), []).append(record)
    rows = []
    for name in sorted(classes, key=_class_order):
        members = classes[name]
        counts = Counter(record.get("decision") for record in members)
        speedups = [value for value in (runs.speedup(record) for record in members) if value is not None]
        kept = Counter(method_text(record) for record in members if record.get("decision") == "kept")
        rows.append({"device_class": name or "unknown", "units": len(members), "records": members,
                     **{decision: counts.get(decision, 0) for decision in runs.DECISIONS},
                     "speedups": speedups,
                     "kept_methods": ", ".join(f"{method} x{count}" for method, count in kept.most_common()) or "-"})
    return rows


def settings(records: Sequence[Mapping]) -> dict[str, list[str]]:
    """What the run served and judged by: models, images and gate thresholds, each with how
    many units had it (one line per distinct value)."""
    def counted(values: Sequence[Any]) -> list[str]:
        found = Counter(str(value) for value in values if value not in (None, "", {}))
        return [f"{value} ({units_text(count)})" for value, count in sorted(found.items())]

    def shown(value: Any) -> str:
        return "/".join(map(str, value)) if isinstance(value, list) else str(value)

    thresholds = [", ".join(f"{name.removeprefix('specfleet_gate_').replace('_', ' ')} {shown(value)}"
                            for name, value in sorted(found.items()))
                  for found in ((record.get("measurement") or {}).get("thresholds") for record in records) if found]
    return {"models": counted([record.get("model") for record in records]),
            "images": counted([record.get("image") for record in records]),
            "thresholds": counted(thresholds)}


def grouped(records: Sequence[Mapping]) -> list[tuple[str, list[Mapping]]]:
    """The units per decision, in GROUP_ORDER (a record without one of them last, as "undecided")."""
    groups = [(decision, [record for record in records if record.get("decision") == decision])
              for decision in GROUP_ORDER]
    groups.append(("undecided", [record for record in records if record.get("decision") not in GROUP_ORDER]))
    return [(decision, group) for decision, group in groups if group]


def _duration(info: Mapping[str, Any]) -> str | None:
    seconds = info.get("duration_s")
    if not isinstance(seconds, (int, float)):
        return None
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s" if minutes else f"{rest} s"


def _totals_sentence(records: Sequence[Mapping]) -> str:
    totals = summary(records)
    return (f"{totals['units']} units: {totals['kept']} kept, {totals['reverted']} reverted, "
            f"{totals['failed']} failed")


def _md(value: Any) -> str:
    """A Markdown table cell: no pipe or line break can break the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def to_markdown(records: Sequence[Mapping], run_id: str, info: Mapping[str, Any] | None = None) -> str:
    info = info or {}
    # Columns shown only when a unit has something in them: a k sweep, a per-batch-size table.
    optional = [(column, title) for column, title, field in OPTIONAL_COLUMNS
                if any(record.get(field) for record in records)]
    duration = _duration(info)
    lines = [f"# specfleet rollout {run_id}", "",
             _totals_sentence(records) + (f", in {duration}" if duration else "") + "."]
    started_as = invocation(info)
    if info.get("playbook"):
        lines += ["", f"Run: `{started_as.command_line()}`, started {info.get('started')}."]
    needing = attention.needing_attention(records, started_as)
    lines += ["", f"## Needs attention: {units_text(sum(len(item.hosts) for item in needing))}", ""]
    if not needing:
        lines.append("Nothing: every unit kept speculation.")
    for number, item in enumerate(needing, 1):
        lines += [f"{number}. **{', '.join(item.hosts)}** ({item.status}, now serving: {item.serving}): {item.cause}",
                  f"   `{item.command}`"]
    lines += ["", "## At a glance", "",
              "| class | units | kept | reverted | failed | speedup c=1 median (min .. max) | kept methods |",
              "|---|---|---|---|---|---|---|"]
    for row_ in class_summary(records):
        lines.append(f"| {row_['device_class']} | {row_['units']} | {row_['kept']} | {row_['reverted']} | "
                     f"{row_['failed']} | {_range_text(row_['speedups'])} | {_md(row_['kept_methods'])} |")
    for title, values in settings(records).items():
        if values:
            lines += ["", f"{title.capitalize()}: " + "; ".join(values) + "."]
    header = ("| host | class | power | decision | method | k |" + "".join(f" {title} |" for _, title in optional)
              + " speedup c=1 (bounds) | TPOT p50 base/spec (ms) | speedup c=8 | acceptance | blocks | baseline drift "
              "| outputs |")
    rule = "|---|---|---|---|---|---|" + "---|" * len(optional) + "---|---|---|---|---|---|---|"
    lines += ["", "## Units"]
    for decision, group in grouped(records):
        lines += ["", f"### {decision.capitalize()} ({len(group)})", "", header, rule]
        for record in group:
            values = row(record)
            lines.append(
                f"| {values['host']} | {values['device_class']} | {_fmt(values['power'])} | {values['decision']} | "
                f"{values['method'] or '-'} | {_fmt(values['num_speculative_tokens'])} | "
                + "".join(f"{_md(_fmt(values[column]))} | " for column, _ in optional)
                + f"{_fmt(values['speedup_c1'])} ({_fmt(values['speedup_c1_bounds'])}) | "
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
# Charts are distributions, not one bar per unit, so they keep their size at 60 or 200 units;
# every chart has axes, tick labels, axis titles and a legend, and draws in plain SVG (the page
# works offline and prints).

COLOURS = {"kept": "#2e7d32", "reverted": "#f9a825", "failed": "#c62828", None: "#757575"}
CHART_W = 720
FONT = 'font-family="sans-serif" font-size="12"'


def _svg(height: int, title: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{height}" '
            f'viewBox="0 0 {CHART_W} {height}" role="img" aria-label="{html.escape(title)}">'
            f'<title>{html.escape(title)}</title>'
            f'<text x="4" y="16" font-family="sans-serif" font-size="14" font-weight="bold">{html.escape(title)}</text>'
            + "".join(body) + "</svg>")


def _speedup_axis(values: Sequence[float]) -> tuple[float, float, float]:
    """(low, high, tick step) of a speedup axis that holds every value and 1.0, both ends on a
    tick, so that the histogram's bins (one step wide) tile it exactly."""
    raw_low, raw_high = min([1.0, *values]) - 0.05, max([1.0, *values]) + 0.05
    span = raw_high - raw_low
    step = 0.1 if span <= 1.2 else 0.2 if span <= 2.4 else 0.5
    low = max(0.0, math.floor(raw_low / step + 1e-9) * step)
    return low, low + math.ceil((raw_high - low) / step - 1e-9) * step, step


def _scale(low: float, high: float, left: float, right: float) -> Callable[[float], float]:
    """The linear map of [low, high] onto [left, right] (the charts' speedup axis)."""
    return lambda value: left + (value - low) / (high - low) * (right - left)


def _y_title(text: str, top: float, bottom: float) -> str:
    middle = (top + bottom) / 2
    return (f'<text x="14" y="{middle}" {FONT} transform="rotate(-90 14 {middle})" text-anchor="middle">'
            f"{html.escape(text)}</text>")


def _x_axis(low: float, high: float, step: float, left: int, right: int, y: float, title: str) -> list[str]:
    x = _scale(low, high, left, right)
    parts = [f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" stroke="#000"/>']
    tick = math.ceil(low / step - 1e-9) * step
    while tick <= high + 1e-9:
        parts += [f'<line x1="{x(tick):.1f}" y1="{y}" x2="{x(tick):.1f}" y2="{y + 4}" stroke="#000"/>',
                  f'<text x="{x(tick):.1f}" y="{y + 16}" text-anchor="middle" {FONT}>{tick:.1f}</text>']
        tick += step
    parts.append(f'<text x="{(left + right) / 2:.1f}" y="{y + 32}" text-anchor="middle" {FONT}>'
                 f'{html.escape(title)}</text>')
    return parts


def _legend(entries: Sequence[tuple[str, str]], x: int, y: int) -> tuple[list[str], int]:
    """Colour boxes and labels from (x, y), wrapped at the chart's width; returns the parts and
    the height the legend took."""
    parts, left, rows = [], x, 1
    for label, colour in entries:
        width = 24 + 7 * len(label)
        if x + width > CHART_W and x > left:
            x, y, rows = left, y + 18, rows + 1
        parts += [f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/>',
                  f'<text x="{x + 14}" y="{y}" {FONT}>{html.escape(label)}</text>']
        x += width
    return parts, 18 * rows


def _threshold_marks(low: float, high: float, left: int, right: int, top: int, bottom: float,
                     threshold: float | None) -> list[str]:
    parts = []
    for value, label in ((1.0, "1.0 = no change"), (threshold, f"keep threshold {threshold:.2f}" if threshold else "")):
        if value is None or not low <= value <= high:
            continue
        x = _scale(low, high, left, right)(value)
        parts += [f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#000" stroke-dasharray="4"/>',
                  f'<text x="{x + 3:.1f}" y="{top + 10}" {FONT} fill="#333">{html.escape(label)}</text>']
    return parts


def speedup_threshold(records: Sequence[Mapping]) -> float | None:
    """The c=1 speedup the gate asked for (1 + its throughput threshold), when a record says."""
    for record in records:
        gain = ((record.get("measurement") or {}).get("thresholds") or {}).get("specfleet_gate_min_throughput_gain")
        if isinstance(gain, (int, float)):
            return 1.0 + gain
    return None


def _histogram(records: Sequence[Mapping], workload: str, threshold: float | None) -> str:
    """How many units reached each c=1 speedup (bins of the axis step), stacked by decision."""
    # Only the decisions the chart draws (a record from elsewhere may carry another).
    measured = [(runs.speedup(record), record.get("decision")) for record in records
                if record.get("decision") in runs.DECISIONS]
    values = [value for value, _ in measured if value is not None]
    title = f"Speedup at concurrency 1 ({workload}): units per speedup"
    left, right, top, bottom = 50, CHART_W - 20, 40, 220
    parts: list[str] = []
    low, high, step = _speedup_axis(values)
    bins = max(1, round((high - low) / step))
    counts: list[Counter] = [Counter() for _ in range(bins)]
    for value, decision in measured:
        if value is not None:
            counts[min(bins - 1, max(0, int((value - low) / step)))][decision] += 1
    tallest = max([sum(c.values()) for c in counts] + [1])
    y_step = max(1, math.ceil(tallest / 5))
    y_top = math.ceil(tallest / y_step) * y_step
    width = (right - left) / bins
    for index, count in enumerate(counts):
        base = bottom
        for decision in runs.DECISIONS:
            if count[decision]:
                height = count[decision] / y_top * (bottom - top)
                base -= height
                parts.append(f'<rect x="{left + index * width + 1:.1f}" y="{base:.1f}" width="{width - 2:.1f}" '
                             f'height="{height:.1f}" fill="{COLOURS[decision]}"><title>{count[decision]} {decision} '
                             f'unit(s) at {low + index * step:.1f}-{low + (index + 1) * step:.1f}x</title></rect>')
    parts.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#000"/>')
    for tick in range(0, y_top + 1, y_step):
        y = bottom - tick / y_top * (bottom - top)
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{tick}</text>')
    parts.append(_y_title("units", top, bottom))
    parts += _x_axis(low, high, step, left, right, bottom, "speedup at c=1 (speculative / baseline throughput)")
    parts += _threshold_marks(low, high, left, right, top, bottom, threshold)
    unmeasured = len(measured) - len(values)
    legend, legend_h = _legend([(name, COLOURS[name]) for name in runs.DECISIONS], left, bottom + 52)
    parts += legend
    if unmeasured:
        parts.append(f'<text x="{right}" y="{bottom + 52}" text-anchor="end" {FONT} fill="#555">'
                     f'{unmeasured} unit(s) not measured</text>')
    if not values:
        parts.append(f'<text x="{left + 10}" y="{top + 30}" {FONT} fill="#555">no unit was measured</text>')
    return _svg(bottom + 44 + legend_h, title, parts)


def _strip(rows: Sequence[Mapping], workload: str, threshold: float | None) -> str:
    """One row per device class (class_summary's rows), one dot per measured unit at its c=1 speedup."""
    values = [value for row_ in rows for value in row_["speedups"]]
    low, high, step = _speedup_axis(values)
    left, right, top, row_h = 130, CHART_W - 20, 40, 30
    bottom = top + row_h * len(rows)
    parts: list[str] = []

    x = _scale(low, high, left, right)
    for number, row_ in enumerate(rows):
        centre = top + row_h * number + row_h / 2
        label = f"{row_['device_class']} ({row_['units']})"
        parts += [f'<text x="{left - 8}" y="{centre + 4:.1f}" text-anchor="end" {FONT}>{html.escape(label)}</text>',
                  f'<line x1="{left}" y1="{centre:.1f}" x2="{right}" y2="{centre:.1f}" stroke="#eee"/>']
        for index, record in enumerate(row_["records"]):
            value = runs.speedup(record)
            if value is None:
                continue
            offset = ((index * 7) % 5 - 2) * 3  # a small fixed jitter: equal speedups stay visible
            parts.append(f'<circle cx="{x(value):.1f}" cy="{centre + offset:.1f}" r="4" fill-opacity="0.8" '
                         f'fill="{COLOURS.get(record.get("decision"), COLOURS[None])}"><title>'
                         f'{html.escape(str(record["host"]))}: {value:.2f}x, {record.get("decision")}</title></circle>')
    parts += _x_axis(low, high, step, left, right, bottom, "speedup at c=1")
    parts += _threshold_marks(low, high, left, right, top, bottom, threshold)
    legend, legend_h = _legend([(name, COLOURS[name]) for name in runs.DECISIONS], left, bottom + 52)
    return _svg(bottom + 44 + legend_h, f"Speedup at concurrency 1 by device class ({workload}): one dot per unit",
                [*parts, *legend])


def _acceptance_chart(rows: Sequence[Mapping], workload: str) -> str:
    """Per device class (class_summary's rows), the median acceptance at each draft position over its units."""
    left, right, top, bottom = 50, CHART_W - 20, 40, 220
    series: dict[str, list[list[float]]] = {}  # per class, its units' acceptance per position
    for row_ in rows:
        found = [(runs.acceptance(record) or {}).get("per_position") for record in row_["records"]]
        if any(found):
            series[row_["device_class"]] = [values for values in found if values]
    parts = [f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#000"/>',
             f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#000"/>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = bottom - tick * (bottom - top)
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{tick:.2f}</text>')
    parts.append(_y_title("accepted share", top, bottom))
    longest = max((len(values) for per_unit in series.values() for values in per_unit), default=1)
    step = (right - left - 20) / max(longest - 1, 1)
    for position in range(longest):
        parts.append(f'<text x="{left + 10 + position * step:.1f}" y="{bottom + 16}" text-anchor="middle" '
                     f'{FONT}>{position + 1}</text>')
    parts.append(f'<text x="{(left + right) / 2}" y="{bottom + 32}" text-anchor="middle" {FONT}>draft position</text>')
    legend = []
    for index, name in enumerate(series):  # class_summary's order
        colour = f"hsl({(index * 67 + 200) % 360},60%,40%)"
        per_unit = series[name]
        medians = [statistics.median(values[position] for values in per_unit if len(values) > position)
                   for position in range(max(len(values) for values in per_unit))]
        points = [(left + 10 + i * step, bottom - v * (bottom - top)) for i, v in enumerate(medians)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                     f'points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in points)}"/>')
        parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"><title>{html.escape(name)} position '
                  f'{i + 1}: {medians[i]:.2f}</title></circle>' for i, (px, py) in enumerate(points)]
        legend.append((f"{name} ({units_text(len(per_unit))})", colour))
    if not series:
        parts.append(f'<text x="{left + 10}" y="100" {FONT} fill="#555">'
                     "no speculative server reported acceptance</text>")
    drawn, legend_h = _legend(legend, left, bottom + 52)
    return _svg(bottom + 44 + legend_h, f"Acceptance per draft position ({workload}, c=1): median per device class",
                [*parts, *drawn])


def _shown_workload(records: Sequence[Mapping]) -> str:
    """The gated workload the charts show (the first one the gate judged)."""
    names = {runs.gated(record)[0] for record in records} - {None}
    return ", ".join(sorted(names)) or "gated workload"


# The HTML unit table: readable titles over the figures the gate decided on; the rest of a unit
# (every reason, drift, power, model, image, k sweep, batch table) folds under "Why".
HTML_COLUMNS = ("Unit", "Class", "Method", "Speedup c=1 (bounds)", "c=8", "TPOT p50 ms, base / spec", "Acceptance",
                "Outputs", "Why")
GROUP_ORDER = ("failed", "reverted", "kept")  # as the attention list: what needs a look first


def _unit_cells(record: Mapping) -> list[str]:
    values = row(record)
    reasons = [str(reason) for reason in record.get("reasons") or []]
    if record.get("decision") == "reverted" and attention.gate_decided(record) and len(reasons) > 1:
        # The check that decided first, then the gate's headline (which only counts them).
        reasons = [attention.deciding_reason(reasons), reasons[0], *reasons[2:]]
    details = [*reasons[1:]]
    details += [f"baseline drift: {_pct(values['baseline_drift'])}"] if values["baseline_drift"] is not None else []
    details += [f"power: {values['power']}"] if values["power"] else []
    details += [f"start to serving: {values['startup']}"] if values["startup"] else []
    details += [f"k sweep: {values['draft_sweep']}"] if values["draft_sweep"] else []
    details += [f"batch table: {values['batch_table']}"] if values["batch_table"] else []
    details += [f"{name}: {record[name]}" for name in ("model", "image") if record.get(name)]
    why = (f"<details><summary>{html.escape(reasons[0] if reasons else '-')}</summary><ul>"
           + "".join(f"<li>{html.escape(text)}</li>" for text in details) + "</ul></details>")
    cells = [values["host"], values["device_class"], method_text(record),
             f"{_fmt(values['speedup_c1'])} ({_fmt(values['speedup_c1_bounds'])})"
             if values["speedup_c1"] is not None else "-",
             _fmt(values["speedup_c8"]),
             f"{_fmt(values['tpot_p50_baseline_ms'], 1)} / {_fmt(values['tpot_p50_speculative_ms'], 1)}",
             _fmt(values["acceptance_rate"]), _fmt(values["output_check"])]
    return [*(f'<td class="c{index}">{html.escape(str(cell))}</td>' for index, cell in enumerate(cells)),
            f'<td class="why">{why}</td>']


CSS = """body{font-family:sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:13px;width:100%}td,th{border:1px solid #ccc;padding:3px 6px;
vertical-align:top;overflow-wrap:break-word;text-align:left}th{background:#f3f3f3}
td.c0,td.c1,td.c2,td.c4{white-space:nowrap}.why summary{cursor:pointer}.why ul{margin:.3em 0;padding-left:1.2em}
ol.attention li{margin-bottom:.7em}code.cmd{display:block;background:#f5f5f5;padding:3px 6px;margin-top:2px;
overflow-wrap:anywhere;white-space:pre-wrap}.status{font-weight:bold;text-transform:uppercase;font-size:.85em}
.unreachable,.failed{color:#c62828}.inconclusive{color:#6a1b9a}.reverted{color:#a66f00}.kept{color:#2e7d32}
svg{max-width:100%;height:auto;display:block;margin:1em 0}
@media print{details{display:block}details>*{display:block}body{max-width:none}}"""


def to_html(records: Sequence[Mapping], run_id: str, info: Mapping[str, Any] | None = None,
            since: str | None = None) -> str:
    """The page; ``since``: the Markdown of what changed since the previous run (compare), shown
    as preformatted text after the unit tables."""
    info = info or {}
    totals = summary(records)
    workload = _shown_workload(records)
    started_as = invocation(info)
    needing = attention.needing_attention(records, started_as)
    rows = class_summary(records)
    threshold = speedup_threshold(records)
    duration = _duration(info)
    run_line = (f"<p>Run <code>{html.escape(started_as.command_line())}</code>, started "
                f"{html.escape(str(info.get('started')))}" + (f", took {duration}" if duration else "") + ".</p>"
                if info.get("playbook") else "")
    if needing:
        items = "".join(
            f'<li><b>{html.escape(", ".join(item.hosts))}</b> <span class="status {item.status}">{item.status}</span> '
            f"(now serving: {html.escape(item.serving)}): {html.escape(item.cause)}"
            f'<code class="cmd">{html.escape(item.command)}</code></li>' for item in needing)
        attention_html = f'<ol class="attention">{items}</ol>'
    else:
        attention_html = "<p>Nothing: every unit kept speculation.</p>"
    class_rows = "".join(
        f"<tr><td>{html.escape(row_['device_class'])}</td><td>{row_['units']}</td><td>{row_['kept']}</td>"
        f"<td>{row_['reverted']}</td><td>{row_['failed']}</td><td>{_range_text(row_['speedups'])}</td>"
        f"<td>{html.escape(row_['kept_methods'])}</td></tr>"
        for row_ in rows)
    setting_items = "".join(f"<li>{title.capitalize()}: {html.escape('; '.join(values))}</li>"
                            for title, values in settings(records).items() if values)
    groups = []
    for decision, group in grouped(records):
        body = "".join("<tr>" + "".join(_unit_cells(record)) + "</tr>" for record in group)
        groups.append(f'<h3 class="{decision}">{decision.capitalize()} ({len(group)})</h3><table><tr>'
                      + "".join(f"<th>{html.escape(title)}</th>" for title in HTML_COLUMNS) + f"</tr>{body}</table>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>specfleet rollout {html.escape(run_id)}</title>
<style>{CSS}</style>
</head><body>
<h1>specfleet rollout {html.escape(run_id)}</h1>
<p>{totals['units']} units: <b class="kept">{totals['kept']} kept</b>, {totals['reverted']} reverted,
<b class="failed">{totals['failed']} failed</b>.</p>
{run_line}
<section id="attention"><h2>Needs attention: {units_text(sum(len(item.hosts) for item in needing))}</h2>
{attention_html}</section>
<section id="glance"><h2>At a glance</h2>
<table><tr><th>Class</th><th>Units</th><th>Kept</th><th>Reverted</th><th>Failed</th>
<th>Speedup c=1: median (min .. max)</th><th>Kept methods</th></tr>{class_rows}</table>
<ul>{setting_items}</ul>
{_histogram(records, workload, threshold)}
{_strip(rows, workload, threshold)}
{_acceptance_chart(rows, workload)}
</section>
<section id="units"><h2>Units</h2>
{"".join(groups)}
</section>
{f'<section id="since"><pre>{html.escape(since)}</pre></section>' if since else ""}
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


def render(run_dir: Path) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Every report file of a run (name -> text) from its unit records and run info, with what
    changed since the previous run when there is one, and the records; nothing is written."""
    records = runs.load_run(run_dir)
    run_id = run_dir.name
    info = runs.load_run_info(run_dir)
    earlier = runs.previous_run(run_dir)
    since = None
    if earlier is not None:
        try:
            since = compare.to_markdown(compare.compare_runs(runs.load_run(earlier), records, invocation(info)),
                                        earlier.name, run_id, "##")
        except (OSError, *RENDER_ERRORS):
            since = None  # an earlier run this one cannot be read against: its own report stands alone
    try:
        return _outputs(records, run_id, info, since), records
    except RENDER_ERRORS as exc:
        raise unrenderable(run_dir, records) or exc from None


def _outputs(records: list[dict[str, Any]], run_id: str, info: Mapping[str, Any], since: str | None
             ) -> dict[str, str]:
    return {
        "report.json": json.dumps({"run_id": run_id, "run": info, "summary": summary(records), "units": records},
                                  indent=1),
        "report.csv": to_csv(records),
        "report.md": to_markdown(records, run_id, info) + (f"\n{since}" if since else ""),
        "report.html": to_html(records, run_id, info, since),
    }


# What a record of the right top-level shape with insides no run writes makes rendering raise.
RENDER_ERRORS = (ValueError, KeyError, TypeError, AttributeError)


def unrenderable(run_dir: Path, records: list[dict[str, Any]] | None = None) -> loading.FileProblem | None:
    """The first record of the run (``records``, as load_run read them, else read now) that
    cannot be rendered on its own (a value inside it of a type this specfleet never writes), as
    the problem naming its file."""
    found = runs.load_run(run_dir) if records is None else records
    for path, record in zip(runs.record_files(run_dir), found, strict=False):
        try:
            _outputs([record], run_dir.name, {}, None)
        except RENDER_ERRORS as exc:
            return loading.FileProblem(path, f"not a unit record this specfleet writes ({type(exc).__name__}: {exc})")
    return None


# A run's records and reports are the owner's alone (0600 files, 0700 folders, whatever the
# umask): they name every unit, its address and what it serves, on a controller others may share.
RECORD_MODE = 0o600


def write_report(run_dir: Path, into: Path | None = None) -> dict[str, Any]:
    """Write report.{json,csv,md,html} into the run folder (or into ``into``); returns paths and
    the summary."""
    outputs, records = render(run_dir)
    for name, text in outputs.items():
        write_file((into or run_dir) / name, text, mode=RECORD_MODE)
    return {"run_dir": str(run_dir), "files": sorted(outputs), "summary": summary(records),
            "summary_lines": summary_lines(records, run_dir.name)}
