"""What Chapter 7 compiles: the signature of each graded kernel and the block sizes it uses.

The graders (tests/test_07_triton_kernels.py), the chapter and the benchmark compile the
same kernels with the same arguments from here. Pointers are bf16, the dtype a GPU runs
them in; every graded kernel is compiled for ``sm_80`` (A100) and ``sm_90`` (H100), as its
wrapper launches it (``gpucompile.capture_launches``).
"""

from __future__ import annotations

ARCHS = ("sm_80", "sm_90")
HEAD_DIM = 128  # the head dimension of the GPU benchmark (and of most large models)
# The wrappers' default launch parameters in solutions/07_triton_kernels.ipynb.
FLASH_DEFAULTS = {"block_m": 32, "block_n": 32, "num_warps": 4, "num_stages": 2}
SOFTMAX_COLS = 1000  # the chapter's rows; softmax's block is next_power_of_2(n_cols)
GQA_GROUP = 4  # query heads per KV head where a kernel is compiled with GQA (32 query heads, 8 KV heads)


def flash_request(kernel, arch: str = "sm_90", *, block_m: int = FLASH_DEFAULTS["block_m"],
                  block_n: int = FLASH_DEFAULTS["block_n"], num_warps: int = FLASH_DEFAULTS["num_warps"],
                  num_stages: int = FLASH_DEFAULTS["num_stages"], batch_size: int = 2, num_heads: int = 16,
                  num_kv_heads: int = 16, seq_len: int = 8192, head_dim: int = HEAD_DIM, causal: bool = False) -> dict:
    """flash_fwd_kernel (Exercise 7.3) as flash_attention would launch it for contiguous bf16
    q, k, v of shape (batch_size, num_heads or num_kv_heads, seq_len, head_dim): the same
    arguments, specialised as a launch is, without a GPU or a tensor (Triton's MockTensor)."""
    import math

    import torch
    from triton.runtime.jit import MockTensor

    from gpucompile import as_jit, specialize

    def strides(h):  # contiguous (B, h, N, d)
        return [h * seq_len * head_dim, seq_len * head_dim, head_dim, 1]

    args = [MockTensor(torch.bfloat16)] * 4 + [MockTensor(torch.float32)]
    args += strides(num_heads) + strides(num_kv_heads) * 2 + strides(num_heads) + [num_heads * seq_len, seq_len, 1]
    args += [seq_len, num_heads, 1.4426950408889634 / math.sqrt(head_dim)]
    args += [num_heads // num_kv_heads, head_dim, block_m, block_n, bool(causal)]
    values = dict(zip(as_jit(kernel).arg_names, args, strict=True))
    return dict(kernel=kernel, **specialize(kernel, values), arch=arch, num_warps=num_warps, num_stages=num_stages)


# The kernel each exercise's compile check compiles; the case id is "<name>-<arch>".
GRADED_CASES = {"7.1": "add_kernel", "7.2": "softmax_kernel", "7.3": "flash_fwd_kernel",
                "7.4": "flash_fwd_kernel-causal-gqa", "7.5": "paged_decode_kernel-gqa"}
# The functions each exercise writes (a stub among them raises NotImplementedError).
GRADED_KERNELS = {"7.1": ("add_kernel",), "7.2": ("softmax_kernel",), "7.3": ("flash_fwd_kernel",),
                  "7.4": ("causal_loop_end", "causal_mask"), "7.5": ("paged_decode_kernel",)}


def case_ids(exercise: str) -> list[str]:
    if exercise not in GRADED_CASES:
        raise ValueError(f"exercise must be one of {sorted(GRADED_CASES)}, got {exercise!r}")
    return [f"{GRADED_CASES[exercise]}-{arch}" for arch in ARCHS]


def graded_request(nb, exercise: str, cid: str) -> dict:
    """The compile request of one case of ``case_ids(exercise)``: what the notebook's wrapper
    launches (its own block sizes, num_warps and num_stages) for bf16 inputs of the chapter's
    shapes, captured instead of run (``gpucompile.capture_launches``). 7.3 is the flash kernel
    without a mask and without GQA; 7.4 the same kernel causal and with GQA (its helpers compiled
    into it); 7.5 paged decode with GQA. Needs a notebook loaded with TRITON_INTERPRET=0."""
    import torch

    from gpucompile import capture_launches

    if cid not in case_ids(exercise):
        raise ValueError(f"cid must be one of {case_ids(exercise)}, got {cid!r}")
    arch = cid.rsplit("-", 1)[1]
    bf16 = torch.bfloat16
    with capture_launches(arch) as launched:
        if exercise == "7.1":
            nb.vector_add(torch.zeros(1000, dtype=bf16), torch.zeros(1000, dtype=bf16))
        elif exercise == "7.2":
            nb.softmax(torch.zeros(4, SOFTMAX_COLS, dtype=bf16))
        elif exercise in ("7.3", "7.4"):
            heads, kv_heads = (GQA_GROUP * 2, 2) if exercise == "7.4" else (2, 2)
            q = torch.zeros(1, heads, 256, HEAD_DIM, dtype=bf16)  # (B, H, N, d)
            k = torch.zeros(1, kv_heads, 256, HEAD_DIM, dtype=bf16)  # (B, H_kv, N, d)
            nb.flash_attention(q, k, k.clone(), causal=exercise == "7.4")
        else:
            q = torch.zeros(2, GQA_GROUP * 2, HEAD_DIM, dtype=bf16)  # (B, H, d)
            pages = torch.zeros(4, 16, 2, HEAD_DIM, dtype=bf16)  # (num_pages, page_size, H_kv, d)
            tables = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
            nb.paged_decode_attention(q, pages, pages.clone(), tables, torch.tensor([20, 32], dtype=torch.int32))
    if len(launched) != 1:
        raise RuntimeError(f"expected the wrapper of Exercise {exercise} to launch one kernel, "
                           f"it launched {len(launched)}")
    return launched[0]


# -- limits of the targets -----------------------------------------------------------------------
# NVIDIA Hopper and Ampere tuning guides (references.bib: nvidia_hopper_tuning, nvidia_ampere_tuning):
# 64K 32-bit registers per SM, at most 255 per thread, 64 resident warps and 32 resident blocks per
# SM; shared memory per SM 228 KiB (H100) or 164 KiB (A100), of which CUDA reserves 1 KiB per block.
SM_LIMITS = {
    "sm_90": {"registers": 65536, "max_registers_per_thread": 255, "warps": 64, "blocks": 32,
              "shared_bytes": 228 * 1024, "reserved_shared_per_block": 1024},
    "sm_80": {"registers": 65536, "max_registers_per_thread": 255, "warps": 64, "blocks": 32,
              "shared_bytes": 164 * 1024, "reserved_shared_per_block": 1024},
}
# The occupancy that follows from these limits is Exercise 7.6 (solutions/07_triton_kernels.ipynb);
# it is not written here, where the student edition ships it.


# -- a roofline for the forward pass -------------------------------------------------------------
# Dense BF16 tensor-core peak and HBM bandwidth from NVIDIA's datasheets (nvidia2022h100, nvidia2024h200).
GPUS = {"H100 SXM": {"flops": 989e12, "bytes_per_s": 3.35e12}, "H200": {"flops": 989e12, "bytes_per_s": 4.8e12}}


def flash_forward_cost(batch_size: int, num_heads: int, seq_len: int, head_dim: int, *, causal: bool,
                       block_m: int, elem_bytes: int = 2) -> dict:
    """FLOPs and HBM bytes of the forward kernel. FLOPs: the two products q k^T and p v,
    2 N^2 d each per head (half of it causal). Bytes, two bounds: ``compulsory`` reads q, k, v
    and writes out once (and the fp32 lse); ``no_reuse`` adds that each of the N / BLOCK_M
    programs of a head reads all of K and V it visits from HBM, as if the L2 cache kept nothing."""
    frac = 0.5 if causal else 1.0
    heads = batch_size * num_heads
    flops = 4 * heads * seq_len**2 * head_dim * frac
    tensor = heads * seq_len * head_dim * elem_bytes
    compulsory = 4 * tensor + heads * seq_len * 4
    programs = -(-seq_len // block_m)
    no_reuse = 2 * tensor + heads * seq_len * 4 + programs * 2 * tensor * frac
    return {"flops": flops, "compulsory_bytes": compulsory, "no_reuse_bytes": no_reuse}


def roofline_seconds(cost: dict, gpu: str, bytes_key: str = "compulsory_bytes") -> float:
    """The roofline's lower bound on the time: the slower of computing at peak and moving the bytes at peak."""
    spec = GPUS[gpu]
    return max(cost["flops"] / spec["flops"], cost[bytes_key] / spec["bytes_per_s"])


# -- what the contestant does for the graders (grading.contestant.services) -----------------------------------
# What a wrapper launches needs the notebook's objects and Triton's launch machinery, so it
# is captured in the contestant that loaded the notebook; the judge gets back plain values
# only, and compiles the graded kernels' source itself (grading.judge.triton_compile). The
# ptxas reports of 7.6 and 7.7 are inputs both the notebook and the reference are given,
# not a check, and are still compiled here.
REAL_CONFIGS = {"sm_90": [(32, 32, 4, 2), (64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2),
                          (128, 32, 4, 4), (128, 128, 4, 2)],
                "sm_80": [(64, 64, 4, 3), (128, 64, 8, 3)]}


def stub_message(nb, exercise: str) -> str | None:
    """The NotImplementedError message of a kernel (or a jitted helper it calls) that is still a stub."""
    from gpucompile import jitted_functions

    for name in GRADED_KERNELS[exercise] + (("flash_fwd_kernel",) if exercise == "7.4" else ()):
        for fn in jitted_functions(getattr(nb, name)).values():
            if "raise NotImplementedError(" in fn.src:
                return fn.src.split("raise NotImplementedError(", 1)[1].split(")")[0].strip("\"'")
    return None


def _plain(value):
    """A launch's constexpr as a plain value (``tl.constexpr(4)`` is 4, ``tl.float16`` is
    ``{"tl_dtype": "fp16"}``): only plain values cross to the judge."""
    value = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    if type(value).__name__ == "dtype" and type(value).__module__.startswith("triton"):
        return {"tl_dtype": str(value)}
    return value if isinstance(value, (int, float, bool, str, type(None))) else repr(value)[:100]


def launch_request(nb, exercise: str, cid: str) -> dict:
    """What the notebook's wrapper launches for one compile case (:func:`graded_request`),
    as plain values: ``{"kernel": name, "signature": {argument: type}, "constexprs":
    {argument: value}, "attrs": {argument: [[attribute, value]]}, "arch", "num_warps",
    "num_stages"}``. Only the launch: the judge compiles the kernel's source as it reads it
    in the notebook's file, in a process of its own (grading.judge.triton_compile), so no
    compiler runs here, where the notebook's code could answer for it."""
    request = graded_request(nb, exercise, cid)
    return {"kernel": request["kernel"].fn.__name__ if hasattr(request["kernel"], "fn") else str(request["kernel"]),
            "signature": {str(k): str(v) for k, v in request["signature"].items()},
            "constexprs": {str(k): _plain(v) for k, v in request["constexprs"].items()},
            "attrs": {str(k): [[str(a), _plain(b)] for a, b in v] for k, v in request["attrs"].items()},
            "arch": request["arch"], "num_warps": request["num_warps"], "num_stages": request["num_stages"]}


def real_reports(nb) -> dict:
    """``{arch: [[block_m, block_n, num_warps, num_stages, registers, shared_bytes, spill_bytes,
    ptxas_log], ...]}``: the notebook's flash_fwd_kernel compiled at REAL_CONFIGS."""
    from gpucompile import KernelCompileError, compile_many
    from grading.compare import GradingFailure

    stub = stub_message(nb, "7.3")  # the reference's kernel while 7.6 or 7.7 is graded alone
    if stub is not None:
        raise GradingFailure("this exercise is graded on the ptxas reports of flash_fwd_kernel "
                             f"(Exercise 7.3), which is not implemented yet: {stub}")
    requests = [(arch, cfg) for arch, cfgs in REAL_CONFIGS.items() for cfg in cfgs]
    compiled = compile_many([flash_request(nb.flash_fwd_kernel, arch, block_m=m, block_n=n, num_warps=w,
                                           num_stages=s) for arch, (m, n, w, s) in requests])
    reports: dict = {}
    for (arch, cfg), c in zip(requests, compiled):
        if isinstance(c, KernelCompileError):
            raise GradingFailure(f"this exercise is graded on the ptxas reports of flash_fwd_kernel "
                                 f"(Exercise 7.3), which does not compile with {cfg}:\n  {c}")
        reports.setdefault(arch, []).append([*cfg, c.usage.registers, c.usage.shared_bytes, c.usage.spill_bytes,
                                             c.ptxas_log])
    return reports


def file_reports(path: str) -> dict:
    """:func:`real_reports` for the ``flash_fwd_kernel`` defined in the Python file ``path``:
    the references' kernel, which Exercises 7.6 and 7.7 read where each is graded alone.
    The judge runs it in a child of its own (``python -m gpucompile.chapter07 PATH RESULT``),
    which runs that file and no notebook."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("gpucompile_flash_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return real_reports(SimpleNamespace(flash_fwd_kernel=module.flash_fwd_kernel))


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    Path(sys.argv[2]).write_text(json.dumps(file_reports(sys.argv[1])))
