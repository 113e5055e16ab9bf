"""Submissions whose exercises only call each other: the grader's answers are no oracle.

Where one exercise is another's special case, a stub can "solve" it by calling the other
one: Chapter 6's delta rule (6.3) is the gated rule (6.4) with every gate 0, and the
recurrent (6.4) and chunkwise (6.5) forms are the same recurrence; Chapter 3's
per-group quantization (3.2) is the per-channel one (3.3) on the transposed tensor;
Chapter 5's blocked forward pass (5.5) is one fold of the whole score matrix (5.2) and
its finish (5.3); Chapter 1's bytes per token (1.1) is a one-token cache of one
sequence (1.2), and its largest token count (1.4) a batch of one-token sequences (1.6);
Chapter 9's plain RoPE frequencies (9.1) are position interpolation (9.3) by a factor of 1.
The other chapters' answered calls are only the honest way round (10.6 on 10.2's step and 10.4's positions,
11.5 on 11.4's bound, 12.2 on 12.1's hashes, 12.6 driving 12.5): no exercise there is
another's special case. While one exercise is graded the others are the references', so such a
stub would be graded on the references. The judge answers a call into another exercise
only where the solution makes the same call in the same test (grading.judge.answers):
every other call runs the notebook's own function, which here calls back, and never
computes anything. So each of these students earns nothing, except where its code is
what an honest student writes (3.3 as 3.2 on the transposed keys, which is how the
solution computes it): there it earns exactly what that honest code earns alone.

The class is graded by the real command (grading.batch), as an instructor grades one.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grading.judge import answers
from grading.layout import EXERCISES, ROOT
from grading.proc import sandbox

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not sandbox.status().sandboxed,
                       reason=f"needs the grading sandbox here: {sandbox.status().line}"),
]

# 3.3 as 3.2 on the transposed keys: the solution's own way, so an honest answer.
KEYS_AS_GROUPS = '''
def quantize_keys_per_channel(k, bits, group_size):
    q, scale, zero = quantize_asym(k.transpose(-1, -2), bits, group_size)
    return q.transpose(-1, -2), scale.transpose(-1, -2), zero.transpose(-1, -2)

def dequantize_keys_per_channel(q, scale, zero, group_size):
    return dequantize_asym(q.transpose(-1, -2), scale.transpose(-1, -2), zero.transpose(-1, -2),
                           group_size).transpose(-1, -2)
'''
# 3.2 as 3.3 on the transposed tensor and back: no work of its own.
GROUPS_AS_KEYS = '''
def quantize_asym(x, bits, group_size):
    q, scale, zero = quantize_keys_per_channel(x.transpose(-1, -2), bits, group_size)
    return q.transpose(-1, -2), scale.transpose(-1, -2), zero.transpose(-1, -2)

def dequantize_asym(q, scale, zero, group_size):
    return dequantize_keys_per_channel(q.transpose(-1, -2), scale.transpose(-1, -2), zero.transpose(-1, -2),
                                       group_size).transpose(-1, -2)
'''
# 6.3 as 6.4 with every gate 0, 6.4 as 6.5, 6.5 as 6.4.
DELTA_AS_GATED = '''
import torch

def delta_rule_recurrent(q, k, v, beta, initial_state=None, scale=None):
    return gated_delta_rule_recurrent(q, k, v, torch.zeros_like(beta), beta, initial_state, scale)

def gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=None, scale=None):
    return chunk_gated_delta_rule(q, k, v, g, beta, initial_state, scale)

def chunk_gated_delta_rule(q, k, v, g, beta, initial_state=None, scale=None, chunk_size=64):
    return gated_delta_rule_recurrent(q, k, v, g, beta, initial_state, scale)
'''
# 5.5 as one fold (5.2) of the whole score matrix and its finish (5.3); 5.1 the same on a vector.
FLASH_AS_ONE_FOLD = '''
import math
import torch

def _fold(s, v):
    P, R, C = s.shape
    m, l, acc = online_update(torch.full((P, R, 1), -math.inf, dtype=s.dtype), torch.zeros(P, R, 1, dtype=s.dtype),
                              torch.zeros(P, R, v.shape[-1], dtype=s.dtype), s, v)
    return finalize(m, l, acc)

def online_softmax(x, block_size=4):
    row = x.reshape(1, 1, -1).double()
    out, _ = _fold(row, torch.eye(row.shape[-1], dtype=row.dtype)[None])
    return out.reshape(x.shape).to(x.dtype)

def flash_attention(q, k, v, causal=False, block_q=None, block_k=None, return_lse=False, visits=None):
    B, H, N, d = q.shape
    group = H // k.shape[1]
    k, v = k.repeat_interleave(group, 1).double(), v.repeat_interleave(group, 1).double()
    s = (q.double() @ k.transpose(-1, -2)) / math.sqrt(d)  # (B, H, N, M)
    M = s.shape[-1]
    if causal:
        s = s.masked_fill(~torch.ones(N, M, dtype=torch.bool).tril(M - N), -math.inf)
    out, lse = _fold(s.reshape(B * H, N, M), v.reshape(B * H, M, d))
    out = out.reshape(B, H, N, d).to(q.dtype)
    return (out, lse.reshape(B, H, N).float()) if return_lse else out
'''

# 1.2 and 1.6 the solution's way (on 1.1 and 1.4): honest.
CACHE_ON_TOKENS = '''
def kv_cache_bytes(num_layers, num_kv_heads, head_dim, seq_len, batch_size=1, dtype="fp16"):
    return kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype) * seq_len * batch_size

def max_batch_size(device_bytes, weight_bytes, bytes_per_token, seq_len, reserve_bytes=0, page_size=None):
    tokens = max_tokens(device_bytes, weight_bytes, bytes_per_token, reserve_bytes)
    per_sequence = seq_len if page_size is None else -(-seq_len // page_size) * page_size
    return tokens // per_sequence
'''
# 1.1 as a one-token cache of one sequence, 1.4 as a batch of one-token (or one-page) sequences.
TOKENS_AS_CACHE = '''
def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype="fp16"):
    return kv_cache_bytes(num_layers, num_kv_heads, head_dim, 1, 1, dtype)

def max_tokens(device_bytes, weight_bytes, bytes_per_token, reserve_bytes=0, page_size=None):
    if page_size is None:
        return max_batch_size(device_bytes, weight_bytes, bytes_per_token, 1, reserve_bytes)
    return max_batch_size(device_bytes, weight_bytes, bytes_per_token, page_size, reserve_bytes, page_size) * page_size
'''
# 9.3 the solution's way, on 9.1: honest.
LINEAR_ON_ROPE = '''
def linear_inv_freq(head_dim, base, factor):
    return rope_inv_freq(head_dim, base) / factor
'''
# 9.1 as position interpolation by a factor of 1.
ROPE_AS_LINEAR = '''
def rope_inv_freq(head_dim, base=10000.0):
    return linear_inv_freq(head_dim, base, 1.0)
'''

STUDENTS = {  # student -> (chapter, cells appended to its stub)
    "oracle_01": ("01_kv_memory", [CACHE_ON_TOKENS, TOKENS_AS_CACHE]),
    "honest_01": ("01_kv_memory", [CACHE_ON_TOKENS]),
    "oracle_03": ("03_quantized_kv_cache", [GROUPS_AS_KEYS, KEYS_AS_GROUPS]),
    "honest_33": ("03_quantized_kv_cache", [KEYS_AS_GROUPS]),
    "oracle_05": ("05_flash_attention", [FLASH_AS_ONE_FOLD]),
    "oracle_06": ("06_delta_rule", [DELTA_AS_GATED]),
    "oracle_09": ("09_rope_scaling", [LINEAR_ON_ROPE, ROPE_AS_LINEAR]),
    "honest_09": ("09_rope_scaling", [LINEAR_ON_ROPE]),
}
# Each oracle, its honest twin, the exercises it asks the other to compute, and the ones
# it computes the honest way.
PAIRS = {"oracle_01": ("honest_01", {"1.1", "1.4"}, {"1.2", "1.6"}),
         "oracle_03": ("honest_33", {"3.2"}, {"3.3"}),
         "oracle_09": ("honest_09", {"9.1"}, {"9.3"})}


def _stub_with(stem: str, cells: list[str]) -> str:
    nb = nbformat.read(EXERCISES / f"{stem}.ipynb", as_version=4)
    for source in cells:
        cell = nbformat.v4.new_code_cell(source)
        if nb.nbformat_minor < 5:  # cell ids came with nbformat 4.5; an older notebook's schema forbids them
            del cell["id"]
        nb.cells.append(cell)
    return nbformat.writes(nb)


def grade_class(base: Path) -> dict:
    """The class graded with the real command; what came out. The chapters' records of the
    solution's calls are made first, as ``make release`` makes them (else the first judge
    of each chapter would)."""
    for stem in sorted({stem for stem, _ in STUDENTS.values()}):
        answers.make_record(stem)
    subs, out = base / "submissions", base / "grades"
    for student, (stem, cells) in STUDENTS.items():
        (subs / student).mkdir(parents=True)
        (subs / student / f"{stem}.ipynb").write_text(_stub_with(stem, cells))
    proc = subprocess.run([sys.executable, "-m", "grading.batch", str(subs), "--out", str(out), "--workers", "2",
                           "--timeout", "120", "--memory-mb", "3000", "--quiet"],
                          cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=850)
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["exercise"]]
    return {"proc": proc, "rows": rows}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return grade_class(tmp_path_factory.mktemp("oracle"))


def points(graded, student: str, exercises: set[str] | None = None) -> dict[str, float]:
    rows = [r for r in graded["rows"] if r["student"] == student]
    assert rows, f"{student} has no row"
    return {r["exercise"]: float(r["points"] or 0) for r in rows if exercises is None or r["exercise"] in exercises}


def test_the_batch_finishes(graded):
    assert graded["proc"].returncode == 0, graded["proc"].stderr[-3000:]


@pytest.mark.parametrize("student", ["oracle_05", "oracle_06"])
def test_exercises_that_only_call_each_other_earn_nothing(graded, student):
    earned = points(graded, student)
    assert sum(earned.values()) == 0, {e: p for e, p in earned.items() if p}


@pytest.mark.parametrize("student", sorted(PAIRS))
def test_a_special_case_called_as_the_general_one_earns_nothing(graded, student):
    """3.2 asks for 3.3 on the transposed tensor, 1.1 for 1.2 with one token, 9.1 for 9.3
    with a factor of 1: the solution never makes those calls."""
    earned = points(graded, student, PAIRS[student][1])
    assert earned and sum(earned.values()) == 0, earned


@pytest.mark.parametrize("student", sorted(PAIRS))
def test_the_honest_way_round_earns_what_honest_code_earns(graded, student):
    """3.3 asks for 3.2 on the transposed keys, as the solution does (and 1.2 for 1.1, 9.3
    for 9.1): answered, and worth exactly what the same cell earns beside stubs, no more."""
    twin, _, honest_way = PAIRS[student]
    mine, honest = points(graded, student, honest_way), points(graded, twin, honest_way)
    assert mine == honest and sum(honest.values()) > 0, (mine, honest)


def oracle_points(graded) -> float:
    """What the oracle submissions earn beyond what their honest code earns alone: the
    bench's ``grade.oracle_points`` (goal 0)."""
    extra = sum(sum(points(graded, s).values()) - sum(points(graded, twin, honest_way).values())
                for s, (twin, _, honest_way) in PAIRS.items())
    return extra + sum(sum(points(graded, s).values()) for s in ("oracle_05", "oracle_06"))
