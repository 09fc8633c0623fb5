"""`specfleet`: the front door for what is not a playbook.

Thin: parses arguments, calls the pure functions, prints tables (rich) or JSON. Exit
codes: 0 done, 1 a unit could not be read, 2 bad input (nothing was planned or touched).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml
from specfleet_unit.jetson_identity import IdentityError, paths_under, read_unit

from specfleet import cache as cache_module
from specfleet import inventory as inventory_module
from specfleet import policy as policy_module
from specfleet import render
from specfleet import report as report_module
from specfleet.catalog import load_catalog
from specfleet.plan import plan_fleet

EXIT_BAD_INPUT = 2


class InputError(Exception):
    """Bad input from the user; the message says what and where."""


def _emit(data: Any, fmt: str, table: Any = None) -> None:
    if fmt == "json" or table is None:
        json.dump(data, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        render.print_table(table)


def cmd_facts(args: argparse.Namespace) -> int:
    try:
        unit = read_unit(paths_under(args.root))
    except IdentityError as exc:
        print(f"specfleet facts: {exc}", file=sys.stderr)
        return 1
    _emit(unit, "json")
    return 0


def _load_policy_file(path: str | None) -> dict:
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"--policy {path}: cannot read ({exc})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"--policy {path}: must be a map of specfleet_* variables")
    unknown = sorted(set(data) - set(policy_module.variable_names()))
    if unknown:
        raise InputError(f"--policy {path}: unknown variables: {', '.join(unknown)}")
    return data


def _load_facts_file(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"--facts {path}: cannot read JSON ({exc})") from exc
    data = data.get("specfleet_unit", data) if isinstance(data, dict) else data
    if not isinstance(data, dict) or "device_class" not in data or "memory_mb" not in data:
        raise InputError(f"--facts {path}: not a facts file (run `specfleet facts --root DIR`)")
    return data


def _group_problems(problems_by_host: dict[str, list[str]]) -> list[str]:
    """One line per distinct problem, naming the hosts it applies to (60 units share
    group_vars, so the same mistake must not print 60 times)."""
    hosts_by_problem: dict[str, list[str]] = defaultdict(list)
    for host, problems in problems_by_host.items():
        for problem in problems:
            hosts_by_problem[problem].append(host)
    lines = []
    for problem, hosts in hosts_by_problem.items():
        shown = ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")
        lines.append(f"{problem} [host: {shown}]")
    return lines


def _gather_inputs(args: argparse.Namespace) -> tuple[dict, dict]:
    """(facts by host, policy overrides by host) from --facts files or an inventory."""
    file_policy = _load_policy_file(args.policy)
    cli_overrides = {**file_policy, **({"specfleet_model": args.model} if args.model else {})}
    units: dict[str, dict] = {}
    overrides: dict[str, dict] = {}
    if args.inventory:
        try:
            variables = inventory_module.host_variables(args.inventory)
        except Exception as exc:  # Ansible raises many types for a bad inventory
            raise InputError(f"-i {args.inventory}: {exc}") from exc
        if not variables:
            raise InputError(f"-i {args.inventory}: no hosts")
        missing = []
        for host, host_vars in variables.items():
            facts, _ = inventory_module.facts_for(host, host_vars, args.facts_dir)
            if facts is None:
                missing.append(host)
                continue
            units[host] = facts
            overrides[host] = {**inventory_module.policy_overrides(host_vars), **cli_overrides}
        if missing:
            raise InputError(
                "no facts for " + ", ".join(missing)
                + f": gather them (playbooks/plan.yml) into --facts-dir, or set "
                f"{inventory_module.EXPECTED_FACTS_VAR} in the inventory"
            )
    for path in args.facts or []:
        facts = _load_facts_file(path)
        host = facts.get("host") or Path(path).stem
        units[host] = facts
        overrides[host] = cli_overrides
    if not units:
        raise InputError("nothing to plan: give --facts FILE or -i INVENTORY")
    return units, overrides


def cmd_plan(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    try:
        units, overrides = _gather_inputs(args)
    except InputError as exc:
        print(f"specfleet plan: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    policies: dict[str, dict] = {}
    problems: dict[str, list[str]] = {}
    for host, host_overrides in overrides.items():
        merged = policy_module.merge(host_overrides)
        found = policy_module.validate(merged, catalog)
        if found:
            problems[host] = found
        policies[host] = merged
    if problems:
        print("specfleet plan: invalid policy, nothing planned:", file=sys.stderr)
        for line in _group_problems(problems):
            print(f"  - {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    plans = plan_fleet(units, policies, catalog)
    _emit(plans, args.format, render.plan_table(plans))
    return 0


def cmd_cache_manifest(args: argparse.Namespace) -> int:
    store = Path(args.store)
    if not (store / args.subdir if args.subdir else store).is_dir():
        print(f"specfleet cache manifest: {store / args.subdir}: not a directory", file=sys.stderr)
        return EXIT_BAD_INPUT
    manifests = cache_module.write_manifests(store, args.subdir)
    summary = [
        {"name": m["name"], "id": m["id"], "files": len(m["files"]),
         "bytes": sum(f["size"] for f in m["files"].values())}
        for m in manifests
    ]
    _emit(summary, args.format, render.manifest_table(summary))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    runs_dir = Path(args.runs_dir)
    run_dir = runs_dir / args.run if args.run else report_module.latest_run(runs_dir)
    if run_dir is None or not (run_dir / "units").is_dir():
        wanted = f"named {args.run}" if args.run else "at all"
        print(f"specfleet report: no run {wanted} in {runs_dir}", file=sys.stderr)
        return EXIT_BAD_INPUT
    written = report_module.write_report(run_dir)
    name = {"json": "report.json", "md": "report.md", "html": "report.html"}[args.format]
    if args.format == "html":
        print(run_dir / name)
    else:
        sys.stdout.write((run_dir / name).read_text())
    if args.format == "md":
        print("\n".join(written["summary_lines"]), file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specfleet",
        description="Speculative decoding for a fleet of Jetson units: facts, plans, the lab.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    facts = commands.add_parser("facts", help="identify a unit from its files (no Ansible)")
    facts.add_argument("--root", default="/", help="directory holding etc/ and proc/ (default /)")
    facts.set_defaults(func=cmd_facts)

    plan = commands.add_parser("plan", help="show what each unit would serve, before touching any")
    plan.add_argument("--facts", action="append", metavar="FILE", help="facts JSON (repeatable)")
    plan.add_argument("-i", "--inventory", help="Ansible inventory to plan every host of")
    plan.add_argument("--facts-dir", help="directory of gathered facts, HOST.json per host")
    plan.add_argument("--model", help="catalog name or Hugging Face repo id (overrides specfleet_model)")
    plan.add_argument("--policy", metavar="FILE", help="YAML map of specfleet_* variables")
    plan.add_argument("--format", choices=("table", "json"), default="table")
    plan.set_defaults(func=cmd_plan)

    cache = commands.add_parser("cache", help="controller-side stores (models, compile caches)")
    cache_commands = cache.add_subparsers(dest="cache_command", required=True)
    manifest = cache_commands.add_parser("manifest", help="write STORE/manifests/<name>.json for each entry")
    manifest.add_argument("store", help="store directory, e.g. files/hf-store")
    manifest.add_argument("--subdir", default="hub", help="directory of entries below STORE (default hub)")
    manifest.add_argument("--format", choices=("table", "json"), default="table")
    manifest.set_defaults(func=cmd_cache_manifest)

    report = commands.add_parser("report", help="write and show a rollout run's report")
    which = report.add_mutually_exclusive_group()
    which.add_argument("--run", help="run id (a folder under --runs-dir)")
    which.add_argument("--latest", action="store_true", help="the newest run (default)")
    report.add_argument("--runs-dir", default="runs", help="folder of runs (default runs/)")
    report.add_argument("--format", choices=("json", "md", "html"), default="md",
                        help="print JSON or Markdown, or the path of the HTML page")
    report.set_defaults(func=cmd_report)

    from specfleet import fanout_run  # `specfleet distribute` (fan-out of a store)

    fanout_run.register(commands)

    try:
        from specfleet.lab import cli as lab_cli
    except ImportError:  # the lab is optional for users who only plan
        lab_cli = None
    if lab_cli is not None and hasattr(lab_cli, "register"):
        lab_cli.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
