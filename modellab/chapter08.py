"""What Chapter 8's grader asks the contestant to run: SmolLM2 generating through the
notebook's own ``GrowingKVCache``, in the process that holds the notebook.

The judge (``tests/test_08_model_lab.py``) never holds the student's cache: it asks the
contestant (:mod:`grading.contestant.services`, ``chapter08.generate``) to load the model from the
read-only cache the judge prepared, run our decode loop with one student cache per
layer, and send back the greedy tokens, or what the caches did when the model failed.
The judge compares the tokens with transformers' own ``generate()`` and writes the
message; only plain values cross.
"""

from __future__ import annotations

import functools
import os
import traceback
from pathlib import Path

import torch


class WatchedCache:
    """One layer's student cache as the model uses it, with what it was given and what
    it gave back, so that an error the model raises can be told in terms of the cache."""

    def __init__(self, cache, layer: int):
        self.cache, self.layer = cache, layer
        self.appended = 0
        self.returned = None  # the shapes keys_values() returned last, or its type's name

    def append(self, k, v):
        self.cache.append(k, v)
        self.appended += k.shape[2]

    def keys_values(self):
        out = self.cache.keys_values()
        self.returned = [list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__ for t in out] \
            if isinstance(out, tuple) else type(out).__name__
        return out

    def nbytes(self):
        return self.cache.nbytes()


@functools.lru_cache(maxsize=1)
def _model(folder: str):
    """Our decode loop over the checkpoint in ``folder``, which the judge converted
    (the sandbox cannot write it): loaded once per contestant."""
    from transformers import AutoModelForCausalLM

    from modellab.decode import Llama
    from modellab.load import quiet_transformers

    if not (Path(folder) / "model.safetensors").is_file():
        raise FileNotFoundError(f"the model checkpoint is not in {folder}: the judge prepares it first")
    quiet_transformers()
    hf_model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    hf_model.eval()
    return Llama(hf_model)


def _raised_in_modellab(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and f"{os.sep}modellab{os.sep}" in frames[-1].filename


def generate(notebook, initial: int, prompt_ids: torch.Tensor, max_new_tokens: int, folder: str) -> dict:
    """Greedy tokens of SmolLM2 on ``prompt_ids`` (1, T), every layer's cache a
    ``notebook.GrowingKVCache(initial)``.

    Returns ``{"tokens": [int, ...]}``, or, where the model itself failed on what a cache
    returned, ``{"failed": {"layer", "appended", "returned", "type", "message"}}`` about the
    last layer whose ``keys_values()`` returned (``layer`` is None if none did). An error
    raised in the notebook's own code propagates, so the grader shows its line."""
    ours = _model(folder)
    layers: list[WatchedCache] = []

    def make_layer():
        layers.append(WatchedCache(notebook.GrowingKVCache(initial), len(layers)))
        return layers[-1]

    try:
        tokens = ours.generate(prompt_ids, ours.new_cache(make_layer), max_new_tokens=max_new_tokens)
    except Exception as exc:
        if not _raised_in_modellab(exc):
            raise
        last = next((c for c in reversed(layers) if c.returned is not None), None)
        return {"failed": {"layer": None if last is None else last.layer,
                           "appended": 0 if last is None else last.appended,
                           "returned": None if last is None else last.returned,
                           "type": type(exc).__name__, "message": str(exc)[:2000]}}
    return {"tokens": [int(t) for t in tokens]}
