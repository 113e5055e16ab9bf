"""Wrong implementations of Chapter 2 that the graders must reject."""

from grading.notebook.catalogue import Bug

# Where a diagnosis sends the student: the title of the section that teaches each exercise.
SECTIONS = {
    '2.1': 'Pages, block tables and a free list',
    '2.2': 'Pages, block tables and a free list',
    '2.3': 'Growing a sequence, and running out',
    '2.4': 'Attention through the block table',
    '2.5': 'Sharing a prefix: fork, reference counts and copy-on-write',
    '2.6': 'Attention through the block table',
    '2.7': 'A simulated serving workload',
}

BUGS = [
    Bug("pages_floor_not_ceil", "2.1", "divides with floor, so the partial last page is not counted",
        code="_check_int(\"num_tokens\", num_tokens, minimum=0)\n_check_int(\"page_size\", page_size)\n"
             "return num_tokens // page_size", tests="pages_needed"),
    Bug("allocation_keeps_pages_it_got", "2.2", "pops pages one at a time and raises when the list runs dry, "
        "leaking the pages it already took",
        old="        if n > len(self.free_pages):\n"
            "            # Check before popping anything: a half-done allocation would leak pages.\n"
            "            raise OutOfPages(n, len(self.free_pages))\n"
            "        pages = [self.free_pages.pop() for _ in range(n)]\n",
        new="        pages = []\n"
            "        for _ in range(n):\n"
            "            if not self.free_pages:\n"
            "                raise OutOfPages(n, len(pages))\n"
            "            pages.append(self.free_pages.pop())\n", tests="allocator"),
    Bug("decref_frees_at_any_count", "2.2",
        "returns a page to the free list on every decref, not when the count reaches 0",
        old="self.refcount[page] -= 1\n            if self.refcount[page] == 0:",
        new="self.refcount[page] -= 1\n            if True:", tests="allocator"),
    Bug("append_replaces_pages", "2.3",
        "puts the newly allocated pages in place of the sequence's pages instead of after them",
        old="table = table + pages  #", new="table = pages if pages else table  #", tests="append"),
    Bug("write_into_shared_page", "2.3",
        "writes into a partially filled page that a fork still shares (no copy-on-write)",
        old="copy_last = old_len % self.page_size != 0 and",
        new="copy_last = False and old_len % self.page_size != 0 and", tests="append"),
    Bug("copy_on_write_keeps_reference", "2.3", "copies the shared page but never drops its reference to the original",
        old="        self.allocator.decref([table[-1]])\n", new="", tests="append"),
    Bug("copy_on_write_any_shared_page", "2.3", "copies the shared last page even when it is full, wasting a page",
        old="copy_last = old_len % self.page_size != 0 and", new="copy_last = old_len > 0 and", tests="append"),
    Bug("gather_table_sorted", "2.4", "reads the pages in ascending page-id order instead of block-table order",
        old="table = torch.tensor(self.block_tables[seq_id], dtype=torch.long)",
        new="table = torch.tensor(sorted(self.block_tables[seq_id]), dtype=torch.long)", tests="gather"),
    Bug("fork_without_incref", "2.5", "shares the block table without counting the new references",
        old="    self.allocator.incref(table)\n", new="", tests="fork"),
    Bug("free_fork_frees_shared_pages", "2.5", "freeing a fork returns every page to the pool, shared or not",
        old="    self.allocator.decref(table)\n",
        new="    for page in table:\n"
            "        self.allocator.refcount[page] = 0\n"
            "        if page not in self.allocator.free_pages:\n"
            "            self.allocator.free_pages.append(page)\n", tests="fork"),
    Bug("fork_shares_the_list", "2.5", "hands the fork the parent's own block-table list, so a page appended to "
        "one sequence appears in the other's table", old="    self.block_tables[dst] = list(table)\n",
        new="    self.block_tables[dst] = table\n", tests="fork"),
    Bug("fork_forgets_length", "2.5", "forks without copying the length, so the fork looks empty",
        old="    self.seq_lens[dst] = self.seq_lens[src]\n", new="    self.seq_lens[dst] = 0\n", tests="fork"),
    Bug("attention_padding_unmasked", "2.6",
        "lets the query attend to the unused slots of the last page and the padding",
        old="    scores = scores.masked_fill(~valid[:, None, None, :], float(\"-inf\"))\n", new="", tests="attention"),
    Bug("attention_gqa_interleaved", "2.6", "maps query head h to KV head h % H_kv instead of h // (H / H_kv)",
        old="qg = q.float().reshape(B, H_kv, H // H_kv, d)",
        new="qg = q.float().reshape(B, H // H_kv, H_kv, d).transpose(1, 2)", tests="attention"),
    Bug("attention_table_sorted", "2.6", "reads each block table in ascending page-id order",
        old="padded[b, : len(t)] = torch.tensor(t, dtype=torch.long)",
        new="padded[b, : len(t)] = torch.tensor(sorted(t), dtype=torch.long)", tests="attention"),
    Bug("attention_ignores_scale", "2.6", "always scales by 1/sqrt(head_dim), ignoring the scale argument",
        old="scale = 1.0 / math.sqrt(d) if scale is None else scale", new="scale = 1.0 / math.sqrt(d)",
        tests="attention"),
    Bug("usage_counts_shared_pages_per_sequence", "2.7", "counts a shared page once per sequence that uses it",
        code="if not isinstance(cache, PagedKVCache):\n"
             "    raise TypeError(f\"cache must be a PagedKVCache, got {type(cache).__name__}\")\n"
             "filled = sum(cache.seq_lens.values())\n"
             "allocated = sum(len(t) for t in cache.block_tables.values()) * cache.page_size\n"
             "return filled, allocated", tests="usage"),
]
