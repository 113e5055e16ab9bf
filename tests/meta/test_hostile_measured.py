"""Notebooks that break a rule about *how* they compute, and hide it from what watches inside.

A check read from inside the notebook's process can be answered falsely by the notebook:
so every such rule that can be is measured by the judge from outside that process
(``grading.judge.measure``), and the few that cannot are worth at most one point each
(``benchmarks/bench_integrity.py``'s ``grade.inside_only_points``). Each hostile student
here hands in the solution with one cell appended:

- 5.5 computing the whole score matrix in NumPy, which no torch watch sees;
- 13.2 "absorbed" decode that up-projects the whole cache, 13.1's naive formula;
- 14.8 a draft cache that keeps every chunk appended to it beside its window;
- 10.6 gathering every shard with ``all_gather`` and sending the ring's exact byte count
  around the ring as padding (the bytes on the wire), and gathering every shard without
  padding, attended at once or folded one by one (each rank's memory from 3 ranks to 4);
- a NaN on the way in 3.1, a reallocated buffer in 4.2, and 10.6 gathering every shard
  without padding (as many bytes as the ring, none through ``isend``), each with its
  inside check forged (the watch made blind, ``torch.Tensor.data_ptr`` made constant,
  the rank's own send count raised by the ring's bytes).

The first three must fail their measured test. A forged notebook must earn exactly what
the same notebook earns unforged on every other test, and no more than the inside-only
test's points beside.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from grading.layout import ROOT, SOLUTIONS
from grading.proc import sandbox

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not sandbox.status().sandboxed,
                       reason=f"needs the grading sandbox here: {sandbox.status().line}"),
]

NUMPY_SCORES = '''
import math as _math
import numpy as _np
import torch as _torch
_flash = flash_attention

def flash_attention(q, k, v, causal=False, block_q=None, block_k=None, return_lse=False, visits=None):
    if q.shape[2] * k.shape[2] < 2**20 or return_lse or visits is not None:
        return _flash(q, k, v, causal, block_q, block_k, return_lse, visits)
    G = q.shape[1] // k.shape[1]
    Q = q.double().numpy()
    K, V = (_np.repeat(t.double().numpy(), G, axis=1) for t in (k, v))
    s = Q @ K.swapaxes(-1, -2) / _math.sqrt(q.shape[-1])  # the whole score matrix, out of torch's sight
    if causal:
        s[..., _np.triu(_np.ones((q.shape[2], k.shape[2]), bool), k.shape[2] - q.shape[2] + 1)] = -_np.inf
    s = _np.exp(s - s.max(-1, keepdims=True))
    return _torch.from_numpy((s / s.sum(-1, keepdims=True)) @ V).to(q.dtype)
'''
NAIVE_AS_ABSORBED = '''
import math as _math
import torch as _torch

def mla_attention_absorbed(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv):
    B, H, N_q, d_nope = q_nope.shape
    N, d_rope = c_kv.shape[1], q_pe.shape[-1]
    q_pos, k_pos = _torch.arange(N - N_q, N), _torch.arange(N)
    k_nope = _torch.einsum("bnr,hdr->bhnd", c_kv, w_uk)  # the whole cache, up-projected
    v = _torch.einsum("bnr,hvr->bhnv", c_kv, w_uv)
    k = _torch.cat([k_nope, apply_rope(k_pe, k_pos)[:, None].expand(B, H, N, d_rope)], dim=-1)
    q = _torch.cat([q_nope, apply_rope(q_pe, q_pos)], dim=-1)
    s = q @ k.transpose(-1, -2) / _math.sqrt(d_nope + d_rope)
    s = s.masked_fill(k_pos[None, :] > q_pos[:, None], -_math.inf)
    return _torch.softmax(s, dim=-1) @ v
'''
KEEPS_THE_STREAM = '''
_append_draft = DraftWindowCache.append

def _keeping_append(self, k, v):
    self.__dict__.setdefault("_stream", []).append((k.clone(), v.clone()))  # every token, held
    return _append_draft(self, k, v)

DraftWindowCache.append = _keeping_append
'''
GATHER_THEN_PAD = '''
import math as _math
import torch as _torch
import torch.distributed as _dist
_ring = ring_attention

def ring_attention(q, k, v, layout="zigzag", causal=True):
    if causal or layout != "contiguous":
        return _ring(q, k, v, layout, causal)
    P, r = _dist.get_world_size(), _dist.get_rank()
    ks, vs = [_torch.empty_like(k) for _ in range(P)], [_torch.empty_like(v) for _ in range(P)]
    _dist.all_gather(ks, k.contiguous())
    _dist.all_gather(vs, v.contiguous())
    G = q.shape[1] // k.shape[1]
    K, V = (_torch.cat(t, 2).repeat_interleave(G, 1) for t in (ks, vs))
    s = q @ K.transpose(-1, -2) / _math.sqrt(q.shape[-1])
    lse = _torch.logsumexp(s, -1)
    for _ in range(P - 1):  # the ring's exact bytes, sent as padding
        ops = [_dist.P2POp(_dist.isend, _torch.zeros_like(k), (r + 1) % P),
               _dist.P2POp(_dist.isend, _torch.zeros_like(v), (r + 1) % P),
               _dist.P2POp(_dist.irecv, _torch.empty_like(k), (r - 1) % P),
               _dist.P2POp(_dist.irecv, _torch.empty_like(v), (r - 1) % P)]
        for w in _dist.batch_isend_irecv(ops):
            w.wait()
    return _torch.exp(s - lse[..., None]) @ V, lse
'''
# All shards gathered, each folded in turn with the chapter's ring step: the least a gathering
# rank can hold, P shards of K and V.
GATHER_THEN_FOLD = '''
import math as _math
import torch as _torch
import torch.distributed as _dist

def ring_attention(q, k, v, layout="zigzag", causal=True):
    P, r, n = _dist.get_world_size(), _dist.get_rank(), q.shape[2]
    ks, vs = [_torch.empty_like(k) for _ in range(P)], [_torch.empty_like(v) for _ in range(P)]
    _dist.all_gather(ks, k.contiguous())
    _dist.all_gather(vs, v.contiguous())
    q_pos = shard_positions(P * n, P, r, layout)
    out, lse = _torch.zeros_like(q), _torch.full(q.shape[:-1], -_math.inf, dtype=q.dtype)
    for j in range(P):
        out, lse = ring_step(q, ks[j], vs[j], q_pos, shard_positions(P * n, P, j, layout), out, lse, causal)
    return out, lse
'''
NAN_ON_THE_WAY = '''
_q8 = quantize_int8

def quantize_int8(x):
    q, scale = _q8(x)
    _ = x / (scale.float() * 0)  # an unguarded division: inf and NaN on the way
    return q, scale
'''
BLIND_WATCH = '''
import importlib as _importlib
_watch = _importlib.import_module("grading.contestant.watch")

class _Blind(_watch.NonFiniteWatch):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

_watch.WATCHES["non_finite"] = _Blind
'''
REALLOCATES = '''
_append = RingKVCache.append

def _reallocating_append(self, k, v):
    self.k, self.v = self.k.clone(), self.v.clone()  # new buffers on every append
    return _append(self, k, v)

RingKVCache.append = _reallocating_append
'''
GATHER_WITHOUT_PADDING = '''
import math as _math
import torch as _torch
import torch.distributed as _dist

def ring_attention(q, k, v, layout="zigzag", causal=True):
    P, r, n = _dist.get_world_size(), _dist.get_rank(), q.shape[2]
    ks, vs = [_torch.empty_like(k) for _ in range(P)], [_torch.empty_like(v) for _ in range(P)]
    _dist.all_gather(ks, k.contiguous())  # as many bytes as the ring, none through isend
    _dist.all_gather(vs, v.contiguous())
    G = q.shape[1] // k.shape[1]
    K, V = (_torch.cat(t, 2).repeat_interleave(G, 1) for t in (ks, vs))
    k_pos = _torch.tensor([p for j in range(P) for p in shard_positions(P * n, P, j, layout)])
    q_pos = _torch.tensor(list(shard_positions(P * n, P, r, layout)))
    s = q @ K.transpose(-1, -2) / _math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(k_pos[None, :] > q_pos[:, None], -_math.inf)
    lse = _torch.logsumexp(s, -1)
    return _torch.exp(s - lse[..., None]) @ V, lse
'''
FORGED_SEND_COUNT = '''
import importlib as _importlib
_gathered = ring_attention

def ring_attention(q, k, v, layout="zigzag", causal=True):
    out = _gathered(q, k, v, layout, causal)
    P = _importlib.import_module("torch.distributed").get_world_size()
    counter = _importlib.import_module("grading.contestant.ranks")._state["counter"]
    counter["bytes"] += (P - 1) * (k.numel() * k.element_size() + v.numel() * v.element_size())
    counter["sends"] += 2 * (P - 1)
    return out
'''
CONSTANT_ADDRESS = '''
import torch as _torch
_torch.Tensor.data_ptr = lambda self: 4096
'''


def _notebook(stem: str, *cells: str) -> str:
    nb = nbformat.read(SOLUTIONS / f"{stem}.ipynb", as_version=4)
    for cell in cells:
        nb.cells.append(nbformat.v4.new_code_cell(cell))
    return nbformat.writes(nb)


def grade(tmp: Path, stem: str, select: str, *cells: str) -> dict[str, str]:
    """Each selected test of ``stem``'s graders on the solution with ``cells`` appended:
    test name (with its case) -> "passed", "failed" or "skipped"."""
    folder = tmp / f"{stem}-{len(list(tmp.iterdir()))}"
    folder.mkdir()
    (folder / f"{stem}.ipynb").write_text(_notebook(stem, *cells))
    report = folder / "report.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/test_{stem}.py",
                           "--notebooks", str(folder), "-k", select, f"--junitxml={report}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=800)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        outcomes[case.get("name")] = ("failed" if kinds & {"failure", "error"} else
                                      "skipped" if "skipped" in kinds else "passed")
    assert outcomes, done.stdout[-3000:]
    return outcomes


def _failed(outcomes: dict[str, str], test: str) -> list[str]:
    cases = {name: o for name, o in outcomes.items() if re.fullmatch(rf"{test}(\[.*\])?", name)}
    assert cases, f"{test} did not run: {outcomes}"
    assert "skipped" not in cases.values(), f"{test} was skipped: nothing was measured"
    return [name for name, o in cases.items() if o == "failed"]


@pytest.mark.parametrize("stem,select,cell,test", [
    ("05_flash_attention", "never_materialises and full", NUMPY_SCORES,
     "test_never_materialises_scores_or_repeated_kv"),
    ("13_mla", "never_up_projects", NAIVE_AS_ABSORBED, "test_mla_attention_absorbed_never_up_projects_the_cache"),
    ("14_speculative_decoding", "holds_only_its_window", KEEPS_THE_STREAM,
     "test_draft_window_cache_holds_only_its_window"),
    ("10_context_parallel", "sends_only_the_ring_bytes", GATHER_THEN_PAD,
     "test_ring_attention_on_gloo_sends_only_the_ring_bytes"),
    ("10_context_parallel", "holds_no_more", GATHER_WITHOUT_PADDING, "test_ring_attention_holds_no_more_on_more_ranks"),
    ("10_context_parallel", "holds_no_more", GATHER_THEN_FOLD, "test_ring_attention_holds_no_more_on_more_ranks"),
], ids=["5.5-numpy-score-matrix", "13.2-naive-as-absorbed", "14.8-keeps-the-stream", "10.6-gather-then-pad",
        "10.6-gather-without-padding", "10.6-gather-then-fold"])
def test_a_rule_about_how_is_measured_from_outside(tmp_path, stem, select, cell, test):
    """The values are right, so every case of the measured test must fail on the measure."""
    outcomes = grade(tmp_path, stem, select, cell)
    cases = [name for name in outcomes if name.startswith(test)]
    assert sorted(_failed(outcomes, test)) == sorted(cases), outcomes


@pytest.mark.parametrize("stem,select,wrong,forgery,inside_test", [
    ("03_quantized_kv_cache", "quantize_int8", NAN_ON_THE_WAY, BLIND_WATCH, "test_quantize_int8_zero_rows_make_no_nan"),
    ("04_sliding_window_sinks", "ring", REALLOCATES, CONSTANT_ADDRESS, "test_ring_buffers_are_never_reallocated"),
    ("10_context_parallel", "sends", GATHER_WITHOUT_PADDING, FORGED_SEND_COUNT,
     "test_ring_attention_on_gloo_sends_through_isend"),
], ids=["3.1-blind-nan-watch", "4.2-constant-data-ptr", "10.6-forged-send-count"])
def test_a_forged_inside_check_earns_nothing_else(tmp_path, stem, select, wrong, forgery, inside_test):
    """Unforged, the inside test fails; forged, every other test ends exactly as unforged."""
    honest = grade(tmp_path, stem, select, wrong)
    forged = grade(tmp_path, stem, select, wrong, forgery)
    assert _failed(honest, inside_test), honest
    others = {n for n in honest if not n.startswith(inside_test)}
    assert {n: forged.get(n) for n in others} == {n: honest[n] for n in others}
