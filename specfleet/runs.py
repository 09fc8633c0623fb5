"""A rollout run's folder and the unit records in it: where they are, how they are read, and
the figures every reader takes from a record (the report, the comparison of two runs, status).

A run folder holds ``units/<host>.json``, one record per unit written by the rollout (one
writer per file), and ``run.json`` (how the run was started, written by the summary callback).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specfleet import loading, variables

DECISIONS = ("kept", "reverted", "failed")
RUNS_ENV = "SPECFLEET_RUNS_DIR"
RUN_INFO = "run.json"  # how the run was started and how long it took (the summary callback writes it)


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


# The top of a unit's record as rollout.unit_record and failed_record write it, what every
# reader of a run takes for granted; each key but host may be absent.
NULL = type(None)
RECORD_SHAPE: loading.Shape = {
    "host": str, "decision": (str, NULL), "reasons": (list, NULL), "plan_reasons": (list, NULL),
    "measurement": (dict, NULL), "figures": (dict, NULL), "baseline": (dict, NULL), "speculative": (dict, NULL),
    "sweep": (dict, NULL), "startup": (dict, NULL), "failure": (dict, NULL), "batch_table": (dict, NULL),
    "serving": (str, NULL), "model": (str, NULL), "image": (str, NULL), "method": (str, NULL),
    "device_class": (str, NULL), "run_id": (str, NULL), "num_speculative_tokens": (int, NULL),
}


def load_run(run_dir: Path) -> list[dict[str, Any]]:
    """The run's unit records, each checked (RECORD_SHAPE): a corrupt one is a
    loading.FileProblem naming it."""
    return [loading.load_json(path, shape=RECORD_SHAPE) for path in record_files(run_dir)]


def record_files(run_dir: Path) -> list[Path]:
    """The run's unit records' files, in the order load_run reads them."""
    units = run_dir / "units"
    return sorted(units.glob("*.json")) if units.is_dir() else []


def run_info(playbook: str, inventory: Sequence[str], started: float, finished: float) -> dict[str, Any]:
    """The run's RUN_INFO: the playbook and ``-i`` as given, and its wall-clock span."""
    stamp = "%Y-%m-%dT%H:%M:%SZ"
    return {"playbook": playbook, "inventory": list(inventory), "started": time.strftime(stamp, time.gmtime(started)),
            "finished": time.strftime(stamp, time.gmtime(finished)), "duration_s": round(finished - started, 1)}


def load_run_info(run_dir: Path) -> dict[str, Any]:
    """A run's RUN_INFO, or {} (a run from before it was written, or a file that does not parse:
    the report then names no duration and types the next commands as the README does)."""
    try:
        return loading.load_json(run_dir / RUN_INFO, limit=loading.SMALL_FILE)
    except loading.FileProblem:
        return {}


def run_dirs(runs_dir: Path) -> list[Path]:
    """The runs of a runs folder that have unit records, oldest first (run ids sort by time)."""
    return sorted(path for path in runs_dir.iterdir() if (path / "units").is_dir()) if runs_dir.is_dir() else []


def latest_run(runs_dir: Path) -> Path | None:
    runs = run_dirs(runs_dir)
    return runs[-1] if runs else None


def previous_run(run_dir: Path) -> Path | None:
    """The run before this one in its runs folder."""
    earlier = [path for path in run_dirs(run_dir.parent) if path.name < run_dir.name]
    return earlier[-1] if earlier else None


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


def bench_context(record: Mapping, key: str) -> Any:
    """``key`` of the context the unit's benchmarks recorded (hardware, power, runtime, ...),
    from its baseline bench, else its speculative one; None when neither has it."""
    for side in ("baseline", "speculative"):
        found = ((record.get(side) or {}).get("context") or {}).get(key)
        if found:
            return found
    return None
