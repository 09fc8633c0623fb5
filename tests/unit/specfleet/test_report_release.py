"""Fleet report rendering and the unit's release record (pure functions)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from specfleet import release, report, runs, serving


def bench(throughput: float, tpot: float, acceptance=None) -> dict:
    cell = {"throughput_tok_s": {"median": throughput, "runs": [throughput] * 3, "spread": 0.0},
            "tpot_ms": {"p50": tpot, "p90": tpot, "mean": tpot}, "acceptance": acceptance}
    return {"ok": True, "results": {"code_edit": {"c1": cell, "c8": cell}}}


def judged(record: dict, gain: float, tpot: tuple[float, float], acceptance=None) -> dict:
    """A record as the rollout writes it: the gate's figures (specfleet.gate.decide's shape) for
    the workload it gated, beside the benches."""
    return {**record, "figures": {"code_edit": {
        "throughput_gain_c1": {"value": gain, "lower": gain - 0.05, "upper": gain + 0.05, "prompts": 40},
        "tpot_drop_c1": {"value": round(1 - tpot[1] / tpot[0], 4), "baseline": tpot[0], "candidate": tpot[1]},
        "throughput_change_c8": {"value": gain / 2},
        "acceptance_c1": acceptance}}}


RECORDS = [
    judged({"host": "thor-01", "device_class": "thor", "decision": "kept", "method": "eagle3",
            "num_speculative_tokens": 5, "serving": "speculative",
            "reasons": ["keep speculation: every gated check passed"], "baseline": bench(19.1, 52.0),
            "speculative": bench(25.6, 38.0)}, 0.34, (52.0, 38.0),
           {"rate": 0.5, "mean_length": 3.5, "per_position": [0.8, 0.6, 0.5]}),
    judged({"host": "orinnano-01", "device_class": "orin_nano", "decision": "reverted", "method": "ngram",
            "serving": "baseline", "reasons": ["revert to the baseline: 1 check(s) failed"],
            "baseline": bench(40.0, 24.0), "speculative": bench(34.0, 28.0)}, -0.15, (24.0, 28.0)),
    # A failed unit was not gated: no figures, whatever its benches.
    {"host": "orinnx-01", "device_class": "orin_nx", "decision": "failed", "method": "ngram",
     "serving": "baseline", "reasons": ["Serve the speculative plan: oom_at_start: Free memory on device ..."],
     "baseline": bench(20.0, 49.0), "speculative": None},
]


def test_summary_counts_every_decision():
    assert report.summary(RECORDS)["kept"] == 1
    lines = report.summary_lines(RECORDS, "run-1")
    assert lines[0].startswith("thor-01: KEPT eagle3 x1.34 c=1 (speculative serving)")
    assert lines[-1] == "run run-1: 3 units: 1 kept, 1 reverted, 1 failed"


def test_csv_has_a_row_per_unit_with_speedup():
    rows = list(csv.DictReader(io.StringIO(report.to_csv(RECORDS))))
    assert [r["host"] for r in rows] == ["thor-01", "orinnano-01", "orinnx-01"]
    assert rows[0]["speedup_c1"] == "1.34" and rows[2]["speedup_c1"] == ""
    assert (rows[0]["workload"], rows[0]["tpot_p50_baseline_ms"], rows[0]["tpot_p50_speculative_ms"]) == (
        "code_edit", "52.0", "38.0")
    assert rows[0]["acceptance_rate"] == "0.5" and rows[1]["speedup_c1"] == "0.85"


def test_the_report_shows_the_gates_figures_for_the_workload_it_gated():
    chat = {"host": "u", "decision": "kept",
            "figures": {"chat": {"throughput_gain_c1": {"value": 0.5}, "throughput_change_c8": {"value": -0.01},
                                 "tpot_drop_c1": {"baseline": 10.0, "candidate": 7.0}, "acceptance_c1": None}},
            # Raw benches of another workload are not what was gated, and are not shown.
            "baseline": bench(10.0, 10.0), "speculative": bench(30.0, 3.0)}
    values = report.row(chat)
    assert (values["workload"], values["speedup_c1"], values["speedup_c8"]) == ("chat", 1.5, 0.99)
    assert (values["tpot_p50_baseline_ms"], values["tpot_p50_speculative_ms"]) == (10.0, 7.0)
    assert "Speedup at concurrency 1 (chat)" in report.to_html([chat], "r")


def test_html_is_self_contained_with_plots(tmp_path):
    (tmp_path / "units").mkdir()
    for record in RECORDS:
        (tmp_path / "units" / f"{record['host']}.json").write_text(json.dumps(record))
    written = report.write_report(tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert page.count("<svg") == 3 and "<polyline" in page
    assert not re.search(r"""(src|href)=["']https?://""", page), "the page must load offline"
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["failed"] == 1
    assert written["files"] == ["report.csv", "report.html", "report.json", "report.md"]
    # The owner's alone, whatever the umask (they name every unit and its address).
    assert all((tmp_path / name).stat().st_mode & 0o777 == report.RECORD_MODE for name in written["files"])


def unit_spec(kind: str, speculative_config: dict | None = None, env=None, secrets=()) -> dict:
    made = serving.make(kind, engine="vllm", image="img:1", model="m", port=8000, flags=[],
                        speculative_config=speculative_config)
    return serving.for_unit(made, env or {}, [], secrets)


def test_release_record_flow():
    base = unit_spec("baseline", env={"HF_HUB_OFFLINE": "1"}, secrets=["HF_TOKEN"])
    spec = unit_spec("speculative", {"method": "ngram"}, env={"HF_HUB_OFFLINE": "1"}, secrets=["HF_TOKEN"])
    record = release.known_good(release.parse(None), base)
    assert record["known_good"]["kind"] == "baseline"
    record = release.serving(record, spec)
    assert record["current"]["kind"] == "speculative" and record["known_good"]["kind"] == "baseline"
    record = release.decided(record, spec["spec_id"], {"decision": "kept"})
    assert release.previous_decision(release.parse(json.dumps(record)), spec["spec_id"]) == {"decision": "kept"}
    assert base["spec_id"] != spec["spec_id"]
    assert record["current"]["secret_env_names"] == ["HF_TOKEN"]  # names only, never values


def test_a_known_good_that_is_the_candidate_is_on_trial():
    base = unit_spec("baseline")
    spec = unit_spec("speculative", {"method": "ngram"})
    other = unit_spec("speculative", {"method": "ngram", "num_speculative_tokens": 2})
    fresh = release.baseline_serving(release.parse(None), base, spec["spec_id"])
    assert fresh["known_good"] == fresh["current"] == base
    on_trial = release.baseline_serving(release.known_good(release.parse(None), spec), base, spec["spec_id"])
    assert on_trial["known_good"] == base
    earlier = release.baseline_serving(release.known_good(release.parse(None), other), base, spec["spec_id"])
    assert earlier["known_good"] == other and earlier["current"] == base


def test_a_serving_that_did_not_start_is_forgotten_and_nothing_is_left():
    base = unit_spec("baseline")
    record = release.known_good(release.parse(None), base)
    assert release.forget_known_good(record, "another")["known_good"] == base
    assert release.forget_known_good(record, base["spec_id"])["known_good"] is None
    assert record["known_good"] == base  # the input record is not changed
    nothing = release.serving_nothing(record)
    assert nothing["current"] is None and nothing["known_good"] is None


@pytest.mark.parametrize(("text", "problem"), [
    ("", "not valid JSON"),
    ('{"version": 2, "current": ', "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({**release.empty(), "version": 7}), "record version 7, this specfleet reads versions 1, 2"),
    (json.dumps({**release.empty(), "known_good": "baseline"}), "its known_good is not a JSON object"),
    (json.dumps({**release.empty(), "trial": ["x"]}), "its trial is not a JSON object"),
])
def test_a_record_that_cannot_be_read_is_never_taken_for_an_empty_one(text, problem):
    # It may hold the unit's known-good: taken for an empty record, the next save would lose it.
    with pytest.raises(release.UnreadableRecord, match=re.escape(problem)):
        release.parse(text)


def test_no_record_is_an_empty_one():
    assert release.parse(None) == release.empty()


def test_the_unreadable_record_message_names_the_host_the_file_and_what_to_do():
    problem = "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
    message = release.unreadable_message("agxorin-jp72-01", "/var/lib/specfleet/release.json", problem)
    assert message.startswith(f"agxorin-jp72-01: release record /var/lib/specfleet/release.json cannot be read "
                              f"({problem}); nothing on agxorin-jp72-01 was changed and the file is kept")
    assert "sudo mv /var/lib/specfleet/release.json /var/lib/specfleet/release.json.unreadable" in message
    # The report keeps a failure's message up to console.RECORD_CAUSE_LIMIT characters (the summary callback).
    assert len(message) <= 500 and "\n" not in message


def test_a_trial_marker_names_the_candidate_its_run_and_the_known_good_and_goes_with_the_decision():
    base = unit_spec("baseline")
    spec = unit_spec("speculative", {"method": "ngram", "num_speculative_tokens": 3})
    record = release.on_trial(release.known_good(release.parse(None), base), spec, "r7")
    assert release.interrupted_trial(record) == {
        "spec_id": spec["spec_id"], "kind": "speculative", "method": "ngram", "num_speculative_tokens": 3,
        "run_id": "r7", "known_good_spec_id": base["spec_id"]}
    assert release.trial_sentence(record["trial"]) == (
        f"the speculative serving {spec['spec_id'][:8]} (ngram, k=3) in run r7")
    assert release.parse(json.dumps(record)) == record  # the marker survives the unit's file
    over = release.trial_over(record)
    assert release.interrupted_trial(over) is None and over == release.known_good(release.parse(None), base)
    assert release.trial_over(over) == over  # no marker: the same record, nothing new to write


def test_infrastructure_failures_are_measured_again():
    failed = {"decision": "failed", "failure": {"failure_class": "docker_unavailable"}}
    rejected = {"decision": "failed", "failure": {"failure_class": "spec_config_rejected"}}
    record = {"decisions": {"a": failed, "b": rejected, "c": {"decision": "kept"}}}
    assert release.previous_decision(record, "a") is None
    assert release.previous_decision(record, "b") == rejected
    assert release.previous_decision(record, "c") == {"decision": "kept"}
    assert release.previous_decision(record, "d") is None


def test_unrecorded_failures_say_what_happened_and_what_to_do():
    lost = report.unrecorded_failure("orinnx-01", "run1", "Benchmark the baseline", "Failed to connect", True)
    assert (lost["decision"], lost["serving"], lost["failure"]["failure_class"]) == ("failed", "unknown", "unreachable")
    assert lost["reasons"][0] == "Benchmark the baseline: unreachable: Failed to connect"
    assert "rollout.yml -l orinnx-01" in lost["reasons"][1]
    refused = report.unrecorded_failure("thor-02", "run1", "Pull the image", "manifest unknown", False)
    assert (refused["serving"], refused["failure"]["failure_class"]) == ("unchanged", "task_failed")
    assert "did not reach it" in refused["reasons"][1]
    line = report.summary_lines([refused], "run1")[0]
    assert line.startswith("thor-02: FAILED") and "manifest unknown" in line


def test_the_report_shows_bounds_blocks_drift_and_the_output_check():
    from specfleet import gate, policy, rollout
    from tests.benches import aba
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, diverge_at={"code_edit-p00": 5}), policy.merge({}))
    record = {"host": "thor-01", "decision": "kept", "figures": verdict["figures"],
              "measurement": rollout.measurement(verdict)}
    values = report.row(record)
    gain = verdict["figures"]["code_edit"]["throughput_gain_c1"]
    assert values["speedup_c1_bounds"] == f"{1 + gain['lower']:.2f}..{1 + gain['upper']:.2f}"
    assert (values["blocks"], values["baseline_drift"]) == (3, 0.0)
    checked = "15/16 identical, 16/16 drafting confirmed, 1 numerics tie(s), c=8 0/16 diverged"
    assert values["output_check"] == checked
    text = report.to_markdown([record], "r")
    assert f"({values['speedup_c1_bounds']})" in text and checked in text


def test_the_report_shows_a_canarys_sweep_and_where_a_later_units_k_came_from():
    measured = [{"tokens": 2, "decision": "keep", "gain": 0.64, "gain_lower": 0.6, "gain_upper": 0.7,
                 "acceptance": 0.7, "reason": "keep speculation"},
                {"tokens": 4, "decision": "revert", "gain": 0.91, "gain_lower": 0.85, "gain_upper": 0.97,
                 "acceptance": 0.55, "reason": "chat: throughput at c=1 -9.0%"}]
    canary = {**RECORDS[0], "host": "agxorin-01", "sweep": {"chosen": 2, "measured": measured}}
    later = {**RECORDS[0], "host": "agxorin-02", "sweep": {"canary": "agxorin-01", "chosen": 2}}
    none = {**RECORDS[1], "sweep": {"canary": "agxorin-01", "chosen": None}}
    assert report.row(canary)["draft_sweep"] == "k=2 keep 1.64x, k=4 revert 1.91x: k=2"
    assert report.row(later)["draft_sweep"] == "k=2 from agxorin-01"
    assert report.row(none)["draft_sweep"] == "planned k (none from agxorin-01)"
    assert report.row(RECORDS[0])["draft_sweep"] is None
    text = report.to_markdown([canary, later], "r")
    assert "| k sweep |" in text and "| k=2 keep 1.64x, k=4 revert 1.91x: k=2 |" in text
    # Last in the CSV (columns keep their places); in the table only when a unit swept.
    assert report.to_csv([canary]).splitlines()[0].endswith(",reasons,draft_sweep,batch_table,startup,image")
    assert "k sweep" not in report.to_markdown(RECORDS, "r")


def test_the_report_leads_with_the_units_needing_attention_typed_as_the_run_was(tmp_path):
    """run.json (the callback's) says how the run was started: the next commands follow it."""
    (tmp_path / "units").mkdir()
    for record in RECORDS:
        (tmp_path / "units" / f"{record['host']}.json").write_text(json.dumps(record))
    info = runs.run_info("specfleet.fleet.site", [], 1_700_000_000.0, 1_700_000_000.0 + 3725)
    (tmp_path / runs.RUN_INFO).write_text(json.dumps(info))
    report.write_report(tmp_path)
    text = (tmp_path / "report.md").read_text()
    attention_at, glance_at = text.index("## Needs attention: 2 units"), text.index("## At a glance")
    needing = text[attention_at:glance_at]
    assert needing.index("**orinnx-01** (failed, now serving: baseline)") < needing.index("**orinnano-01** (reverted")
    assert "`ansible-playbook specfleet.fleet.rollout -l orinnx-01 -e specfleet_rollout_remeasure=true`" in needing
    assert "3 units: 1 kept, 1 reverted, 1 failed, in 62 min 05 s." in text
    assert "Run: `ansible-playbook specfleet.fleet.site`, started 2023-11-14T22:13:20Z." in text
    # The unit tables: what needs a look first.
    assert text.index("### Failed (1)") < text.index("### Reverted (1)") < text.index("### Kept (1)")
    page = (tmp_path / "report.html").read_text()
    assert page.index('id="attention"') < page.index("<svg") and page.count("<svg") == 3
    assert "ansible-playbook specfleet.fleet.rollout -l orinnx-01 -e specfleet_rollout_remeasure=true" in page
    assert json.loads((tmp_path / "report.json").read_text())["run"]["duration_s"] == 3725.0


def test_a_run_without_run_info_types_the_readmes_commands():
    assert report.invocation({}) == report.attention.Invocation("playbooks/site.yml", ())
    assert report.invocation({"playbook": 3, "inventory": "x"}) == report.attention.Invocation()


def test_the_charts_keep_their_size_at_200_units_and_draw_the_keep_threshold():
    from specfleet import gate, policy, rollout
    from tests.benches import aba
    verdict = gate.decide(aba(1.5), policy.merge({}))
    record = {"decision": "kept", "figures": verdict["figures"], "measurement": rollout.measurement(verdict)}
    few = [{**record, "host": f"u{n}", "device_class": "thor"} for n in range(3)]
    many = [{**record, "host": f"u{n}", "device_class": ("thor", "agx_orin")[n % 2]} for n in range(200)]
    heights = [[int(h) for h in re.findall(r'<svg [^>]*height="(\d+)"', report.to_html(records, "r"))]
               for records in (few, many)]
    assert len(heights[1]) == 3 and max(heights[1]) <= 320
    assert heights[1][0] == heights[0][0] and heights[1][2] == heights[0][2]  # histogram and acceptance
    assert "keep threshold 1.30" in report.to_html(many, "r")


def test_specfleet_report_renders_without_rewriting_the_runs_files(tmp_path, capsys):
    from specfleet import cli
    run = tmp_path / "runs" / "20261126T000000Z"
    (run / "units").mkdir(parents=True)
    for record in RECORDS:
        (run / "units" / f"{record['host']}.json").write_text(json.dumps(record))
    report.write_report(run)
    before = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in run.iterdir() if path.is_file()}
    runs = ["--runs-dir", str(tmp_path / "runs")]
    for form in ("md", "html", "json", "csv"):
        assert cli.main(["report", *runs, "--latest", "--format", form]) == 0
        out = capsys.readouterr().out
        assert out == (run / f"report.{form}").read_bytes().decode(), form
    assert {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in run.iterdir() if path.is_file()} \
        == before, "rendering rewrote the run's files"
    assert cli.main(["report", *runs, "--run", run.name, "--out", str(tmp_path / "copy")]) == 0
    assert sorted(path.name for path in (tmp_path / "copy").iterdir()) == sorted(
        f"report.{form}" for form in ("csv", "html", "json", "md"))
    assert (tmp_path / "copy" / "report.md").read_text() == (run / "report.md").read_text()
    assert cli.main(["report", *runs, "--run", "nope"]) == cli.EXIT_BAD_INPUT
    assert "no run named nope" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert cli.main(["report", *runs, "--out", str(tmp_path / "file" / "sub")]) == cli.EXIT_BAD_INPUT
    assert "--out" in capsys.readouterr().err
