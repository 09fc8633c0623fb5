"""`specfleet lab up|status|down|fault|real-engine|rekey|reboot`.

`specfleet/cli.py` calls `register(subparsers)`; until then (or for a quick run):
    python3 -m specfleet_lab.cli up --units 8 --profile mixed
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from specfleet_lab import lab, real_engine
from specfleet_lab.config import LabConfig
from specfleet_lab.profiles import available_profiles
from specfleet_lab.sh import LabError

try:  # rich is a controller dependency, but the lab must work without it too.
    from rich.console import Console
    from rich.table import Table
except ImportError:  # pragma: no cover - depends on the environment
    Console = None  # type: ignore[assignment,misc]
    Table = None  # type: ignore[assignment,misc]


def _say_factory() -> Callable[[str], None]:
    if Console is not None:
        console = Console(stderr=True)
        return lambda msg: console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {msg}")
    return lambda msg: print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _say_nothing(_msg: str) -> None:
    return None


def cmd_up(args: argparse.Namespace) -> int:
    result = lab.up(LabConfig(), args.profile, args.units, args.link_mbit, say=_say_factory(),
                    gated_models=args.gated_models, stock=args.stock, made_by=args.made_by)
    if args.format == "json":
        print(json.dumps(result, indent=2))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    cfg, say = LabConfig(), _say_factory()
    if args.made_by is not None:
        current = lab.status(cfg)
        refusal = lab.refusal_to_take_down(current, args.made_by)
        if refusal:
            print(f"specfleet lab down: {refusal}", file=sys.stderr)
            return 1
        if current["lab"] == "down":
            if args.format == "json":
                print(json.dumps({"changed": False}, indent=2))
            return 0
        what = (f"what a killed run left of a lab ({len(current['units'])} units, profile {current['profile']})"
                if lab.is_leftover(current) else
                f"the lab {args.made_by} made ({len(current['units'])} units, profile {current['profile']})")
        say(f"taking down {what}")
        say = _say_nothing  # that one line says it
    result = lab.down(cfg, say=say)
    if args.format == "json":
        print(json.dumps(result, indent=2))
    return 1 if result.get("leftovers") else 0


def cmd_status(args: argparse.Namespace) -> int:
    result = lab.status(LabConfig())
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        _print_status(result)
    return 0 if result["lab"] in ("up", "down") else 1


def _print_status(result: dict[str, Any]) -> None:
    if result["lab"] == "down":
        print("lab is down")
        return
    head = (
        f"lab {result['lab']} (EMULATED Jetson and DGX Spark units) profile={result['profile']} "
        f"{'stock units ' if result.get('stock') else ''}"
        f"registry={result['registry']} apt mirror={result.get('apt_mirror')} "
        f"link={result['link_mbit'] or 'unshaped'}"
    )
    columns = ["name", "device_class", "kind", "address", "ssh_port", "login", "state", "engine"]
    if Table is not None and Console is not None:
        console = Console()
        if not console.is_terminal:  # piped: rich would squeeze the table to 80 columns
            console = Console(width=200)
        table = Table(title=head, title_justify="left")
        for column in columns:
            table.add_column(column, no_wrap=True)
        for row in result["units"]:
            table.add_row(*(str(row[c]) for c in columns))
        console.print(table)
        return
    print(head)
    widths = {c: max([len(c)] + [len(str(r[c])) for r in result["units"]]) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in result["units"]:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns))


def cmd_fault(args: argparse.Namespace) -> int:
    switches = None
    if not args.clear:
        try:
            switches = json.loads(args.switches)
        except ValueError as exc:
            raise LabError(f"fault switches must be JSON: {exc}") from exc
    lab.set_faults(LabConfig(), args.unit, switches)
    print(f"{args.unit}: {'fault switches cleared' if switches is None else json.dumps(switches)}")
    return 0


def cmd_rekey(args: argparse.Namespace) -> int:
    lines = lab.rekey(LabConfig(), args.unit)
    print(f"{args.unit}: new SSH host keys (lab/build/host-keys/{args.unit}); `specfleet hostkeys` "
          "now refuses it until its old entry is removed:", file=sys.stderr)
    print("\n".join(lines))
    return 0


def cmd_reboot(args: argparse.Namespace) -> int:
    lab.reboot(LabConfig(), args.unit)
    print(f"{args.unit}: rebooted (its processes stopped and started again); it answers SSH")
    return 0


def cmd_real_engine(args: argparse.Namespace) -> int:
    cfg = LabConfig()
    units = {row["name"]: row["device_class"] for row in lab.status(cfg)["units"]}
    if not units:
        raise LabError("the lab is down: run `specfleet lab up` first")
    if args.off:
        for unit in args.units:
            removed = real_engine.unpin(cfg, unit)
            print(f"{unit}: {'back on the emulator' if removed else 'was not on the real engine'}")
        return 0
    assignments = {}
    for item in args.units:
        unit, _, method = item.partition("=")
        assignments[unit] = method or "draft_model"
    result = real_engine.enable(cfg, assignments, units, say=_say_factory())
    print(json.dumps(result, indent=2) if args.format == "json" else
          "\n".join(f"{unit}: real vLLM-CPU ({assignments[unit]}), {path}" for unit, path in result["pinned"].items()))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `lab` with `up`, `status`, `down` to the specfleet CLI."""
    parser = subparsers.add_parser(
        "lab", help="emulated Jetson fleet on this host (containers, namespaces, registry)"
    )
    sub = parser.add_subparsers(dest="lab_command", required=True)
    profiles = available_profiles(LabConfig().profiles_dir) or ["workshop", "mixed"]

    p_up = sub.add_parser("up", help="start the lab (idempotent)")
    p_up.add_argument("--units", type=int, default=3, help="number of units (default 3)")
    p_up.add_argument("--profile", choices=profiles, default="workshop")
    p_up.add_argument("--link-mbit", type=float, default=None,
                      help="shape every unit link with tc tbf to this rate, both directions")
    p_up.add_argument("--gated-models", action="store_true",
                      help="mark the catalog's gated repos gated in the stand-in model store "
                           "(default: not gated, as if pre-downloaded with a token)")
    p_up.add_argument("--stock", action="store_true",
                      help="stock units, as flashed: login nvidia with a sudo password, no Docker, Docker "
                           "SDK or container toolkit (what the `stock` profile sets)")
    p_up.add_argument("--made-by", default="", metavar="NAME",
                      help="record who brings the lab up (scripts/up does), for `lab down --made-by NAME`")
    p_up.add_argument("--format", choices=["text", "json"], default="text")
    p_up.set_defaults(func=cmd_up)

    p_status = sub.add_parser("status", help="show the lab's units")
    p_status.add_argument("--format", choices=["table", "json"], default="table")
    p_status.set_defaults(func=cmd_status)

    p_fault = sub.add_parser("fault", help="set a unit's emulator fault switches (rehearse a failure)")
    p_fault.add_argument("unit", help="lab unit name, e.g. thor-02")
    which = p_fault.add_mutually_exclusive_group(required=True)
    which.add_argument("switches", nargs="?",
                       help='JSON, e.g. \'{"only_when_speculating": true, "crash_after_requests": 6}\'')
    which.add_argument("--clear", action="store_true", help="remove the unit's fault switches")
    p_fault.set_defaults(func=cmd_fault)

    p_real = sub.add_parser(
        "real-engine",
        help="serve the REAL vLLM (0.32 on CPU, tiny models) on some units instead of the emulator",
    )
    p_real.add_argument("units", nargs="+", metavar="UNIT[=METHOD]",
                        help=f"lab unit, optionally =METHOD ({', '.join(real_engine.METHODS)}; default draft_model)")
    p_real.add_argument("--off", action="store_true", help="put the units back on the emulator")
    p_real.add_argument("--format", choices=["text", "json"], default="text")
    p_real.set_defaults(func=cmd_real_engine)

    p_rekey = sub.add_parser(
        "rekey", help="give one running unit new SSH host keys (as a re-flashed unit has); prints its new "
                      "known_hosts lines")
    p_rekey.add_argument("unit", help="lab unit name, e.g. thor-02")
    p_rekey.set_defaults(func=cmd_rekey)

    p_reboot = sub.add_parser(
        "reboot", help="power-cycle one unit (its containers stop; what serves after the boot is up to the unit)")
    p_reboot.add_argument("unit", help="lab unit name, e.g. thor-01")
    p_reboot.set_defaults(func=cmd_reboot)

    p_down = sub.add_parser("down", help="remove everything the lab made (idempotent)")
    p_down.add_argument("--made-by", default=None, metavar="NAME",
                        help="only a lab NAME brought up (or what a killed run left); another lab is "
                             "named and left up, exit 1")
    p_down.add_argument("--format", choices=["text", "json"], default="text")
    p_down.set_defaults(func=cmd_down)


def run_args(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except LabError as err:
        print(f"lab: {err}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="specfleet")
    subparsers = parser.add_subparsers(dest="command", required=True)
    register(subparsers)
    # Accept both `... lab up` and the shorter `python3 -m specfleet_lab.cli up`.
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "lab":
        argv = ["lab", *argv]
    return run_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
