"""spec_bench (module main()) against real vLLM-emulator processes on 127.0.0.1.

Baseline vs EAGLE-3 k=5 on an emulated Thor (FP4 Llama-3.1-8B stand-in), time scale 0.1,
noise 0, measured in blocks (baseline, speculative, baseline) as the rollout does: acceptance
must equal the emulator's own /metrics deltas, the outputs must agree token by token, the
gate must keep, a head that drafts poorly on chat (the emulator's draft_acceptance switch) must
be reverted for chat alone, and a server that crashes mid-run must give ok:false with a reason
within the deadline.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from specfleet import policy
from specfleet.gate import decide
from tests.conftest import load_module
from tests.unit.emulator.conftest import (
    EAGLE3_K5,
    TARGET_FP4,
    THOR_GPU,
    Launcher,
    build_env,
    parse_metrics,
    stand_in_configs,
    write_stand_in,
)

spec_bench = load_module("spec_bench")
# Twice the lab's scale, so that a run is long against the stalls of a shared 2-core host.
SCALE = "0.1"
SERVE = ["--max-model-len", "4096"]
# 8 requests at c=1 (32 at c=8: at least four times the concurrency), one run per block.
QUICK = {"warmups": 1, "repetitions": 1, "requests": 8, "max_tokens": 96, "request_timeout": 20, "deadline": 150}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("specbench-lab")
    for repo, config in stand_in_configs().items():
        write_stand_in(root / "hf" / "hub", repo, config)
    (root / "gpu.json").write_text(json.dumps(THOR_GPU))
    return root


def env_for(lab: Path, work: Path) -> dict[str, str]:
    work.mkdir(parents=True, exist_ok=True)
    return {**build_env(lab, work), "SPECFLEET_EMULATOR_TIME_SCALE": SCALE}


# A head that drafts poorly on chat: per position 0.16 / 0.02 / 0.01 where the calibrated head
# (vllm#20780's MT-Bench curve) accepts 0.75 / 0.58 / 0.46.
WEAK_CHAT = {"draft_acceptance": {"chat": [0.16, 0.02, 0.01]}}


@pytest.fixture(scope="module")
def servers(lab):
    launcher = Launcher(env_for(lab, lab / "shared"))
    weak_env = env_for(lab, lab / "weak-chat")
    Path(weak_env["SPECFLEET_EMULATOR_FAULTS_FILE"]).write_text(json.dumps(WEAK_CHAT))
    weak_launcher = Launcher(weak_env)
    baseline = launcher(TARGET_FP4, SERVE, ready=False)
    speculative = launcher(TARGET_FP4, [*SERVE, "--speculative-config", EAGLE3_K5], ready=False)
    weak_chat = weak_launcher(TARGET_FP4, [*SERVE, "--speculative-config", EAGLE3_K5], ready=False)
    try:
        for server in (baseline, speculative, weak_chat):
            server.wait_ready()
        yield {"baseline": baseline, "speculative": speculative, "weak_chat": weak_chat}
    finally:
        launcher.stop_all()
        weak_launcher.stop_all()


def run(capsys, args: dict) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        spec_bench.main()
    return json.loads(capsys.readouterr().out)


def url(server) -> str:
    return f"http://127.0.0.1:{server.port}"


def measure(server, side: str) -> dict:
    """One block: every workload at concurrency [1, 8] (module main())."""
    out = io.StringIO()  # capsys is function-scoped; capture the module's JSON by hand
    args = {"url": url(server), "label": side, "context": {"hardware": {"device_class": "thor"}}, **QUICK}
    with contextlib.redirect_stdout(out), patch_module_args(args), pytest.raises(SystemExit):
        spec_bench.main()
    return {"side": side, "bench": json.loads(out.getvalue())}


@pytest.fixture(scope="module")
def blocks(servers):
    """Baseline, speculative, baseline."""
    return [measure(servers[side], side) for side in ("baseline", "speculative", "baseline")]


@pytest.fixture(scope="module")
def weak_chat_blocks(servers, blocks):
    """The last baseline block above, the head that drafts poorly on chat, the baseline again."""
    return [blocks[-1], measure(servers["weak_chat"], "speculative"), measure(servers["baseline"], "baseline")]


def test_baseline_and_speculative_results(blocks):
    base, cand = blocks[0]["bench"]["bench"], blocks[1]["bench"]["bench"]
    assert blocks[0]["bench"]["changed"] is False
    for bench in (base, cand):
        assert bench["ok"] is True and bench["failure"] is None
        assert set(bench["results"]) == {"code_edit", "chat"}
        for cells in bench["results"].values():
            assert set(cells) == {"c1", "c8"}
            for level, cell in cells.items():
                requests = 8 if level == "c1" else 32
                assert cell["failed_requests"] == 0 and cell["requests"] == requests
                assert len(cell["runs"]) == 1 and len(cell["runs"][0]["requests"]) == requests
                assert cell["output_tokens"] == requests * 96  # emulated answers run past 96 tokens
                for figure in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                    assert set(cell[figure]) == {"p50", "p90", "mean"} and cell[figure]["p50"] > 0
                assert cell["bursts"]["bursty_requests_left_out"] == 0
        assert set(bench["outputs"]) == {"code_edit", "chat"}
        assert all(len(answers) == 8 for answers in bench["outputs"].values())
    assert base["results"]["code_edit"]["c1"]["acceptance"] is None  # no counters: null, not zero
    accepted = cand["results"]["code_edit"]["c1"]["acceptance"]
    assert accepted["drafts"] > 0 and len(accepted["per_position"]) == 5
    # EAGLE-3 on code edits (emulator profile 0.50/0.40/0.33/0.27/0.22) vs on chat (MT-Bench's
    # 0.75/0.58/0.46/0.30/0.23).
    assert accepted["per_position"][0] == pytest.approx(0.5, abs=0.1)
    assert cand["results"]["chat"]["c1"]["acceptance"]["per_position"][0] == pytest.approx(0.75, abs=0.1)
    context = cand["context"]
    assert list(context)[:5] == ["hardware", "model", "runtime", "request_parameters", "workload"]
    assert context["hardware"] == {"device_class": "thor"}
    assert context["model"]["served_model_name"] == TARGET_FP4
    assert context["runtime"]["server_version"] == "0.20.2"
    assert context["request_parameters"]["temperature"] == 0.0 and context["request_parameters"]["seed"] == 42
    assert context["workload"]["names"] == ["code_edit", "chat"] and cand["label"] == "speculative"
    assert context["workload"]["prompt_set_version"] == 2


def test_gate_keeps_eagle3_and_reverts_a_head_that_drafts_poorly_on_chat(blocks, weak_chat_blocks):
    """The emulator's model of FP4 + EAGLE-3 k=5 on Thor (the head's published acceptance): code
    edits ~1.7x and chat ~2x faster, so the default gate keeps. The same server with a head that
    drafts poorly on chat (~1.2 tokens a step, five drafted positions paid for): code edits gain
    as before, chat regresses clearly, and the default gate reverts on chat alone."""
    verdict = decide(blocks, policy.merge({}))
    assert verdict["decision"] == "keep", verdict["reasons"]
    assert {c["check"] for c in verdict["checks"] if c["verdict"] == "pass"} >= {"throughput_c1", "tpot_c1",
                                                                                  "throughput_c8", "output_check"}
    gain = verdict["figures"]["code_edit"]["throughput_gain_c1"]
    assert 0.4 < gain["lower"] <= gain["value"] < 0.9
    assert verdict["figures"]["chat"]["throughput_gain_c1"]["lower"] > 0.5
    found = verdict["output_check"]
    assert found["compared"] == 16 and not found["diverged"] and found["self"] == {"baseline": [], "speculative": []}
    assert found["drafting"] == {"confirmed": 16, "not_drafted": 0, "unknown": 0}  # checked with speculation on
    weak = decide(weak_chat_blocks, policy.merge({}))
    assert weak["decision"] == "revert", weak["reasons"]
    failed = [(check["workload"], check["check"]) for check in weak["checks"] if check["verdict"] == "fail"]
    assert ("chat", "throughput_c1") in failed and {workload for workload, _ in failed} == {"chat"}, failed
    assert weak["figures"]["chat"]["throughput_gain_c1"]["upper"] < -0.03
    assert weak["figures"]["code_edit"]["throughput_gain_c1"]["lower"] > 0.4


def test_acceptance_equals_emulator_metric_deltas(capsys, servers):
    server = servers["speculative"]
    keys = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total")

    def totals() -> dict[str, float]:
        samples = parse_metrics(server.metrics())
        out = {key: sum(v for k, v in samples.items() if k.startswith(key + "{")) for key in keys}
        for position in range(5):
            out[f"pos{position}"] = sum(
                v for k, v in samples.items()
                if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total{") and f'position="{position}"' in k
            )
        return out

    before = totals()
    # No output check: its requests come after the last scrape and are in no cell.
    result = run(capsys, {"url": url(server), "workloads": ["code_edit"], "concurrency": [1, 8], "warmups": 0,
                          "repetitions": 2, "requests": 8, "max_tokens": 64, "output_check": 0})
    after = totals()
    cells = result["bench"]["results"]["code_edit"]
    drafts = sum(cell["acceptance"]["drafts"] for cell in cells.values())
    draft_tokens = sum(cell["acceptance"]["draft_tokens"] for cell in cells.values())
    accepted = sum(cell["acceptance"]["accepted"] for cell in cells.values())
    assert drafts == after[keys[0]] - before[keys[0]]
    assert draft_tokens == after[keys[1]] - before[keys[1]]
    assert accepted == after[keys[2]] - before[keys[2]]
    cell = cells["c1"]
    assert sum(run["spec_decode"]["drafts"] for run in cell["runs"]) == cell["acceptance"]["drafts"]
    per_pos_total = [after[f"pos{i}"] - before[f"pos{i}"] for i in range(5)]
    combined = [sum(c["acceptance"]["per_position"][i] * c["acceptance"]["drafts"] for c in cells.values())
                for i in range(5)]
    assert combined == pytest.approx(per_pos_total, abs=0.01)
    figures = cell["acceptance"]
    assert figures["rate"] == pytest.approx(figures["accepted"] / figures["draft_tokens"], abs=1e-5)


def test_check_mode_only_probes(capsys, servers):
    server = servers["baseline"]
    generated = parse_metrics(server.metrics())
    result = run(capsys, {"url": url(server), "_ansible_check_mode": True})
    assert result["changed"] is False and result["bench"] is None
    assert result["probe"]["health"] == 200 and result["probe"]["models"] == [TARGET_FP4]
    after = parse_metrics(server.metrics())
    key = next(k for k in generated if k.startswith("vllm:generation_tokens_total"))
    assert after[key] == generated[key]


def test_unreachable_endpoint_fails_the_task(capsys):
    result = run(capsys, {"url": "http://127.0.0.1:9", "request_timeout": 2})
    assert result["failed"] is True
    assert "unreachable" in result["msg"] and "127.0.0.1:9" in result["msg"]


def test_unknown_model_fails_the_task(capsys, servers):
    result = run(capsys, {"url": url(servers["baseline"]), "model": "no/such-model"})
    assert result["failed"] is True and "does not serve 'no/such-model'" in result["msg"]


def test_server_crash_mid_run_gives_ok_false_in_bounded_time(capsys, lab, tmp_path):
    env = env_for(lab, tmp_path / "crash")
    (tmp_path / "crash" / "faults.json").write_text(json.dumps({"crash_after_requests": 6}))
    launcher = Launcher(env)
    try:
        server = launcher(TARGET_FP4, SERVE)
        started = time.monotonic()
        result = run(capsys, {"url": url(server), "workloads": ["code_edit"], "warmups": 0, "repetitions": 3,
                              "max_tokens": 64, "request_timeout": 10, "deadline": 30})
        elapsed = time.monotonic() - started
    finally:
        launcher.stop_all()
    bench = result["bench"]
    assert "failed" not in result  # the module returns; the playbook decides
    assert bench["ok"] is False
    assert bench["failure"]["class"] == "server_died", bench["failure"]
    assert "code_edit c=1 run 1" in bench["failure"]["message"]
    assert elapsed < 15
    assert bench["results"]["code_edit"]["c1"]["failed_requests"] >= 1
    assert bench["outputs"] == {}
    verdict = decide([{"side": "baseline", "bench": bench}, {"side": "speculative", "bench": bench}],
                     policy.merge({}))
    assert verdict["decision"] == "revert"
    assert any("benchmark failed (server_died)" in reason for reason in verdict["reasons"])


def test_stalled_engine_hits_the_request_timeout(capsys, lab, tmp_path):
    env = env_for(lab, tmp_path / "hang")
    (tmp_path / "hang" / "faults.json").write_text(json.dumps({"hang_mid_stream_after_tokens": 20}))
    launcher = Launcher(env)
    try:
        server = launcher(TARGET_FP4, SERVE)
        started = time.monotonic()
        result = run(capsys, {"url": url(server), "workloads": ["chat"], "concurrency": [1], "warmups": 0,
                              "max_tokens": 64, "request_timeout": 1.5, "deadline": 20})
        elapsed = time.monotonic() - started
    finally:
        launcher.stop_all()
    failure = result["bench"]["failure"]
    assert result["bench"]["ok"] is False and failure["class"] == "stalled", failure
    assert elapsed < 6
