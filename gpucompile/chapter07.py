"""What Chapter 7 compiles: the signature of each graded kernel and the block sizes it uses.

The graders (tests/test_07_triton_kernels.py), the chapter and the benchmark compile the
same kernels with the same arguments from here. Pointers are bf16, the dtype a GPU runs
them in; every kernel is compiled for ``sm_80`` (A100) and ``sm_90`` (H100).
"""

from __future__ import annotations

ARCHS = ("sm_80", "sm_90")
HEAD_DIM = 128  # the head dimension of the GPU benchmark (and of most large models)
# The wrappers' default launch parameters in solutions/07_triton_kernels.ipynb.
FLASH_DEFAULTS = {"block_m": 32, "block_n": 32, "num_warps": 4, "num_stages": 2}
VECTOR_BLOCK = 128  # vector_add's default block_size
SOFTMAX_COLS = 1000  # the chapter's rows; softmax's block is next_power_of_2(n_cols)
PAGED_BLOCK_N = 16  # paged_decode_attention's default block_n
GQA_GROUP = 4  # query heads per KV head where a kernel is compiled with GQA (32 query heads, 8 KV heads)


def _signature(kernel, pointers: dict, floats=()) -> dict:
    """Every runtime (not tl.constexpr) argument of ``kernel``: the named pointers, fp32 floats, the rest i32."""
    from gpucompile import as_jit

    params = as_jit(kernel).params
    return {p.name: pointers.get(p.name, "fp32" if p.name in floats else "i32") for p in params if not p.is_constexpr}


def add_request(nb, arch: str) -> dict:
    sig = _signature(nb.add_kernel, {"x_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*bf16"})
    return dict(kernel=nb.add_kernel, signature=sig, constexprs={"BLOCK_SIZE": VECTOR_BLOCK}, arch=arch,
                num_warps=4, num_stages=3)


def softmax_request(nb, arch: str) -> dict:
    sig = _signature(nb.softmax_kernel, {"out_ptr": "*bf16", "in_ptr": "*bf16"})
    block = 1 << (SOFTMAX_COLS - 1).bit_length()  # triton.next_power_of_2
    return dict(kernel=nb.softmax_kernel, signature=sig, constexprs={"BLOCK_SIZE": block}, arch=arch,
                num_warps=4, num_stages=3)


def flash_request(kernel, arch: str = "sm_90", *, block_m: int = FLASH_DEFAULTS["block_m"],
                  block_n: int = FLASH_DEFAULTS["block_n"], num_warps: int = FLASH_DEFAULTS["num_warps"],
                  num_stages: int = FLASH_DEFAULTS["num_stages"], head_dim: int = HEAD_DIM, causal: bool = False,
                  group: int = 1) -> dict:
    """flash_fwd_kernel (Exercise 7.3) for bf16 q, k, v and out, fp32 lse."""
    pointers = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16", "Lse": "*fp32"}
    sig = _signature(kernel, pointers, floats=("qk_scale",))
    constexprs = {"GROUP": group, "HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": causal}
    return dict(kernel=kernel, signature=sig, constexprs=constexprs, arch=arch, num_warps=num_warps,
                num_stages=num_stages)


def paged_request(nb, arch: str) -> dict:
    pointers = {"Q": "*bf16", "K_pages": "*bf16", "V_pages": "*bf16", "Out": "*bf16", "Block_tables": "*i32",
                "Seq_lens": "*i32"}
    sig = _signature(nb.paged_decode_kernel, pointers, floats=("qk_scale",))
    return dict(kernel=nb.paged_decode_kernel, signature=sig,
                constexprs={"GROUP": GQA_GROUP, "HEAD_DIM": HEAD_DIM, "BLOCK_N": PAGED_BLOCK_N}, arch=arch,
                num_warps=4, num_stages=3)


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
        raise RuntimeError(f"expected the wrapper of Exercise {exercise} to launch one kernel, it launched {len(launched)}")
    return launched[0]
