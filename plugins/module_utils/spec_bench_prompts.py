# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Fixed prompt sets for spec_bench (data only; stdlib, no logic beyond lookups).

Two workloads, as seed 002 measured them:
- ``code_edit``: high prompt/output overlap. "Add docstrings and type hints to this class
  and return the full updated class" over eight ~30-line Python classes: most of the
  answer repeats the prompt, which is where drafters (EAGLE-3, n-gram) get accepted.
- ``chat``: low overlap. Eight open questions asking for explanations of at least 300
  words in prose: the answer shares little with the prompt, so acceptance is low.

The texts are part of the measurement: changing one changes every figure and the greedy
output hashes, so ``PROMPT_SET_VERSION`` goes up with any edit and is recorded in the
result context. Chat prompts avoid words that ask for structured output (list, steps,
table, outline, ...): they are meant to be open prose.
"""

from __future__ import annotations

import hashlib

PROMPT_SET_VERSION = 1

CODE_EDIT_INSTRUCTION = (
    "Add docstrings and type hints to this class and return the full updated class. "
    "Keep the behaviour and the names exactly as they are."
)

_CODE_SNIPPETS = (
    '''class InventoryStore:
    def __init__(self, path, autosave=True):
        self.path = path
        self.autosave = autosave
        self.items = {}
        self.dirty = False

    def add(self, sku, quantity, price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        entry = self.items.get(sku, {"quantity": 0, "price": price})
        entry["quantity"] += quantity
        entry["price"] = price
        self.items[sku] = entry
        self.dirty = True
        if self.autosave:
            self.save()

    def remove(self, sku, quantity):
        entry = self.items[sku]
        if entry["quantity"] < quantity:
            raise ValueError("not enough stock")
        entry["quantity"] -= quantity
        self.dirty = True

    def total_value(self):
        return sum(e["quantity"] * e["price"] for e in self.items.values())

    def save(self):
        with open(self.path, "w") as handle:
            handle.write(repr(self.items))
        self.dirty = False''',
    '''class RateLimiter:
    def __init__(self, rate, burst, clock=None):
        self.rate = rate
        self.burst = burst
        self.clock = clock or time.monotonic
        self.tokens = burst
        self.updated = self.clock()

    def _refill(self):
        now = self.clock()
        elapsed = now - self.updated
        self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        self.updated = now

    def allow(self, cost=1):
        self._refill()
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False

    def wait_time(self, cost=1):
        self._refill()
        if self.tokens >= cost:
            return 0.0
        return (cost - self.tokens) / self.rate

    def reset(self):
        self.tokens = self.burst
        self.updated = self.clock()

    def __repr__(self):
        return f"RateLimiter(rate={self.rate}, burst={self.burst})"''',
    '''class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.data = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key, default=None):
        if key in self.data:
            self.data.move_to_end(key)
            self.hits += 1
            return self.data[key]
        self.misses += 1
        return default

    def put(self, key, value):
        if key in self.data:
            self.data.move_to_end(key)
        self.data[key] = value
        while len(self.data) > self.capacity:
            self.data.popitem(last=False)

    def hit_ratio(self):
        total = self.hits + self.misses
        if total == 0:
            return 0.0
        return self.hits / total

    def clear(self):
        self.data.clear()
        self.hits = 0
        self.misses = 0''',
    '''class SensorLog:
    def __init__(self, name, unit, window=100):
        self.name = name
        self.unit = unit
        self.window = window
        self.samples = []
        self.alarms = []

    def record(self, timestamp, value):
        self.samples.append((timestamp, value))
        if len(self.samples) > self.window:
            self.samples.pop(0)

    def latest(self):
        if not self.samples:
            return None
        return self.samples[-1][1]

    def average(self):
        if not self.samples:
            return None
        return sum(value for _, value in self.samples) / len(self.samples)

    def check(self, low, high):
        value = self.latest()
        if value is None:
            return False
        if value < low or value > high:
            self.alarms.append((self.samples[-1][0], value))
            return True
        return False

    def export(self):
        return {"name": self.name, "unit": self.unit, "samples": list(self.samples)}''',
    '''class JobQueue:
    def __init__(self, workers, retries=3):
        self.workers = workers
        self.retries = retries
        self.pending = deque()
        self.running = {}
        self.failed = []
        self.done = []

    def submit(self, job_id, payload, priority=0):
        job = {"id": job_id, "payload": payload, "priority": priority, "attempts": 0}
        if priority > 0:
            self.pending.appendleft(job)
        else:
            self.pending.append(job)
        return job_id

    def start_next(self):
        if len(self.running) >= self.workers or not self.pending:
            return None
        job = self.pending.popleft()
        job["attempts"] += 1
        self.running[job["id"]] = job
        return job

    def finish(self, job_id, ok):
        job = self.running.pop(job_id)
        if ok:
            self.done.append(job)
        elif job["attempts"] < self.retries:
            self.pending.append(job)
        else:
            self.failed.append(job)

    def stats(self):
        return {"pending": len(self.pending), "running": len(self.running), "done": len(self.done)}''',
    '''class MatrixStats:
    def __init__(self, rows):
        if not rows or not rows[0]:
            raise ValueError("empty matrix")
        width = len(rows[0])
        for row in rows:
            if len(row) != width:
                raise ValueError("ragged matrix")
        self.rows = rows
        self.height = len(rows)
        self.width = width

    def column(self, index):
        return [row[index] for row in self.rows]

    def column_means(self):
        return [sum(self.column(i)) / self.height for i in range(self.width)]

    def row_sums(self):
        return [sum(row) for row in self.rows]

    def transpose(self):
        return MatrixStats([self.column(i) for i in range(self.width)])

    def normalize(self):
        means = self.column_means()
        return MatrixStats([[value - means[i] for i, value in enumerate(row)] for row in self.rows])

    def max_position(self):
        best = None
        for r, row in enumerate(self.rows):
            for c, value in enumerate(row):
                if best is None or value > best[0]:
                    best = (value, r, c)
        return best''',
    '''class ConfigLoader:
    def __init__(self, defaults, env_prefix="APP_"):
        self.defaults = dict(defaults)
        self.env_prefix = env_prefix
        self.overrides = {}
        self.sources = []

    def load_file(self, path):
        values = {}
        with open(path) as handle:
            for line in handle:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                key, _, value = line.partition("=")
                values[key.strip()] = value.strip()
        self.overrides.update(values)
        self.sources.append(path)
        return values

    def load_env(self, environ):
        for key, value in environ.items():
            if key.startswith(self.env_prefix):
                name = key[len(self.env_prefix):].lower()
                self.overrides[name] = value
        self.sources.append("environment")

    def get(self, key, cast=str):
        if key in self.overrides:
            return cast(self.overrides[key])
        if key in self.defaults:
            return cast(self.defaults[key])
        raise KeyError(key)

    def as_dict(self):
        return {**self.defaults, **self.overrides}''',
    '''class RouteGraph:
    def __init__(self):
        self.edges = {}
        self.nodes = set()

    def connect(self, start, end, cost):
        if cost < 0:
            raise ValueError("cost must not be negative")
        self.nodes.update((start, end))
        self.edges.setdefault(start, []).append((end, cost))
        self.edges.setdefault(end, []).append((start, cost))

    def neighbours(self, node):
        return [end for end, _ in self.edges.get(node, [])]

    def shortest(self, source, target):
        distances = {source: 0}
        queue = [(0, source)]
        while queue:
            distance, node = heapq.heappop(queue)
            if node == target:
                return distance
            if distance > distances.get(node, float("inf")):
                continue
            for end, cost in self.edges.get(node, []):
                candidate = distance + cost
                if candidate < distances.get(end, float("inf")):
                    distances[end] = candidate
                    heapq.heappush(queue, (candidate, end))
        return None

    def degree(self, node):
        return len(self.edges.get(node, []))''',
)

_CHAT_QUESTIONS = (
    "Explain in at least 300 words why the sky looks blue during the day and red or orange "
    "at sunset, and what that tells us about how light interacts with air.",
    "In at least 300 words, explain how a refrigerator keeps food cold even though it sits "
    "in a warm kitchen, and where the heat it removes actually goes.",
    "Write an explanation of at least 300 words about why bread rises, what yeast is doing "
    "while the dough rests, and why bakers care about temperature.",
    "Explain in at least 300 words how honeybees decide where to build a new home when a "
    "colony splits, and why biologists find that decision so interesting.",
    "In at least 300 words, explain why the Moon always shows the same face to the Earth "
    "and how the same effect shapes tides on our oceans.",
    "Write at least 300 words explaining how a bicycle stays upright while it moves, and "
    "why it is so much harder to balance one that is standing still.",
    "Explain in at least 300 words what makes some materials conduct electricity well while "
    "others, like rubber or glass, hardly conduct it at all.",
    "In at least 300 words, explain how ancient sailors found their way across open water "
    "without maps of the ocean, and what they learned from the stars, swells and birds.",
)

PROMPT_SETS: dict[str, tuple[str, ...]] = {
    "code_edit": tuple(f"{CODE_EDIT_INSTRUCTION}\n\n```python\n{code}\n```" for code in _CODE_SNIPPETS),
    "chat": _CHAT_QUESTIONS,
}
WORKLOADS = tuple(PROMPT_SETS)
WORKLOAD_DESCRIPTIONS = {
    "code_edit": "add docstrings and type hints to a ~30-line Python class, return the full class "
    "(high prompt/output overlap)",
    "chat": "open questions asking for explanations of at least 300 words (low prompt/output overlap)",
}


def prompts(workload: str) -> list[str]:
    """The fixed prompts of a workload, in order; KeyError names the known ones."""
    if workload not in PROMPT_SETS:
        raise KeyError(f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
    return list(PROMPT_SETS[workload])


def prompt_set_digest(workload: str) -> str:
    """sha256 (first 16 hex digits) over a workload's prompts, to pin them in results."""
    digest = hashlib.sha256()
    for text in prompts(workload):
        digest.update(text.encode())
        digest.update(b"\x00")
    return digest.hexdigest()[:16]
