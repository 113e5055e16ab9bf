"""Wrong implementations of Chapter 1 that the graders must reject."""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '1.1': 'Bytes per token',
    '1.2': 'Memory against context length',
    '1.3': 'Bytes per token',
    '1.4': 'Capacity planning: what fits on one device',
    '1.5': 'What different attention designs cache',
    '1.6': 'Capacity planning: what fits on one device',
}

BUGS = [
    Bug("forgot_factor_2_for_k_and_v", "1.1", "counts only the keys (or only the values)",
        code="return num_layers * num_kv_heads * head_dim * DTYPE_BITS[dtype] // BITS_PER_BYTE"),
    Bug("int4_rounded_to_a_byte", "1.1", "stores int4 as one byte per element",
        code="return 2 * num_layers * num_kv_heads * head_dim * max(1, DTYPE_BITS[dtype] // BITS_PER_BYTE)"),
    Bug("float_bytes_per_token", "1.1", "returns a float from true division",
        code="return 2 * num_layers * num_kv_heads * head_dim * DTYPE_BITS[dtype] / BITS_PER_BYTE"),
    Bug("query_heads_for_kv_heads", "1.5", "uses the query heads instead of the KV heads",
        old="elements_per_layer = 2 * config.num_kv_heads * config.head_dim",
        new="elements_per_layer = 2 * config.num_heads * config.head_dim"),
    Bug("mla_counted_twice", "1.5", "applies the K-and-V factor 2 to MLA's single latent",
        old="elements_per_layer = config.kv_lora_rank + config.rope_head_dim",
        new="elements_per_layer = 2 * (config.kv_lora_rank + config.rope_head_dim)"),
    Bug("window_applied_to_global_layers", "1.5", "caps every layer at the window, global ones too",
        old="layer_tokens = config.num_global_layers * seq_len + local_layers * min(seq_len, config.window)",
        new="layer_tokens = config.num_layers * min(seq_len, config.window)"),
    Bug("gb_for_gib", "1.3", "uses powers of 1000 for the binary units",
        old="base = 1024 if unit.endswith(\"iB\") else 1000", new="base = 1000"),
    Bug("float_token_count", "1.4", "divides in floating point, which rounds past 2**53",
        old="tokens = budget // bytes_per_token", new="tokens = int(budget / bytes_per_token)"),
    Bug("not_rounded_to_pages", "1.4", "ignores page_size, so a partial page is counted",
        old="tokens = tokens // page_size * page_size", new="tokens = tokens"),
    Bug("negative_budget_returned", "1.4", "returns a negative count when the weights do not fit",
        old="    if budget <= 0:\n        return 0\n", new=""),
    Bug("pages_rounded_down_per_sequence", "1.6", "rounds a sequence's pages down, losing its last partial page",
        old="-(-seq_len // page_size) * page_size", new="seq_len // page_size * page_size or page_size"),
    Bug("convert_bytes_rounded", "1.3", "rounds the result to three decimals, as a table would print it",
        old="return num_bytes / base**power", new="return round(num_bytes / base**power, 3)"),
]
