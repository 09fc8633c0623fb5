"""`specfleet`: the front door for what is not a playbook.

Thin: parses arguments, calls the pure functions, prints tables (rich) or JSON. Exit
codes: 0 done, 1 a unit could not be read, 2 bad input (nothing was planned or touched).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.jetson_identity import (
    IdentityError,
    paths_under,
    read_unit,
)

from specfleet import cache as cache_module
from specfleet import compare, loading, render, runs, variables
from specfleet import inventory as inventory_module
from specfleet import kserve as kserve_module
from specfleet import policy as policy_module
from specfleet import report as report_module
from specfleet.catalog import DataFileError, load_catalog
from specfleet.console import quiet_library_warnings
from specfleet.plan import plan_fleet

# Entry-point group through which another installed package adds `specfleet` commands: a
# callable taking the subparsers (the lab registers `specfleet lab` this way).
COMMAND_ENTRY_POINTS = "specfleet.commands"

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
        data = loading.load_yaml(Path(path), top=(dict, type(None)))
    except loading.FileProblem as exc:
        raise InputError(f"--policy {exc}; a policy is a map of specfleet_* variables") from None
    if data is None:
        return {}
    names = policy_module.variable_names()
    unknown = [f"{name}{variables.closest(str(name), names)}" for name in sorted(set(map(str, data)) - set(names))]
    if unknown:
        raise InputError(f"--policy {path}: not policy variables: {', '.join(unknown)}")
    return data


def _load_facts_file(path: str) -> dict:
    try:
        return inventory_module.read_facts_file(Path(path))
    except inventory_module.FactsFileError as exc:
        raise InputError(f"--facts {exc}") from exc


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


def _gather_inputs(args: argparse.Namespace) -> tuple[dict, dict, dict[str, list[str]]]:
    """(facts by host, policy overrides by host, problems of the facts an inventory declares
    by host) from --facts files or an inventory."""
    file_policy = _load_policy_file(args.policy)
    cli_overrides = {**file_policy, **({"specfleet_model": args.model} if args.model else {})}
    units: dict[str, dict] = {}
    overrides: dict[str, dict] = {}
    declared_problems: dict[str, list[str]] = {}
    if args.inventory:
        try:
            host_variables = inventory_module.host_variables(args.inventory)
        except Exception as exc:  # Ansible raises many types for a bad inventory
            raise InputError(f"-i {args.inventory}: {exc}") from exc
        if not host_variables:
            raise InputError(f"-i {args.inventory}: no hosts")
        listed_twice = variables.same_unit_problems({host: variables.destination_of(host, host_vars)
                                                     for host, host_vars in host_variables.items()})
        if listed_twice:
            raise InputError(f"-i {args.inventory}: " + "; ".join(listed_twice))
        missing = []
        known = variables.known_names(policy_module.variable_names())
        for host, host_vars in host_variables.items():
            # Names first: a misspelt variable or a host name that cannot name a file is an
            # error before anything is planned (as the playbooks' preflight says it).
            named = [problem for problem in [variables.host_name_problem(host)] if problem]
            named += variables.unknown_problems(host_vars, known)
            if named:
                declared_problems[host] = named
            try:
                facts, _ = inventory_module.facts_for(host, host_vars, args.facts_dir)
            except inventory_module.FactsFileError as exc:
                raise InputError(f"--facts-dir {exc}") from exc
            # A malformed declaration is reported with the policy problems (one exit 2 for all),
            # even when gathered facts would be planned from instead.
            if inventory_module.EXPECTED_FACTS_VAR in host_vars:
                found = policy_module.expected_facts_problems(host_vars[inventory_module.EXPECTED_FACTS_VAR])
                if found:
                    declared_problems[host] = declared_problems.get(host, []) + found
            if facts is None and host not in declared_problems:
                missing.append(host)
                continue
            units[host] = facts or {}
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
        problem = variables.host_name_problem(host)
        if problem:
            raise InputError(f"--facts {path}: {problem}")
        units[host] = facts
        overrides[host] = cli_overrides
    if not units:
        raise InputError("nothing to plan: give --facts FILE or -i INVENTORY")
    return units, overrides, declared_problems


def _host_policies(
    units: dict[str, dict], overrides: dict[str, dict], declared_problems: dict[str, list[str]], catalog
) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """Each planned host's merged policy, and every problem with it, by host."""
    policies: dict[str, dict] = {}
    problems: dict[str, list[str]] = {}
    for host in units:
        merged = policy_module.merge(overrides[host])
        found = policy_module.validate(merged, catalog) + declared_problems.get(host, [])
        if host not in declared_problems:
            found += policy_module.class_conflicts(merged, units[host].get("device_class"))
        if found:
            problems[host] = found
        policies[host] = merged
    return policies, problems


def cmd_plan(args: argparse.Namespace) -> int:
    catalog = load_catalog()
    try:
        units, overrides, declared_problems = _gather_inputs(args)
    except InputError as exc:
        print(f"specfleet plan: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    policies, problems = _host_policies(units, overrides, declared_problems, catalog)
    if problems:
        print("specfleet plan: invalid policy, nothing planned:", file=sys.stderr)
        for line in _group_problems(problems):
            print(f"  - {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    plans = plan_fleet(units, policies, catalog)
    _emit(plans, args.format, render.plan_table(plans))
    details = render.trtllm_details(plans) if args.format == "table" else ""
    if details:  # TensorRT-LLM plans only: their options YAML is part of what they serve
        print(details)
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


def run_id_problem(option: str, run: str) -> str | None:
    """A run id is a folder's name under the runs folder, never a path: ``--write`` writes into
    the folder it names."""
    if variables.is_file_name(run):
        return None
    return (f"specfleet report: {option} {variables.shown(run)}: not a run id (a folder name under --runs-dir: "
            "letters, digits, '.', '_' or '-'); for runs elsewhere give --runs-dir")


def cmd_report(args: argparse.Namespace) -> int:
    runs_dir = Path(args.runs_dir) if args.runs_dir else runs.runs_root()
    named = [("--compare", run) for run in args.compare or []] + ([("--run", args.run)] if args.run else [])
    problems = [problem for option, run in named if (problem := run_id_problem(option, run))]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.compare:
        if args.out or args.write or args.format != "md":
            print("specfleet report --compare: prints Markdown to stdout; --format, --out and --write do not apply",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        dirs = [runs_dir / run for run in args.compare]
        missing = [run for run, path in zip(args.compare, dirs, strict=True) if not (path / "units").is_dir()]
        if missing:
            print(f"specfleet report --compare: no run named {', '.join(missing)} in {runs_dir}", file=sys.stderr)
            return EXIT_BAD_INPUT
        try:
            found = compare.compare_runs(runs.load_run(dirs[0]), runs.load_run(dirs[1]),
                                         report_module.invocation(runs.load_run_info(dirs[1])))
        except loading.FileProblem as exc:
            print(f"specfleet report --compare: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except report_module.RENDER_ERRORS as exc:
            culprit = report_module.unrenderable(dirs[0]) or report_module.unrenderable(dirs[1])
            print(f"specfleet report --compare: {culprit or f'a unit record could not be read: {exc}'}",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        sys.stdout.write(compare.to_markdown(found, dirs[0].name, dirs[1].name))
        return 0
    run_dir = runs_dir / args.run if args.run else runs.latest_run(runs_dir)
    if run_dir is None or not (run_dir / "units").is_dir():
        wanted = f"named {args.run}" if args.run else "at all"
        print(f"specfleet report: no run {wanted} in {runs_dir}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if args.out or args.write:
            into = Path(args.out) if args.out else run_dir
            try:
                into.mkdir(parents=True, exist_ok=True)
                written = report_module.write_report(run_dir, into)
            except OSError as exc:
                print(f"specfleet report: --out {into}: cannot write there: {exc.strerror or exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
            print("\n".join(f"{into / name}" for name in written["files"]))
            return 0
        # Rendered, not written: the run's own files stay as the playbook left them.
        outputs, records = report_module.render(run_dir)
    except loading.FileProblem as exc:
        print(f"specfleet report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(outputs[f"report.{args.format}"])
    if args.format == "md":
        print("\n".join(report_module.summary_lines(records, run_dir.name)), file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Read every unit with one `ansible` ad hoc run (specfleet/status.py), one row each."""
    from specfleet import status as status_module

    if args.timeout <= 0:
        print("specfleet status: --timeout must be more than 0 seconds", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        addresses = status_module.inventory_hosts(args.inventory, args.limit)
    except Exception as exc:  # Ansible raises many types for a bad inventory
        print(f"specfleet status: -i {args.inventory}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not addresses:
        wanted = f" matching --limit {args.limit}" if args.limit else ""
        print(f"specfleet status: -i {args.inventory}: no hosts{wanted}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # No live progress bar: Ansible answers for every unit at once, and may prompt on the
    # terminal for a become or vault password, which a redrawn bar would overwrite. A person
    # at a terminal gets one line saying what is being waited for.
    if args.format != "json" and sys.stderr.isatty():
        print(
            f"specfleet status: reading {len(addresses)} unit(s) with ansible (connect timeout {args.timeout:g} s)",
            file=sys.stderr,
        )
    try:
        fleet = status_module.read_fleet(args.inventory, addresses, args.limit, args.timeout, args.verbose)
    except status_module.AnsibleRunError as exc:
        print(f"specfleet status: -i {args.inventory}: ansible reported no unit: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.verbose and fleet.chatter.strip():  # what -v asked Ansible for: connections, become
        print(fleet.chatter.rstrip(), file=sys.stderr)
    if fleet.stderr.strip():  # Ansible's warnings (a --limit part matching nothing, ...)
        print(fleet.stderr.rstrip(), file=sys.stderr)
    rows = [status_module.unit_status(read) for read in fleet.reads]
    _emit(rows, args.format, status_module.status_table(rows))
    return status_module.exit_code(rows)


def _storage_roles(pairs: list[str] | None, what: str) -> dict[str, str]:
    """ROLE=VALUE pairs (repeatable options) as a map; a bad pair is bad input."""
    found: dict[str, str] = {}
    for pair in pairs or []:
        role, sep, value = pair.partition("=")
        if not sep or not role or not value:
            raise InputError(f"{what} {pair!r}: expected ROLE=VALUE, ROLE one of {', '.join(kserve_module.ROLES)}")
        if role in found:
            raise InputError(f"{what}: {role} given twice")
        found[role] = value
    return found


def _kserve_options(args: argparse.Namespace, host: str, hosts: int) -> kserve_module.Options:
    uris = _storage_roles(args.storage_uris, "--storage-uris")
    mounts = _storage_roles(args.mount_path, "--mount-path")
    if set(mounts) - set(uris):
        raise InputError(f"--mount-path {', '.join(sorted(set(mounts) - set(uris)))}: no --storage-uris entry")
    if args.name and hosts > 1:
        raise InputError("--name names one InferenceService: give it with one --host")
    entries = {
        role: kserve_module.StorageEntry(uri, mounts.get(role, kserve_module.default_mount_path(role)))
        for role, uri in uris.items()
    }
    return kserve_module.Options(
        name=args.name or kserve_module.default_name(host), namespace=args.namespace,
        storage_uri=args.storage_uri, storage_uris=entries, pvc=args.pvc,
        target_dir=args.target_dir, draft_dir=args.draft_dir, runtime_format=args.runtime_format,
        runtime=args.runtime, image=args.image, gpus=args.gpus, cpu=args.cpu, memory=args.memory,
        service_account=args.service_account, progress_deadline=args.progress_deadline,
    )


def cmd_kserve_render(args: argparse.Namespace) -> int:
    """Plan as `specfleet plan` does, then write each host's InferenceService and rollback
    manifests; nothing is written unless every manifest validates."""
    catalog = load_catalog()
    try:
        units, overrides, declared_problems = _gather_inputs(args)
        if args.host:
            unknown = [h for h in args.host if h not in units]
            if unknown:
                raise InputError(f"--host {', '.join(unknown)}: not among the planned hosts ({', '.join(units)})")
            units = {h: units[h] for h in args.host}
    except InputError as exc:
        print(f"specfleet kserve render: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    policies, problems = _host_policies(units, overrides, declared_problems, catalog)
    rendered: list[tuple[str, dict, dict, list[str]]] = []
    if not problems:
        for plan in plan_fleet(units, policies, catalog):
            try:
                options = _kserve_options(args, plan["host"], len(units))
                rendered.append((plan["host"], *kserve_module.render_pair(plan, options)))
            except InputError as exc:
                problems[plan["host"]] = [str(exc)]
            except kserve_module.KServeError as exc:
                problems[plan["host"]] = exc.reasons
    if problems:
        print("specfleet kserve render: nothing written:", file=sys.stderr)
        for line in _group_problems(problems):
            print(f"  - {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "yaml" if args.format == "yaml" else "json"
    written = []
    for host, manifest, rollback, notes in rendered:
        files = {}
        for kind, data in (("inferenceservice", manifest), ("rollback", rollback)):
            path = variables.unit_file(out, host, f"-{kind}.{suffix}")  # checked names: never outside `out`
            text = kserve_module.to_yaml(data) if suffix == "yaml" else json.dumps(data, indent=2) + "\n"
            path.write_text(text)
            files[kind] = str(path)
        for note in notes:
            print(f"specfleet kserve render: {host}: {note}", file=sys.stderr)
        written.append({"host": host, "name": manifest["metadata"]["name"], **files})
    _emit(written, "json")
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

    report = commands.add_parser("report", help="render a rollout run's report (stdout, or files with --out)")
    which = report.add_mutually_exclusive_group()
    which.add_argument("--run", help="run id (a folder under --runs-dir)")
    which.add_argument("--latest", action="store_true", help="the newest run (default)")
    which.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"),
                       help="per unit, what changed from RUN_A to RUN_B and which figures moved beyond their noise")
    report.add_argument("--runs-dir", default=None,
                        help="folder of runs (default $SPECFLEET_RUNS_DIR, else runs/ here)")
    report.add_argument("--format", choices=("md", "html", "json", "csv"), default="md",
                        help="what to print on stdout (default md)")
    written = report.add_mutually_exclusive_group()
    written.add_argument("--out", metavar="DIR", default=None,
                         help="write report.{md,html,json,csv} into DIR instead of printing")
    written.add_argument("--write", action="store_true",
                         help="write them into the run's own folder again (as the playbook did)")
    report.set_defaults(func=cmd_report)

    status = commands.add_parser(
        "status",
        help="what each unit serves, its known-good serving and last bench (read over SSH)",
        description="Read every unit of an inventory over SSH, in parallel: its serving container, its "
        "release record (current and known-good serving) and the last bench decision kept there. "
        "Exit code 0 when every unit answered, 1 when some unit was unreachable, 2 for a bad inventory.",
    )
    status.add_argument("-i", "--inventory", required=True, help="Ansible inventory of the units")
    status.add_argument("-l", "--limit", metavar="PATTERN", help="Ansible host pattern, as ansible-playbook --limit")
    status.add_argument("--format", choices=("table", "json"), default="table")
    status.add_argument(
        "--timeout", type=float, default=10.0, metavar="S", help="seconds per unit to connect and read it (default 10)"
    )
    status.add_argument("-v", "--verbose", action="count", default=0,
                        help="pass -v (repeatable) to ansible and print what it says on stderr: connections, become")
    status.set_defaults(func=cmd_status)

    kserve = commands.add_parser("kserve", help="KServe InferenceService manifests from plans")
    kserve_commands = kserve.add_subparsers(dest="kserve_command", required=True)
    render_isvc = kserve_commands.add_parser(
        "render",
        help="write <host>-inferenceservice and <host>-rollback manifests",
        description="Plan each host as `specfleet plan` does and write an InferenceService with the plan's "
        "--speculative-config (paths rewritten to where KServe mounts the artifacts) and a rollback "
        "manifest without it. Exit 2, writing nothing, when any manifest would be malformed.",
    )
    render_isvc.add_argument("--facts", action="append", metavar="FILE", help="facts JSON (repeatable)")
    render_isvc.add_argument("-i", "--inventory", help="Ansible inventory to plan every host of")
    render_isvc.add_argument("--facts-dir", help="directory of gathered facts, HOST.json per host")
    render_isvc.add_argument("--model", help="catalog name or Hugging Face repo id (overrides specfleet_model)")
    render_isvc.add_argument("--policy", metavar="FILE", help="YAML map of specfleet_* variables")
    render_isvc.add_argument("--host", action="append", metavar="H", help="render only this host (repeatable)")
    render_isvc.add_argument("--storage-uri", metavar="URI",
                             help="one storageUri mounted at /mnt/models (n-gram, or an OCI modelcar with both)")
    render_isvc.add_argument("--storage-uris", action="append", metavar="ROLE=URI",
                             help="storageUris entry, ROLE target or draft (KServe >= 0.16; repeatable)")
    render_isvc.add_argument("--mount-path", action="append", metavar="ROLE=PATH",
                             help="mountPath of a --storage-uris entry (default /mnt/models/ROLE)")
    render_isvc.add_argument("--pvc", metavar="NAME", help="PVC holding the artifacts, mounted at /mnt/models")
    render_isvc.add_argument("--target-dir", help="target's directory under /mnt/models (PVC default: repo name)")
    render_isvc.add_argument("--draft-dir", help="draft's directory under /mnt/models (default: its repo name)")
    render_isvc.add_argument("--name", help="InferenceService name (one host only; default from the host name)")
    render_isvc.add_argument("--namespace", help="metadata.namespace")
    render_isvc.add_argument("--runtime-format", choices=sorted(kserve_module.RUNTIMES), default="vllm",
                             help="modelFormat and how the model path is passed (default vllm)")
    render_isvc.add_argument("--runtime", help="ServingRuntime name (spec.predictor.model.runtime)")
    render_isvc.add_argument("--image", help="container image overriding the runtime's (e.g. a Jetson vLLM image)")
    render_isvc.add_argument("--gpus", type=int, default=1, help="nvidia.com/gpu limit (default 1)")
    render_isvc.add_argument("--cpu", help="cpu request and limit")
    render_isvc.add_argument("--memory", help="memory request and limit (default: a request from the plan)")
    render_isvc.add_argument("--service-account", help="predictor service account (credentials for storage)")
    render_isvc.add_argument("--progress-deadline", metavar="DURATION",
                             help="Knative progress deadline, e.g. 10m (a draft artifact slows cold start)")
    render_isvc.add_argument("--out", required=True, metavar="DIR", help="directory to write the manifests to")
    render_isvc.add_argument("--format", choices=("yaml", "json"), default="yaml", help="file format")
    render_isvc.set_defaults(func=cmd_kserve_render)

    # `specfleet distribute`, `specfleet hostkeys`, `specfleet store` (fill the controller's stores)
    from specfleet import fanout_run, hostkeys, store

    fanout_run.register(commands)
    hostkeys.register(commands)
    store.register(commands)

    # Commands other packages add (the lab's `specfleet lab`, lab/pyproject.toml): the product
    # does not ship the lab, and runs without it.
    for entry in entry_points(group=COMMAND_ENTRY_POINTS):
        entry.load()(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    quiet_library_warnings(os.environ)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except DataFileError as exc:  # a shipped data file edited badly: say where, not a traceback
        print(f"specfleet {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
