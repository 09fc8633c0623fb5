"""tests/bench/bench_fidelity.py's emulator lane sees every request the client sends.

The lane compares each measured request with a twin of it sent to a second emulator. It once
broke silently: the client stopped sending through ``stream_request``, which the lane hooked,
and every row printed "no comparable request". This runs the lane's pairing over the client's
real ``run_benchmark`` against two local streaming servers.
"""

from __future__ import annotations

import time

from ansible_collections.specfleet.fleet.plugins.module_utils import bench_stream
from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_client as client

from tests.bench import bench_fidelity as fidelity
from tests.unit.plugins.module_utils.test_spec_bench_client import Paced, serving


def test_the_twin_pairing_records_every_request_of_a_benchmark_with_its_twin(monkeypatch):
    Paced.arrivals, Paced.open_now, Paced.most_open = [], 0, 0
    entries = [(f"p{index}", f"prompt {index}") for index in range(fidelity.EMULATOR_PROMPTS)]
    run_batch, stream_request = client.run_batch, bench_stream.stream_request
    twins: list[tuple[float, dict]] = []  # when each twin left, and its body
    batch_ends: list[float] = []  # per request sent: when its batch ended

    def twin_request(endpoint, path, body, *args, **kwargs):
        twins.append((time.monotonic(), body))
        return stream_request(endpoint, path, body, *args, **kwargs)

    def timed_batch(*args, **kwargs):
        batch = run_batch(*args, **kwargs)
        batch_ends.extend([time.monotonic()] * len(batch.results))
        return batch

    monkeypatch.setattr(bench_stream, "stream_request", twin_request)  # the pairing sends its twins with it
    monkeypatch.setattr(client, "run_batch", timed_batch)
    with serving(Paced) as endpoint, serving(Paced) as twin, fidelity.TwinPairing(twin) as pairing:
        bench = client.run_benchmark(endpoint, "m", {"code_edit": entries}, [1], warmups=1,
                                     repetitions=fidelity.REPETITIONS, max_tokens=4, request_timeout=10.0,
                                     output_check=0)
    assert bench["ok"], bench.get("failure")
    assert client.run_batch is timed_batch  # the pairing's hook is gone again
    # The warm-up sends each prompt once; each measured run sends max(4, prompts) requests.
    runs = fidelity.REPETITIONS * max(4, fidelity.EMULATOR_PROMPTS)
    assert len(pairing.sent) == len(entries) + runs
    assert len(Paced.arrivals) == 2 * len(pairing.sent)  # each request and its twin reached a server
    assert all(sent.result.ok and sent.twin.ok for sent in pairing.sent)
    # Each twin is its request's body asking for one token, sent once that request's batch ended.
    assert [body for _, body in twins] == [{**sent.body, "max_tokens": 1} for sent in pairing.sent]
    assert all(sent.body["max_tokens"] == 4 for sent in pairing.sent)
    assert all(ended <= left for ended, (left, _) in zip(batch_ends, twins, strict=True))
    assert sum(fidelity.measured(sent.body, "code_edit") for sent in pairing.sent) == runs
    assert not any(fidelity.measured(sent.body, "chat") for sent in pairing.sent)
