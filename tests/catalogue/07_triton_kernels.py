"""Wrong implementations of Chapter 7 that the graders must reject.

Each bug runs only against its exercise's graders (``tests=``): every grader batch
starts a child process and runs kernels through the interpreter, and the other
exercises would pass anyway.

The three after "the right values without the kernel" compute the right values with
PyTorch: only the rule that the exercise's kernel computes the result rejects them
(grading.judge.triton_launch; the first and the last never launch the kernel, which the
notebook's text shows; the second launches it and returns another tensor, which only the
launch's stores show). The five after "accepted by the interpreter" are kernels the interpreter runs correctly
(every value test passes; tried) and the GPU compiler rejects: only ``test_compiles_for_gpu``
can catch them. The last ones misread the compiler's report (Exercises 7.6 and 7.7)."""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '7.1': "Triton's programming model",
    '7.2': 'A fused softmax',
    '7.3': 'Flash attention forward',
    '7.4': 'Flash attention forward',
    '7.5': 'Paged decode attention',
    '7.6': 'Performance on a GPU',
    '7.7': 'Performance on a GPU',
}

BUGS = [
    Bug("grid_rounded_down", "7.1", "sizes the grid with n // BLOCK_SIZE, so the last partial block gets no program",
        old="grid = (triton.cdiv(n, block_size),)", new="grid = (n // block_size,)", tests="vector_add"),
    Bug("load_without_mask", "7.2",
        "loads the row without a mask: the padding lanes read the next row (or past the tensor) instead of -inf",
        old='x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=float("-inf")).to(tl.float32)',
        new="x = tl.load(in_ptr + row * in_row_stride + cols).to(tl.float32)", tests="softmax"),
    Bug("row_stride_from_wrong_dimension", "7.2", "passes the column stride x.stride(1) as the row stride",
        old="softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols,",
        new="softmax_kernel[(n_rows,)](out, x, x.stride(1), out.stride(0), n_cols,", tests="softmax"),
    Bug("no_max_subtraction", "7.2", "exponentiates the raw scores, which overflows for large logits",
        old="x = x - tl.max(x, axis=0)  # the largest exponent is 0: no overflow", new="x = x", tests="softmax"),
    Bug("key_stride_from_wrong_dimension", "7.3",
        "passes k's head-dimension stride where its token stride belongs (and the other way round)",
        old="k.stride(0), k.stride(1), k.stride(2), k.stride(3),",
        new="k.stride(0), k.stride(1), k.stride(3), k.stride(2),", tests="flash_attention"),
    Bug("gqa_head_interleaved", "7.3",
        "maps query head h to KV head h % num_kv_heads (as k.repeat would) instead of h // group",
        old="off_kvh = off_h // GROUP  # GQA: GROUP consecutive query heads read one KV head",
        new="off_kvh = off_h % (num_heads // GROUP)", tests="flash_attention"),
    Bug("lse_in_base_2", "7.3", "returns the log-sum-exp in base 2, as the kernel computes it, without the ln 2 factor",
        old="lse = (m_i + tl.math.log2(l_i)) * LN_2", new="lse = m_i + tl.math.log2(l_i)", tests="flash_attention"),
    Bug("accumulator_in_fp16", "7.3",
        "keeps the running sum of p @ v in fp16: it loses three digits and overflows past 65504",
        old="        acc = acc * alpha[:, None]\n        acc = tl.dot(p.to(v.dtype), v, acc)",
        new="        acc = (acc * alpha[:, None]).to(tl.float16)\n"
            "        acc = (acc + tl.dot(p.to(v.dtype), v)).to(tl.float16)", tests="flash_attention"),
    Bug("causal_loop_one_block_short", "7.4", "stops the key loop before the diagonal block (start_m * BLOCK_M)",
        old="return tl.minimum((start_m + 1) * BLOCK_M, seq_len)", new="return tl.minimum(start_m * BLOCK_M, seq_len)",
        tests="causal"),
    Bug("causal_loop_end_from_a_row", "7.4",
        "reads start_m as the block's first row, as blocked_matmul's offsets are, not as the query block's index",
        old="return tl.minimum((start_m + 1) * BLOCK_M, seq_len)", new="return tl.minimum(start_m + BLOCK_M, seq_len)",
        tests="causal"),
    Bug("causal_no_early_exit", "7.4", "walks every key block and relies on the mask: right, but twice the work",
        old="return tl.minimum((start_m + 1) * BLOCK_M, seq_len)", new="return seq_len", tests="causal"),
    Bug("causal_mask_excludes_diagonal", "7.4", "masks j >= i instead of j > i, so a query cannot see itself",
        old="offs_m[:, None] >= offs_n[None, :]", new="offs_m[:, None] > offs_n[None, :]", tests="causal"),
    Bug("block_table_ignored", "7.5", "reads logical page t // page_size as if it were the physical page",
        old="page = tl.load(Block_tables + off_b * stride_tb + (offs_t // page_size) * stride_tp, mask=valid, other=0)",
        new="page = offs_t // page_size", tests="paged_decode"),
    Bug("paged_gqa_no_grouping", "7.5", "reads KV head h for query head h, ignoring GQA",
        old="    off_kvh = off_h // GROUP\n    seq_len = tl.load(Seq_lens + off_b)",
        new="    off_kvh = off_h\n    seq_len = tl.load(Seq_lens + off_b)", tests="paged_decode"),
    # -- out of bounds: the values are right, the memory is not (grading.contestant.triton_bounds) --------------
    Bug("vector_add_ignores_strides", "7.1", "hands the kernel a strided view (x[::2]) as it is, whose unit-stride "
        "pointers then read the elements in between",
        old="    x, y = x.contiguous(), y.contiguous()  # the kernel walks both with unit stride\n",
        new="", tests="vector_add"),
    Bug("vector_loads_without_mask", "7.1",
        "loads x and y without the mask: the last block reads past both tensors, and the masked store hides it",
        old="x = tl.load(x_ptr + offsets, mask=mask)\n    y = tl.load(y_ptr + offsets, mask=mask)",
        new="x = tl.load(x_ptr + offsets)\n    y = tl.load(y_ptr + offsets)", tests="vector_add"),
    Bug("flash_query_load_without_mask", "7.3",
        "loads the query block without the row mask: the rows past seq_len read past q, and the masked stores "
        "throw their results away",
        old="q = tl.load(q_ptrs, mask=row_mask, other=0.0)", new="q = tl.load(q_ptrs)", tests="flash_attention"),
    Bug("paged_block_table_load_without_mask", "7.5",
        "loads the block table without the mask: the tokens past seq_len read table entries past the end of the "
        "row, and past the end of block_tables in the last row",
        old="page = tl.load(Block_tables + off_b * stride_tb + (offs_t // page_size) * stride_tp, mask=valid, other=0)",
        new="page = tl.load(Block_tables + off_b * stride_tb + (offs_t // page_size) * stride_tp)",
        tests="paged_decode"),
    # -- the right values without the kernel (grading.judge.triton_launch) --------------------------------
    Bug("vector_add_in_torch", "7.1", "returns x + y computed by PyTorch and never launches add_kernel",
        old="    add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)\n    return out", new="    return x + y",
        tests="vector_add"),
    Bug("vector_add_result_not_the_kernels", "7.1",
        "launches add_kernel, then returns x + y computed by PyTorch instead of the tensor the kernel wrote",
        old="    add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)\n    return out",
        new="    add_kernel[grid](x, y, out, n, BLOCK_SIZE=block_size)\n    return x + y", tests="vector_add"),
    Bug("softmax_in_torch", "7.2", "returns torch.softmax in fp32 and never launches softmax_kernel",
        old="    if n_rows:\n        softmax_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols,\n"
            "                                  BLOCK_SIZE=triton.next_power_of_2(n_cols))\n    return out",
        new="    return torch.softmax(x.float(), dim=-1).to(x.dtype)", tests="softmax"),
    # -- accepted by the interpreter, rejected by the compiler -------------------------------------
    Bug("lse_global_float", "7.3",
        "divides by the notebook's global LOG2_E, a Python float: the interpreter reads it, the compiler "
        "only reads globals that are tl.constexpr",
        old="lse = (m_i + tl.math.log2(l_i)) * LN_2", new="lse = (m_i + tl.math.log2(l_i)) / LOG2_E", tests="compiles"),
    Bug("stats_in_input_dtype", "7.3",
        "starts the running max in the input dtype; the loop makes it fp32, and the compiler requires a loop "
        "variable to keep its type",
        old='m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)',
        new='m_i = tl.full([BLOCK_M], float("-inf"), dtype=q.dtype)', tests="compiles"),
    Bug("loop_exit_with_break", "7.3",
        "walks every key block and leaves the loop with break at the causal limit: Triton has no break",
        old="    for start_n in range(0, hi, BLOCK_N):\n",
        new="    for start_n in range(0, seq_len, BLOCK_N):\n        if start_n >= hi:\n            break\n",
        tests="compiles"),
    Bug("key_block_of_8", "7.3",
        "shrinks the key block to 8 (quicker under the interpreter): tl.dot(p, v) then has an inner dimension "
        "of 8, and the GPU's tensor-core dot needs at least 16",
        old='_check_block("block_n", block_n, 16)', new="block_n = 8  # small blocks: the interpreter is quicker",
        tests="compiles"),
    Bug("paged_max_keep_dims", "7.5",
        "takes the block max with keep_dims=True: the scalar running max becomes a (1,) block inside the loop, "
        "which NumPy broadcasts and the compiler rejects",
        old="m_new = tl.maximum(m_i, tl.max(s, 0))", new="m_new = tl.maximum(m_i, tl.max(s, 0, keep_dims=True))",
        tests="compiles"),
]

# -- Exercises 7.6 and 7.7: occupancy and block configuration from ptxas's report --------------
BUGS += [
    Bug("occupancy_no_register_unit", "7.6",
        "gives each warp exactly 32 x registers_per_thread registers, without rounding up to the 256-register unit",
        old="registers_per_warp = units * REGISTER_ALLOCATION_UNIT",
        new="registers_per_warp = registers_per_thread * WARP_SIZE", tests="occupancy"),
    Bug("occupancy_threads_not_warps", "7.6",
        "allocates registers to the whole program (registers x threads, rounded to 256) instead of warp by warp",
        old='"registers": warps_by_registers // warps_per_block,',
        new='"registers": REGISTERS_PER_SM // (-(-registers_per_thread * threads_per_block // '
            'REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT),', tests="occupancy"),
    Bug("occupancy_whole_register_file", "7.6",
        "divides the whole 64K register file by the registers of a warp, ignoring the four sub-partitions",
        old="warps_by_registers = SUB_PARTITIONS * (REGISTERS_PER_SM // SUB_PARTITIONS // registers_per_warp)",
        new="warps_by_registers = REGISTERS_PER_SM // registers_per_warp", tests="occupancy"),
    Bug("occupancy_warps_rounded_down", "7.6", "counts threads_per_block // 32 warps: a partial warp is not free",
        old="warps_per_block = -(-threads_per_block // WARP_SIZE)",
        new="warps_per_block = threads_per_block // WARP_SIZE", tests="occupancy"),
    Bug("occupancy_no_reserved_shared", "7.6", "forgets the 1 KiB of shared memory CUDA reserves per program",
        old="(shared_bytes_per_block + RESERVED_SHARED_PER_BLOCK)", new="(shared_bytes_per_block)", tests="occupancy"),
    Bug("occupancy_no_shared_unit", "7.6", "divides by the exact bytes, not rounded up to the 128-byte unit",
        old='"shared memory": SHARED_BYTES_PER_SM[arch] // (shared_units * SHARED_ALLOCATION_UNIT),',
        new='"shared memory": SHARED_BYTES_PER_SM[arch] // (shared_bytes_per_block + RESERVED_SHARED_PER_BLOCK),',
        tests="occupancy"),
    # Written inside occupancy (not in the given SHARED_BYTES_PER_SM) so that it changes 7.6's
    # code alone (tests/meta/test_independence.py).
    Bug("occupancy_kilobytes_not_kibibytes", "7.6", "reads 228 KB and 164 KB as 228,000 and 164,000 bytes",
        old='"shared memory": SHARED_BYTES_PER_SM[arch] // (shared_units * SHARED_ALLOCATION_UNIT),',
        new='"shared memory": {"sm_80": 164_000, "sm_90": 228_000}[arch] // (shared_units * SHARED_ALLOCATION_UNIT),',
        tests="occupancy"),
    Bug("config_spills_are_fine", "7.7", "keeps configurations that spill, as long as their registers fit",
        old="if spilled == 0 and programs_per_sm * num_warps <= warps_by_registers:",
        new="if programs_per_sm * num_warps <= warps_by_registers:", tests="block_config"),
    Bug("config_spill_stores_only", "7.7", "reads the spill stores and ignores the spill loads",
        old=r'r"(\d+) bytes spill (?:stores|loads)"', new=r'r"(\d+) bytes spill stores"', tests="block_config"),
    Bug("config_no_register_unit", "7.7", "gives each warp exactly 32 x R registers, without the 256-register unit",
        old="units = -(-int(used.group(1)) * WARP_SIZE // REGISTER_ALLOCATION_UNIT)",
        new="units = int(used.group(1)) * WARP_SIZE / REGISTER_ALLOCATION_UNIT", tests="block_config"),
    Bug("config_registers_per_warp_not_thread", "7.7",
        "reads 'Used R registers' as registers per warp, not per thread (forgets the 32 threads)",
        old="units = -(-int(used.group(1)) * WARP_SIZE // REGISTER_ALLOCATION_UNIT)",
        new="units = -(-int(used.group(1)) // REGISTER_ALLOCATION_UNIT)", tests="block_config"),
    Bug("config_whole_register_file", "7.7", "ignores the four register sub-partitions",
        old="warps_by_registers = SUB_PARTITIONS * (REGISTERS_PER_SM // SUB_PARTITIONS\n"
            "                                               // (units * REGISTER_ALLOCATION_UNIT))",
        new="warps_by_registers = REGISTERS_PER_SM // (units * REGISTER_ALLOCATION_UNIT)", tests="block_config"),
    Bug("config_most_warps_on_ties", "7.7", "breaks a tie between equal tiles towards more warps",
        old="key=lambda c: (c[0] * c[1], c[0], -c[2], c[3])", new="key=lambda c: (c[0] * c[1], c[0], c[2], c[3])",
        tests="block_config"),
    Bug("config_largest_block_m_first", "7.7", "ranks by BLOCK_M first, then BLOCK_N, instead of the tile's area",
        old="key=lambda c: (c[0] * c[1], c[0], -c[2], c[3])", new="key=lambda c: (c[0], c[1], -c[2], c[3])",
        tests="block_config"),
]
