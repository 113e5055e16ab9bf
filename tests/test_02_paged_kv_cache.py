"""Graders for Chapter 2 (exercises/02_paged_kv_cache.ipynb) against tests/references.

The cache graders are of two kinds: scripted scenarios that name the mistake, and
property-based tests (hypothesis) that run random interleavings of append, fork,
free and out-of-memory attempts against ``DenseKVModel`` and check every invariant
after every step. Token values are distinct integers stored in fp32, so a round trip
is compared exactly. Examples are derandomized: every run grades the same cases.
"""

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from grading.compare import GradingFailure, assert_close, assert_equal, assert_raises, call_text, derived_atol
from tests.references import ref_02_paged_kv_cache as ref

ATOL = {torch.float32: 1e-5}
# fp16 and bf16 decode attention: derived, case by case, from the error of a correct
# fp32-accumulating implementation on the same inputs (PyTorch's SDPA over the sequence's
# keys and values, rounded to the input dtype), as in Chapters 5 and 7: a result may be off
# by LOW_PRECISION_FACTOR times that error, plus eps(dtype) / 16 where it is 0. These
# replace atol = rtol = 2e-3 (fp16) and 2e-2 (bf16).
LOW_PRECISION = (torch.float16, torch.bfloat16)
LOW_PRECISION_FACTOR = 2.0


def sdpa_decode(q, k, v, scale=None):
    """q (H, d); k, v (T, H_kv, d) in the input dtype -> (H, d) from PyTorch's SDPA."""
    H, H_kv = q.shape[0], k.shape[1]
    k4, v4 = (t.transpose(0, 1)[None].repeat_interleave(H // H_kv, dim=1) for t in (k, v))  # (1, H, T, d)
    return torch.nn.functional.scaled_dot_product_attention(q[None, :, None], k4, v4, scale=scale)[0, :, 0]


def decode_tolerance(dtype, expected, correct) -> tuple[float, float]:
    if dtype not in LOW_PRECISION:
        return ATOL[dtype], ATOL[dtype]
    return derived_atol(dtype, expected, correct, LOW_PRECISION_FACTOR), 0.0
H_KV, HEAD_DIM = 2, 2  # small rows for the bookkeeping tests: contents are compared exactly
# No shrinking: a failure reports the first failing sequence of operations (at most 25,
# and the message lists the last steps), which keeps `pytest --prove` fast when it runs
# these tests against every catalogued bug.
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))


class Tokens:
    """Distinct values for every token ever written: k = counter, v = -counter."""

    def __init__(self, num_kv_heads=H_KV, head_dim=HEAD_DIM):
        self.shape = (num_kv_heads, head_dim)
        self.next = 1

    def __call__(self, n):
        size = n * self.shape[0] * self.shape[1]
        k = torch.arange(self.next, self.next + size, dtype=torch.float32).reshape(n, *self.shape)
        self.next += size
        return k, -k


def read_through_layout(cache, seq_id):
    """Keys and values of a sequence read from the pool by the documented layout:
    token t is pool[table[t // page_size], 0 or 1, t % page_size]."""
    # Each attribute read once: a read of the notebook's object is a round trip to its process.
    table, n, ps, pool = cache.block_tables[seq_id], cache.seq_lens[seq_id], cache.page_size, cache.pool
    k = torch.stack([pool[table[t // ps], 0, t % ps] for t in range(n)])
    v = torch.stack([pool[table[t // ps], 1, t % ps] for t in range(n)])
    return k, v


def snapshot(cache):
    return (
        {s: list(t) for s, t in cache.block_tables.items()},
        dict(cache.seq_lens),
        list(cache.allocator.refcount),
        sorted(cache.allocator.free_pages),
        cache.pool.clone(),
    )


def assert_unchanged(before, cache, what):
    after = snapshot(cache)
    names = ["block_tables", "seq_lens", "allocator.refcount", "allocator.free_pages (sorted)"]
    for name, b, a in zip(names, before, after):
        if b != a:
            raise GradingFailure(f"{what} raised OutOfPages but changed the cache\n  {name} before: {b}\n"
                                 f"  {name} after:  {a}")
    if not torch.equal(before[4], after[4]):
        raise GradingFailure(f"{what} raised OutOfPages but wrote into the pool")


def check_invariants(cache, model, history, *, via_gather=False):
    """Everything a paged cache promises, compared with the dense model."""
    where = "after " + (" ; ".join(history[-8:]) or "construction")
    # Each attribute read once (a read of the notebook's object is a round trip to its process).
    block_tables, seq_lens, page_size = cache.block_tables, cache.seq_lens, cache.page_size
    if set(block_tables) != set(model.keys) or set(seq_lens) != set(model.keys):
        raise GradingFailure(f"{where}: the cache holds sequences {sorted(block_tables)} "
                             f"(seq_lens {sorted(seq_lens)}); expected {sorted(model.keys)}")
    counts = [0] * cache.num_pages
    abstract_to_page, page_to_abstract = {}, {}
    for seq, table in block_tables.items():
        n = len(model.keys[seq])
        if seq_lens[seq] != n:
            raise GradingFailure(f"{where}: seq_lens[{seq}] is {seq_lens[seq]}; expected {n}")
        if len(table) != ref.pages_needed(n, page_size):
            raise GradingFailure(f"{where}: sequence {seq} holds {n} tokens in {len(table)} page(s) {table}; "
                                 f"expected ceil({n} / {page_size}) = {ref.pages_needed(n, page_size)}")
        for i, page in enumerate(table):
            counts[page] += 1
            abstract = model.pages[seq][i]
            # The same physical page must stand for the same logical page everywhere.
            if (abstract_to_page.setdefault(abstract, page) != page
                    or page_to_abstract.setdefault(page, abstract) != abstract):
                raise GradingFailure(
                    f"{where}: block_tables[{seq}][{i}] = page {page}, but the sharing is wrong: pages may be "
                    f"shared only between a sequence and its forks, and only until one of them writes into the page "
                    f"(block tables: {block_tables})")
        got_k, got_v = cache.gather(seq) if via_gather else read_through_layout(cache, seq)
        exp_k, exp_v = model.contents(seq)
        for name, got, exp in (("keys", got_k, exp_k), ("values", got_v, exp_v)):
            if tuple(got.shape) != tuple(exp.shape) or not torch.equal(got, exp):
                bad = "shape " + str(tuple(got.shape)) if got.shape != exp.shape else \
                    f"first wrong token {int((got != exp).any(-1).any(-1).nonzero()[0])}"
                how = "gather" if via_gather else "the pool through the block table"
                raise GradingFailure(f"{where}: the {name} of sequence {seq} read from {how} are wrong ({bad}; "
                                     f"block table {table}, seq_len {n})")
    refcount = list(cache.allocator.refcount)
    if refcount != counts:
        raise GradingFailure(f"{where}: allocator.refcount is {refcount}; the block tables point at the pages "
                             f"{counts} times (a page's count is the number of table entries that use it)")
    free = list(cache.allocator.free_pages)
    expected_free = sorted(p for p in range(cache.num_pages) if counts[p] == 0)
    if sorted(free) != expected_free:
        raise GradingFailure(f"{where}: allocator.free_pages is {free}; the pages no table uses are {expected_free}")
    if len(abstract_to_page) != model.pages_in_use():
        raise GradingFailure(f"{where}: {len(abstract_to_page)} pages in use; expected {model.pages_in_use()}")


def apply_op(nb, cache, model, tokens, op, history):
    """Run one operation on both; an append the model says cannot fit must raise
    OutOfPages and leave the cache unchanged. Invalid ops (fork from a missing
    sequence, free of a missing one) are skipped."""
    kind, a = op[0], op[1]
    if kind == "append":
        n = op[2]
        k, v = tokens(n)
        text = f"append({a}, {n} tokens)"
        if model.can_append(a, n):
            history.append(text)
            cache.append(a, k, v)
            model.append(a, k, v)
            return
        history.append(text + " -> OutOfPages")
        before = snapshot(cache)
        need, free = model.pages_for_append(a, n), model.free_pages()
        try:
            cache.append(a, k, v)
        except nb.OutOfPages:
            assert_unchanged(before, cache, text)
            return
        raise GradingFailure(f"after {' ; '.join(history[-8:])}: {text} needs {need} new page(s) with {free} free, "
                             f"so it must raise OutOfPages; it returned")
    if kind == "fork":
        b = op[2]
        if a not in model.keys or b in model.keys:
            return
        history.append(f"fork({a} -> {b})")
        cache.fork(a, b)
        model.fork(a, b)
        return
    if a in model.keys:
        history.append(f"free({a})")
        cache.free(a)
        model.free(a)


SEQ = st.integers(0, 3)
APPEND = st.tuples(st.just("append"), SEQ, st.integers(1, 10))
FORK = st.tuples(st.just("fork"), SEQ, SEQ)
FREE = st.tuples(st.just("free"), SEQ)


def run_ops(nb, page_size, num_pages, ops, via_gather=False):
    cache = nb.PagedKVCache(num_pages, page_size, H_KV, HEAD_DIM)
    model = ref.DenseKVModel(num_pages, page_size)
    tokens, history = Tokens(), []
    for op in ops:
        apply_op(nb, cache, model, tokens, op, history)
        check_invariants(cache, model, history, via_gather=via_gather)


# -- Exercise 2.1 -------------------------------------------------------------------

@pytest.mark.ex2_1
@pytest.mark.core
@pytest.mark.parametrize("page_size", [1, 3, 16], ids=lambda p: f"page{p}")
@pytest.mark.parametrize("num_tokens", [0, 1, 2, 3, 15, 16, 17, 48, 49, 10**15 + 1], ids=lambda n: f"N{n}")
def test_pages_needed(nb, num_tokens, page_size):
    got = nb.pages_needed(num_tokens, page_size)
    assert_equal(got, ref.pages_needed(num_tokens, page_size), call_text("pages_needed", num_tokens, page_size))
    if not isinstance(got, int):
        raise GradingFailure(f"pages_needed returned {type(got).__name__}; a page count is an int")


@pytest.mark.ex2_1
@pytest.mark.parametrize("args,exc,names", [((-1, 16), ValueError, "num_tokens"), ((10, 0), ValueError, "page_size"),
                                            ((10.0, 16), TypeError, "num_tokens"),
                                            ((10, True), TypeError, "page_size")],
                         ids=["negative-tokens", "zero-page-size", "float-tokens", "bool-page-size"])
def test_pages_needed_rejects_bad_input(nb, args, exc, names):
    assert_raises(nb.pages_needed, *args, exc=exc, names=names)


# -- Exercise 2.2 -------------------------------------------------------------------

def check_allocator(alloc, counts, where):
    if list(alloc.refcount) != counts:
        raise GradingFailure(f"{where}: refcount is {list(alloc.refcount)}; expected {counts}")
    free = sorted(alloc.free_pages)
    expected = [p for p, c in enumerate(counts) if c == 0]
    if free != expected or len(alloc.free_pages) != len(expected) or alloc.num_free != len(expected):
        raise GradingFailure(f"{where}: free_pages is {list(alloc.free_pages)} (num_free {alloc.num_free}); "
                             f"expected the pages {expected}")


@pytest.mark.ex2_2
@pytest.mark.core
@pytest.mark.points(2)
def test_allocator_script(nb):
    alloc = nb.BlockAllocator(5)
    counts = [0] * 5
    check_allocator(alloc, counts, "BlockAllocator(5)")
    a = alloc.allocate(3)
    if len(a) != 3 or len(set(a)) != 3 or any(counts[p] for p in a):
        raise GradingFailure(f"allocate(3) on an empty allocator returned {a}; expected 3 distinct free pages")
    for p in a:
        counts[p] = 1
    check_allocator(alloc, counts, "allocate(3)")
    assert_equal(alloc.allocate(0), [], "allocate(0)")
    before = (list(alloc.free_pages), list(alloc.refcount))
    try:
        alloc.allocate(3)
    except nb.OutOfPages:
        pass
    else:
        raise GradingFailure("allocate(3) with 2 free pages must raise OutOfPages")
    if (list(alloc.free_pages), list(alloc.refcount)) != before:
        raise GradingFailure(f"allocate(3) raised OutOfPages but changed the allocator: free_pages {before[0]} -> "
                             f"{list(alloc.free_pages)}, refcount {before[1]} -> {list(alloc.refcount)}")
    alloc.incref([a[0], a[1]])
    counts[a[0]] += 1
    counts[a[1]] += 1
    check_allocator(alloc, counts, f"incref({[a[0], a[1]]})")
    freed = alloc.decref(a)
    counts = [c - 1 if p in a else c for p, c in enumerate(counts)]
    assert_equal(sorted(freed), [a[2]], f"decref({a}) (pages it freed)")
    check_allocator(alloc, counts, f"decref({a})")
    freed = alloc.decref([a[0], a[1]])
    assert_equal(sorted(freed), sorted([a[0], a[1]]), f"decref({[a[0], a[1]]}) (pages it freed)")
    check_allocator(alloc, [0] * 5, "decref of the last references")
    again = alloc.allocate(5)
    assert_equal(sorted(again), [0, 1, 2, 3, 4], "allocate(5) after everything was freed")


@pytest.mark.ex2_2
@PROPERTY
@given(num_pages=st.integers(1, 8),
       ops=st.lists(st.tuples(st.sampled_from(["allocate", "incref", "decref"]), st.integers(0, 9)), max_size=30))
def test_allocator_property(nb, num_pages, ops):
    """Random allocate/incref/decref against a dict of counts; OutOfPages exactly when
    too few pages are free, and then nothing changes."""
    alloc = nb.BlockAllocator(num_pages)
    counts = [0] * num_pages
    history = []
    for kind, x in ops:
        used = [p for p, c in enumerate(counts) if c]
        if kind == "allocate":
            n = x % (num_pages + 2)
            history.append(f"allocate({n})")
            if n > counts.count(0):
                before = (sorted(alloc.free_pages), list(alloc.refcount))
                try:
                    alloc.allocate(n)
                except nb.OutOfPages:
                    if (sorted(alloc.free_pages), list(alloc.refcount)) != before:
                        raise GradingFailure(f"after {history}: the failed allocation changed the allocator") from None
                    continue
                raise GradingFailure(f"after {history}: allocate({n}) with {counts.count(0)} free must raise "
                                     "OutOfPages")
            got = alloc.allocate(n)
            if len(got) != n or len(set(got)) != n or any(counts[p] for p in got):
                raise GradingFailure(f"after {history}: allocate({n}) returned {got}; expected {n} distinct free pages")
            for p in got:
                counts[p] = 1
        elif used:
            pages = [used[x % len(used)]]
            history.append(f"{kind}({pages})")
            getattr(alloc, kind)(pages)
            counts[pages[0]] += 1 if kind == "incref" else -1
        check_allocator(alloc, counts, f"after {history}")


@pytest.mark.ex2_2
def test_allocator_rejects_bad_input(nb):
    alloc = nb.BlockAllocator(3)
    assert_raises(alloc.allocate, -1, exc=ValueError, names="n", call="allocate(-1)")
    assert_raises(alloc.allocate, 1.0, exc=TypeError, names="n", call="allocate(1.0)")
    page = alloc.allocate(1)[0]
    free_page = next(p for p in range(3) if p != page)
    assert_raises(alloc.decref, [free_page], exc=ValueError, names="pages",
                  call=f"decref([{free_page}]) of a free page")
    assert_raises(alloc.incref, [free_page], exc=ValueError, names="pages",
                  call=f"incref([{free_page}]) of a free page")
    assert_raises(alloc.decref, [7], exc=ValueError, names="pages", call="decref([7]) with 3 pages")
    before = list(alloc.refcount)
    assert_raises(alloc.decref, [page, free_page], exc=ValueError, names="pages", call=f"decref([{page}, {free_page}])")
    if list(alloc.refcount) != before:
        raise GradingFailure(f"decref([{page}, {free_page}]) rejected a free page but had already changed refcount "
                             f"{before} -> {list(alloc.refcount)}; check every page before changing any")


# -- Exercise 2.3 -------------------------------------------------------------------

CHUNKS = [7, 1, 1, 9, 16, 1, 30]


@pytest.mark.ex2_3
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("page_size", [1, 5, 16], ids=lambda p: f"page{p}")
def test_append_grows_across_pages(nb, page_size):
    """Prefill and decode chunks: the table only grows, contents round-trip exactly."""
    num_pages = 2 * ref.pages_needed(sum(CHUNKS), page_size)
    cache = nb.PagedKVCache(num_pages, page_size, H_KV, HEAD_DIM)
    model = ref.DenseKVModel(num_pages, page_size)
    tokens, history = Tokens(), []
    other_k, other_v = tokens(3)
    cache.append("other", other_k, other_v)  # a second sequence, so pages interleave
    model.append("other", other_k, other_v)
    history.append("append(other, 3)")
    for n in CHUNKS:
        old_table = list(cache.block_tables.get("s", []))
        k, v = tokens(n)
        cache.append("s", k, v)
        model.append("s", k, v)
        history.append(f"append(s, {n})")
        new_table = cache.block_tables["s"]
        if list(new_table[: len(old_table)]) != old_table:
            raise GradingFailure(f"after {' ; '.join(history)}: the block table went from {old_table} to {new_table}; "
                                 f"append must keep a sequence's pages and add new ones at the end")
        check_invariants(cache, model, history)


@pytest.mark.ex2_3
@pytest.mark.points(2)
@pytest.mark.parametrize("page_size", [1, 4], ids=lambda p: f"page{p}")
def test_append_out_of_pages_changes_nothing(nb, page_size):
    cache = nb.PagedKVCache(3, page_size, H_KV, HEAD_DIM)
    tokens = Tokens()
    cache.append(0, *tokens(page_size + 1))  # 2 pages, the second partial when page_size > 1
    cases = [(0, 2 * page_size + 1, "append(0, ...) growing past the pool"),
             (1, 2 * page_size, "append(1, ...) of a new sequence larger than the free pages")]
    for seq, n, what in cases:
        before = snapshot(cache)
        try:
            cache.append(seq, *tokens(n))
        except nb.OutOfPages as err:
            if not isinstance(err, RuntimeError):
                raise GradingFailure("OutOfPages must be a RuntimeError") from None
            assert_unchanged(before, cache, what)
            if seq == 1 and seq in cache:
                raise GradingFailure(f"{what} raised OutOfPages but created sequence {seq}")
        else:
            raise GradingFailure(f"{what} must raise OutOfPages: it needs more pages than the pool has free")
    cache.append(0, *tokens(2 * page_size - 1))  # fills the cache exactly: must succeed
    assert_equal(len(cache.block_tables[0]), 3, "len(block_tables[0]) after filling the pool exactly")


@pytest.mark.ex2_3
@pytest.mark.points(3)
@PROPERTY
@given(page_size=st.sampled_from([1, 3, 4]), num_pages=st.integers(2, 10),
       ops=st.lists(st.one_of(APPEND, APPEND, FORK, FREE), max_size=25))
def test_append_free_property(nb, page_size, num_pages, ops):
    """Random appends, forks, frees and out-of-pages attempts; invariants after every step.
    Fork and free are the references' here (grading.judge.substitute), so the copy-on-write
    of a shared partial page is graded where it is written: in append."""
    run_ops(nb, page_size, num_pages, ops)


@pytest.mark.ex2_3
@pytest.mark.points(2)
@pytest.mark.parametrize("prefix", [6, 8], ids=["shared-partial-page", "shared-full-page"])
def test_append_copy_on_write(nb, prefix):
    """Appends into pages a fork shares (the fork and free are the references' here): a
    shared partial last page is copied before the write, a full one is left shared."""
    page_size = 4
    cache = nb.PagedKVCache(10, page_size, H_KV, HEAD_DIM)
    model = ref.DenseKVModel(10, page_size)
    tokens, history = Tokens(), []
    for op in [("append", "p", prefix), ("fork", "p", "a"), ("append", "a", 1), ("append", "p", 1),
               ("fork", "a", "b"), ("append", "b", 3), ("free", "a"), ("append", "b", 2), ("append", "p", 4)]:
        apply_op(nb, cache, model, tokens, op, history)
        check_invariants(cache, model, history)


@pytest.mark.ex2_3
def test_append_copy_on_write_out_of_pages(nb):
    """The copy of a shared page needs a free page too; without one, nothing changes."""
    cache = nb.PagedKVCache(2, 4, H_KV, HEAD_DIM)
    tokens = Tokens()
    cache.append("p", *tokens(5))
    cache.fork("p", "c")
    before = snapshot(cache)
    try:
        cache.append("c", *tokens(1))
    except nb.OutOfPages:
        assert_unchanged(before, cache, "append('c', 1 token) into a shared page with no free page")
        return
    raise GradingFailure("append('c', 1 token) writes into a page shared with 'p' and the pool has no free page "
                         "for the copy: it must raise OutOfPages")


@pytest.mark.ex2_3
def test_append_rejects_bad_input(nb):
    cache = nb.PagedKVCache(4, 4, H_KV, HEAD_DIM)
    good = torch.zeros(2, H_KV, HEAD_DIM)
    assert_raises(cache.append, 0, [[0.0]], good, exc=TypeError, names="k", call="append(0, list, v)")
    assert_raises(cache.append, 0, good.double(), good, exc=TypeError, names="k",
                  call="append(0, k fp64, v) on an fp32 pool")
    assert_raises(cache.append, 0, torch.zeros(2, H_KV + 1, HEAD_DIM), good, exc=ValueError, names="k",
                  call="append(0, k with 3 KV heads, v)")
    assert_raises(cache.append, 0, torch.zeros(0, H_KV, HEAD_DIM), torch.zeros(0, H_KV, HEAD_DIM), exc=ValueError,
                  names="k", call="append(0, k with 0 tokens, v)")
    assert_raises(cache.append, 0, good, torch.zeros(3, H_KV, HEAD_DIM), exc=ValueError, names="v",
                  call="append(0, k (2, ...), v (3, ...))")
    if 0 in cache:
        raise GradingFailure("a rejected append created the sequence")


# -- Exercise 2.4 -------------------------------------------------------------------

@pytest.mark.ex2_4
@pytest.mark.core
@pytest.mark.points(2)
def test_gather_scattered_pages(nb):
    """Free and reuse pages, which leaves the block table out of order with a LIFO free list;
    gather must follow the table, whatever its order."""
    cache = nb.PagedKVCache(8, 3, H_KV, HEAD_DIM)
    model = ref.DenseKVModel(8, 3)
    tokens, history = Tokens(), []
    for op in [("append", 0, 7), ("append", 1, 4), ("free", 0), ("append", 1, 9), ("append", 2, 5), ("append", 1, 2)]:
        apply_op(nb, cache, model, tokens, op, history)
        check_invariants(cache, model, history, via_gather=True)


@pytest.mark.ex2_4
@PROPERTY
@given(page_size=st.sampled_from([1, 2, 5]), ops=st.lists(st.one_of(APPEND, FREE), max_size=15))
def test_gather_property(nb, page_size, ops):
    run_ops(nb, page_size, 12, ops, via_gather=True)


@pytest.mark.ex2_4
def test_gather_unknown_sequence(nb):
    cache = nb.PagedKVCache(2, 2, H_KV, HEAD_DIM)
    assert_raises(cache.gather, "nope", exc=KeyError, names="seq_id", call="gather('nope') on an empty cache")


# -- Exercise 2.5 -------------------------------------------------------------------

@pytest.mark.ex2_5
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("prefix", [6, 8], ids=["fork-mid-page", "fork-at-page-boundary"])
def test_fork_copy_on_write(nb, prefix):
    """Beam-search shape: fork a prompt, let both branches decode, free the parent."""
    page_size = 4
    cache = nb.PagedKVCache(10, page_size, H_KV, HEAD_DIM)
    model = ref.DenseKVModel(10, page_size)
    tokens, history = Tokens(), []
    script = [("append", "p", prefix), ("fork", "p", "a"), ("fork", "p", "b")]
    for op in script:
        apply_op(nb, cache, model, tokens, op, history)
        check_invariants(cache, model, history)
    tables = [cache.block_tables[s] for s in ("p", "a", "b")]
    if not tables[0] == tables[1] == tables[2]:
        raise GradingFailure(f"after two forks the three block tables must be the same pages; got {tables}")
    # The contract itself, whatever append does (the student's may build a new list each
    # time, which would hide a shared one): each fork has a block-table list of its own.
    for child in ("a", "b"):
        if nb.service("chapter02.tables_shared", cache, "p", child):
            raise GradingFailure(f"after fork(p -> {child}), block_tables[{child!r}] is block_tables['p'], one "
                                 "list: a page appended to either would appear in both. fork must give the child "
                                 "a new list with the same page ids")
    for op in [("append", "a", 1), ("append", "b", 1), ("append", "p", 3), ("append", "a", 5), ("free", "p"),
               ("append", "b", 2), ("free", "a"), ("free", "b")]:
        apply_op(nb, cache, model, tokens, op, history)
        check_invariants(cache, model, history)
    assert_equal(cache.allocator.num_free, 10, "num_free after freeing every sequence")


@pytest.mark.ex2_5
@pytest.mark.points(4)
@PROPERTY
@given(page_size=st.sampled_from([1, 3, 4]), num_pages=st.integers(2, 10),
       ops=st.lists(st.one_of(APPEND, APPEND, FORK, FORK, FREE), max_size=25))
def test_fork_free_property(nb, page_size, num_pages, ops):
    """Random appends, forks, frees and out-of-pages attempts; invariants after every step."""
    run_ops(nb, page_size, num_pages, ops)


@pytest.mark.ex2_5
def test_fork_free_reject_bad_input(nb):
    cache = nb.PagedKVCache(4, 2, H_KV, HEAD_DIM)
    cache.append(0, *Tokens()(3))
    cache.append(1, *Tokens()(1))
    assert_raises(cache.fork, 5, 6, exc=KeyError, names="src", call="fork(5, 6) with no sequence 5")
    assert_raises(cache.fork, 0, 1, exc=ValueError, names="dst", call="fork(0, 1) onto an existing sequence")
    assert_raises(cache.free, 5, exc=KeyError, names="seq_id", call="free(5) with no sequence 5")
    if sorted(cache.block_tables) != [0, 1] or list(cache.allocator.refcount).count(1) != 3:
        raise GradingFailure("a rejected fork or free changed the cache")


# -- Exercise 2.6 -------------------------------------------------------------------

ATTN_CASES = [
    # id, page_size, num_heads, num_kv_heads, head_dim, lengths, dtype
    ("page1-H4-Hkv4-D8-mha", 1, 4, 4, 8, [1, 5, 12], torch.float32),
    ("page16-H8-Hkv2-D16-gqa4", 16, 8, 2, 16, [1, 16, 17, 70], torch.float32),
    ("page5-H6-Hkv3-D8-gqa2", 5, 6, 3, 8, [9, 3, 25, 10, 1], torch.float32),
    ("page7-H8-Hkv1-D32-mqa", 7, 8, 1, 32, [14, 30], torch.float32),
    ("page16-H4-Hkv2-D64-gqa2-fp16", 16, 4, 2, 64, [33, 1, 48], torch.float16),
    ("page3-H4-Hkv2-D8-gqa2-bf16", 3, 4, 2, 8, [8, 2], torch.bfloat16),
]


def build_attention_cache(nb, page_size, num_kv_heads, head_dim, lengths, dtype, gen):
    """Sequences built the way a server builds them: interleaved decode steps, a fork
    and a freed neighbour, so block tables are ragged and out of order."""
    num_pages = sum(ref.pages_needed(n, page_size) for n in lengths) + 2 * len(lengths) + 4
    cache = nb.PagedKVCache(num_pages, page_size, num_kv_heads, head_dim, dtype=dtype)
    contents = {}

    def put(seq, n):
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        cache.append(seq, k, v)
        old_k, old_v = contents.get(seq, (k[:0], v[:0]))
        contents[seq] = (torch.cat([old_k, k]), torch.cat([old_v, v]))

    put("scratch", page_size + 1)
    for i, n in enumerate(lengths):
        put(i, (n + 1) // 2)
    cache.free("scratch")
    del contents["scratch"]
    for i, n in enumerate(lengths):
        if n - (n + 1) // 2:
            put(i, n - (n + 1) // 2)
    cache.fork(0, "fork")
    contents["fork"] = contents[0]
    put("fork", 2)
    return cache, contents


@pytest.mark.ex2_6
@pytest.mark.core
@pytest.mark.points(3)
@pytest.mark.parametrize("name,page_size,H,H_kv,d,lengths,dtype", ATTN_CASES, ids=[c[0] for c in ATTN_CASES])
def test_paged_decode_attention(nb, name, page_size, H, H_kv, d, lengths, dtype):
    gen = torch.Generator().manual_seed(len(name))
    cache, contents = build_attention_cache(nb, page_size, H_kv, d, lengths, dtype, gen)
    seq_ids = [i for i in range(len(lengths))][::-1] + ["fork"]
    q = torch.randn(len(seq_ids), H, d, generator=gen).to(dtype)  # (B, H, d)
    for scale in (None, 0.3):
        got = (nb.paged_decode_attention(q, cache, seq_ids, scale=scale) if scale
               else nb.paged_decode_attention(q, cache, seq_ids))
        expected = torch.stack([ref.decode_attention(q[b], *contents[s], scale=scale) for b, s in enumerate(seq_ids)])
        atol, rtol = decode_tolerance(dtype, expected, lambda: torch.stack(
            [sdpa_decode(q[b], *contents[s], scale=scale) for b, s in enumerate(seq_ids)]))
        assert_close(got, expected, call_text("paged_decode_attention", q, f"cache[{name}]", seq_ids, scale=scale),
                     atol=atol, rtol=rtol, dtype=dtype)


@pytest.mark.ex2_6
def test_paged_decode_attention_rejects_bad_input(nb):
    cache = nb.PagedKVCache(4, 2, 2, 8)
    cache.append(0, torch.randn(3, 2, 8), torch.randn(3, 2, 8))
    f = nb.paged_decode_attention
    assert_raises(f, torch.randn(1, 4, 8).tolist(), cache, [0], exc=TypeError, names="q", call="q as a list")
    assert_raises(f, torch.ones(1, 4, 8, dtype=torch.long), cache, [0], exc=TypeError, names="q", call="q int64")
    assert_raises(f, torch.randn(1, 3, 8), cache, [0], exc=ValueError, names="q", call="q with 3 heads for 2 KV heads")
    assert_raises(f, torch.randn(1, 4, 16), cache, [0], exc=ValueError, names="q",
                  call="q head_dim 16 for a head_dim 8 cache")
    assert_raises(f, torch.randn(4, 8), cache, [0], exc=ValueError, names="q", call="q 2-D")
    assert_raises(f, torch.randn(2, 4, 8), cache, [0], exc=ValueError, names="seq_ids", call="2 queries, 1 seq_id")
    assert_raises(f, torch.randn(1, 4, 8), cache, [9], exc=ValueError, names="seq_ids",
                  call="seq_ids=[9], not in the cache")
    assert_raises(f, torch.randn(0, 4, 8), cache, [], exc=ValueError, names="seq_ids", call="an empty batch")


# -- Exercise 2.7 -------------------------------------------------------------------

USAGE_SCRIPTS = [
    ("empty", 4, []),
    ("one-partial-page", 4, [("append", 0, 5)]),
    ("fork-shares-partial-page", 4, [("append", 0, 6), ("fork", 0, 1)]),
    ("fork-then-cow", 4, [("append", 0, 6), ("fork", 0, 1), ("append", 1, 1), ("append", 0, 3)]),
    ("forks-diverge-free-parent", 3, [("append", 0, 4), ("fork", 0, 1), ("fork", 0, 2), ("append", 1, 2),
                                      ("append", 2, 7), ("free", 0), ("append", 3, 1)]),
    ("page-size-1", 1, [("append", 0, 3), ("fork", 0, 1), ("append", 1, 2)]),
]


@pytest.mark.ex2_7
@pytest.mark.core
@pytest.mark.points(2)
@pytest.mark.parametrize("name,page_size,script", USAGE_SCRIPTS, ids=[s[0] for s in USAGE_SCRIPTS])
def test_kv_slot_usage(nb, name, page_size, script):
    cache = nb.PagedKVCache(16, page_size, H_KV, HEAD_DIM)
    model = ref.DenseKVModel(16, page_size)
    tokens, history = Tokens(), []
    for op in script:
        apply_op(nb, cache, model, tokens, op, history)
    got = nb.kv_slot_usage(cache)
    assert_equal(tuple(got) if isinstance(got, (tuple, list)) else got, model.usage(), f"kv_slot_usage after {history}")


@pytest.mark.ex2_7
def test_kv_slot_usage_rejects_bad_input(nb):
    assert_raises(nb.kv_slot_usage, {"block_tables": {}}, exc=TypeError, names="cache", call="kv_slot_usage(dict)")
