"""Output-divergence fault switches: what the toolkit's output check must tell apart.

A baseline and a speculative server (faults `only_when_speculating`) answer the benchmark
client's output-check requests; the answers go through the client's own `chosen_logprobs`
(via its stream parser) and are compared token by token, as specfleet/gate.py does: the
first divergence's baseline lead (top-1 minus best alternative) is a numerics tie at
<= 0.05 and a real divergence above 1.0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import bench_http, bench_stream
from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_client as client
from conftest import EAGLE3_K5, TARGET_FP4, EmulatorProcess, Launcher, parse_metrics
from vllm_emulator.faults import Faults, parse_faults
from vllm_emulator.logprobs import AnswerPlan
from vllm_emulator.tokens import generate

ARGS = ["--max-model-len", "4096", "--enforce-eager", "--served-model-name", "llama"]
SPEC = [*ARGS, "--speculative-config", EAGLE3_K5]
PROMPTS = [
    "Explain why a Jetson unit decodes faster with speculative decoding.",
    "Describe how the fleet rolls a new serving image out, unit by unit.",
    "Add type hints:\n```python\ndef load(path):\n    with open(path) as f:\n        return f.read()\n```",
]
TIE_GAP = 0.05


def write_faults(env: dict[str, str], faults: dict[str, Any]) -> None:
    Path(env["SPECFLEET_EMULATOR_FAULTS_FILE"]).write_text(json.dumps(faults))


def answer(server: EmulatorProcess, prompt: str, kind: str = "chat", top: int = 2) -> dict[str, Any]:
    """One output-check request; what output_record keeps: text, tokens, margins."""
    body = bench_http.build_request_body(kind, "llama", prompt, 256, seed=42, top_logprobs=top)
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    state = bench_stream.StreamState(sent_at=0.0)
    for _, event in server.stream(path, body):
        state.on_event(event if event == "[DONE]" else json.dumps(event), 0.0)
    return {
        "text": state.text,
        "tokens": [token for token, _, _ in state.token_logprobs],
        "margins": [None if alt is None else logprob - alt for _, logprob, alt in state.token_logprobs],
    }


def first_divergence(base: list[str], cand: list[str]) -> int | None:
    for index, (left, right) in enumerate(zip(base, cand, strict=False)):
        if left != right:
            return index
    return None if len(base) == len(cand) else min(len(base), len(cand))


def pair(launch: Launcher, env: dict[str, str], faults: dict[str, Any]) -> tuple[EmulatorProcess, EmulatorProcess]:
    write_faults(env, {"only_when_speculating": True, **faults})
    return launch(TARGET_FP4, ARGS), launch(TARGET_FP4, SPEC)


def test_parse_output_faults() -> None:
    faults = parse_faults({"output_divergence": "tie", "divergence_after_tokens": 4, "unstable_outputs": True})
    assert (faults.output_divergence, faults.divergence_after_tokens, faults.unstable_outputs) == ("tie", 4, True)
    assert parse_faults({}).divergence_after_tokens == 8 and not Faults().any
    with pytest.raises(ValueError, match="output_divergence"):
        parse_faults({"output_divergence": "sometimes"})
    with pytest.raises(ValueError, match="divergence_after_tokens"):
        parse_faults({"divergence_after_tokens": -1})


def test_divergence_continues_from_the_changed_prefix() -> None:
    tokens = generate("p", 200, False)
    plan = AnswerPlan("m", "p", None, False, list(tokens))
    position = plan.first_near_tie(8)
    assert position is not None and position >= 8
    plan.diverge(position, "second", "tie")
    assert plan.tokens[:position] == tokens[:position] and plan.tokens[position] != tokens[position]
    assert len(plan.tokens) == 200 and plan.tokens[position + 1 :] != tokens[position + 1 :]
    again = AnswerPlan("m", "p", None, False, list(tokens))
    again.diverge(position, "second", "tie")
    assert again.tokens == plan.tokens  # deterministic


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_tie_diverges_where_the_baseline_was_nearly_tied(launch: Launcher, lab_env: dict[str, str], kind: str) -> None:
    baseline, speculative = pair(launch, lab_env, {"output_divergence": "tie"})
    for prompt in PROMPTS:
        base, spec = answer(baseline, prompt, kind), answer(speculative, prompt, kind)
        assert len(base["tokens"]) == len(spec["tokens"]) == 256
        index = first_divergence(base["tokens"], spec["tokens"])
        assert index is not None and index >= 8, prompt
        assert base["margins"][index] is not None and base["margins"][index] <= TIE_GAP
        assert all(margin > TIE_GAP for margin in base["margins"][8:index])  # the first near-tie from 8 on
        # The speculative server's own numbers flipped that tie: its choice leads by the same hair.
        assert 0 <= spec["margins"][index] <= TIE_GAP
        assert answer(baseline, prompt, kind) == base and answer(speculative, prompt, kind) == spec


def test_confident_diverges_where_the_baseline_was_sure(launch: Launcher, lab_env: dict[str, str]) -> None:
    baseline, speculative = pair(launch, lab_env, {"output_divergence": "confident", "divergence_after_tokens": 12})
    for prompt in PROMPTS:
        base, spec = answer(baseline, prompt), answer(speculative, prompt)
        index = first_divergence(base["tokens"], spec["tokens"])
        assert index is not None and index >= 12
        assert base["margins"][index] > 1.0
        # The emitted token is one the baseline ranked far down: the server reports it low.
        assert spec["margins"][index] < -1.0
    info = json.loads(speculative.get("/specfleet/emulator")[2])
    assert info["faults"]["output_divergence"] == "confident" and info["faults"]["divergence_after_tokens"] == 12
    assert json.loads(baseline.get("/specfleet/emulator")[2])["faults"]["output_divergence"] is None


def test_unstable_outputs_answer_the_same_request_differently(launch: Launcher, lab_env: dict[str, str]) -> None:
    baseline, speculative = pair(launch, lab_env, {"unstable_outputs": True})
    info = json.loads(speculative.get("/specfleet/emulator")[2])
    assert info["faults"]["unstable_outputs"] is True and info["faults"]["only_when_speculating"] is True
    for prompt in PROMPTS[:2]:
        # The benchmark's first c=1 run (no logprobs), then its output check (the same request
        # with logprobs): a temperature-0 server answers both alike.
        assert answer(baseline, prompt, top=0)["text"] == answer(baseline, prompt)["text"]
        assert answer(speculative, prompt, top=0)["text"] != answer(speculative, prompt)["text"]
        first, second = answer(speculative, prompt), answer(speculative, prompt)
        index = first_divergence(first["tokens"], second["tokens"])
        assert first["text"] != second["text"] and index is not None and index >= 8


def salted(server: EmulatorProcess, prompt: str, salt: str | None, top: int = 2) -> dict[str, Any]:
    """An output-check request with a prefix-cache salt (or none)."""
    body = bench_http.build_request_body("chat", "llama", prompt, 256, seed=42, top_logprobs=top, cache_salt=salt)
    state = bench_stream.StreamState(sent_at=0.0)
    for _, event in server.stream("/v1/chat/completions", body):
        state.on_event(event if event == "[DONE]" else json.dumps(event), 0.0)
    return {"text": state.text, "tokens": [token for token, _, _ in state.token_logprobs],
            "margins": [None if alt is None else logprob - alt for _, logprob, alt in state.token_logprobs]}


def drafts(server: EmulatorProcess) -> float:
    return sum(value for name, value in parse_metrics(server.metrics()).items()
               if name.startswith("vllm:spec_decode_num_drafts_total"))


def test_parse_the_output_checks_switches() -> None:
    faults = parse_faults({"unstable_outputs": "tie", "logprobs_without_drafting": True, "batched_divergence": True,
                           "cache_hit_flips": True, "only_when_baseline": True})
    assert (faults.unstable_outputs, faults.logprobs_without_drafting, faults.batched_divergence,
            faults.cache_hit_flips, faults.only_when_baseline) == ("tie", True, True, True, True)
    with pytest.raises(ValueError, match="unstable_outputs"):
        parse_faults({"unstable_outputs": "often"})
    with pytest.raises(ValueError, match="exclude each other"):
        parse_faults({"only_when_speculating": True, "only_when_baseline": True})


def test_a_logprobs_request_is_decoded_without_drafting(launch: Launcher, lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"logprobs_without_drafting": True})
    speculative = launch(TARGET_FP4, SPEC)
    before = drafts(speculative)
    plain = salted(speculative, PROMPTS[0], None, top=0)
    after_plain = drafts(speculative)
    checked = salted(speculative, PROMPTS[0], None)
    assert after_plain > before  # a request without logprobs drafts
    assert drafts(speculative) == after_plain  # one asking for logprobs does not
    assert checked["text"] == plain["text"]  # speculation is lossless: the same answer either way


def test_a_cache_hit_tips_a_near_tie_and_a_salt_keeps_the_prefill_uncached(launch: Launcher,
                                                                           lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"cache_hit_flips": True})
    server = launch(TARGET_FP4, SPEC)
    first = salted(server, PROMPTS[1], None)
    hit = salted(server, PROMPTS[1], None)  # the same prompt again: its prefill is cached
    index = first_divergence(first["tokens"], hit["tokens"])
    assert index is not None and index >= 8 and first["margins"][index] <= TIE_GAP
    # Other salts: neither request finds the prompt cached, so both answer as the first did.
    assert salted(server, PROMPTS[1], "a1") == salted(server, PROMPTS[1], "b2") == first


@pytest.mark.parametrize("salt", ["", 7, ["x"]])
def test_a_cache_salt_vllm_refuses_is_refused(launch: Launcher, lab_env: dict[str, str], salt: Any) -> None:
    server = launch(TARGET_FP4, ARGS)
    body = {**bench_http.build_request_body("chat", "llama", "hi", 8, seed=42), "stream": False, "cache_salt": salt}
    body.pop("stream_options")
    status, payload = server.post("/v1/chat/completions", body)
    assert status == 400 and "Parameter 'cache_salt' must be a non-empty string if provided." in json.dumps(payload)


def test_a_batch_only_divergence_leaves_answers_alone_one_at_a_time(launch: Launcher, lab_env: dict[str, str]) -> None:
    baseline, speculative = pair(launch, lab_env, {"batched_divergence": True})
    one_at_a_time = [salted(speculative, prompt, None) for prompt in PROMPTS]
    assert one_at_a_time == [salted(baseline, prompt, None) for prompt in PROMPTS]
    bodies = [bench_http.build_request_body("chat", "llama", prompt, 256, seed=42, top_logprobs=2)
              for prompt in PROMPTS]
    endpoint = bench_http.Endpoint.parse(f"http://127.0.0.1:{speculative.port}")
    batch = bench_stream.run_batch(endpoint, "/v1/chat/completions", bodies, len(bodies), 30.0)
    records = [client.output_record(result) for result in batch.results]
    diverged = [first_divergence(alone["tokens"], record["tokens"]) for alone, record in zip(one_at_a_time, records,
                                                                                             strict=True)]
    # Every answer of the batch (each shared its steps with the others) diverged where the baseline was sure.
    assert all(index is not None for index in diverged), diverged
    for alone, index in zip(one_at_a_time, diverged, strict=True):
        if index is not None:
            assert alone["margins"][index] > 1.0


def test_unstable_at_a_tie_flips_only_near_ties(launch: Launcher, lab_env: dict[str, str]) -> None:
    baseline, _ = pair(launch, lab_env, {"unstable_outputs": "tie", "only_when_speculating": False,
                                         "only_when_baseline": True})
    _, speculative = launch(TARGET_FP4, ARGS), launch(TARGET_FP4, SPEC)
    answers = [salted(baseline, PROMPTS[2], None) for _ in range(4)]
    assert len({answer["text"] for answer in answers}) == 2
    assert len({salted(speculative, PROMPTS[2], None)["text"] for _ in range(4)}) == 1  # only the baseline
    index = first_divergence(answers[0]["tokens"], answers[1]["tokens"])
    assert index is not None and min(answers[0]["margins"][index], answers[1]["margins"][index]) <= TIE_GAP


def test_an_emulated_vllm_before_0_14_decodes_a_logprobs_request_without_drafting(launch: Launcher,
                                                                                  lab_env: dict[str, str]) -> None:
    lab_env["SPECFLEET_EMULATOR_VLLM_VERSION"] = "0.12.0"
    speculative = launch(TARGET_FP4, SPEC)
    before = drafts(speculative)
    salted(speculative, PROMPTS[0], None)
    assert drafts(speculative) == before
    salted(speculative, PROMPTS[0], None, top=0)
    assert drafts(speculative) > before

