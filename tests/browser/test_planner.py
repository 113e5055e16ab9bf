""""Plan a deployment" (book/planner.md): the page agrees with the graded functions.

The page computes in JavaScript (``_static/planner.js``). Here a real browser drives the
built page through seeded random settings, through the address that holds them, and
every number it shows is compared with the same quantity computed in Python from the
solutions' functions (Exercises 1.4, 3.5, 13.3, 13.4 and 13.5) and from this module's
own table of the book's models and GPUs, written apart from the script's: integers to
the byte, times and ratios to 1e-12 relative. The controls must work from the keyboard,
the numbers must not be clipped at a phone's 390-px width, the settings must survive a
reload from the address, and the Chinese page must show no English label. Run after
``make book``; without Chromium or a built page the tests are skipped with the reason.
"""

from __future__ import annotations

import functools
import http.server
import os
import random
import threading
from functools import cache
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.browser.test_book_pages import (  # noqa: F401  (the browser fixture)
    CHROMEDRIVER,
    CHROMIUM,
    MATH_TIMEOUT_S,
    PHONE_HEIGHT_PX,
    PHONE_WIDTH_PX,
    SHOTS,
    browser,
)
from tests.browser.test_book_pages import HTML as BOOK_HTML

# The built book; PLANNER_HTML names another build of it (a book of this page alone).
HTML = Path(os.environ.get("PLANNER_HTML") or BOOK_HTML)

PAGE = "book/planner.html"
ZH_PAGE = "zh_CN/book/planner.html"
SETTINGS_SEED, NUM_SETTINGS = 52, 200
REL_TOL = 1e-12
SHOWN_REL_TOL = 5e-4  # what the page prints: 4 significant digits
# Most random degrees of parallelism do not divide the heads; keep about a tenth refused.
REDRAW_REFUSED = 0.85
MAX_CONTEXT = 2**24  # the longest context the page searches
MAX_SCRIPT_BYTES = 100 * 1024
SCRIPTS = ("_static/planner.js",)

pytestmark = [
    pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                       reason="needs Debian's chromium and chromium-driver (.ci/run installs them)"),
    pytest.mark.skipif(not (HTML / PAGE).exists(), reason="no built book: run `make book` first"),
]

# ---- The reference: the book's configurations and the solutions' functions. ----

FULL = lambda kv, d: {"kind": "full", "num_kv_heads": kv, "head_dim": d}  # noqa: E731
SLIDING = lambda kv, d, w: {"kind": "sliding", "num_kv_heads": kv, "head_dim": d, "window": w}  # noqa: E731
# Qwen3-Next's Gated DeltaNet layers (Chapter 12) and DeepSeek-V3's latent (Chapter 13).
RECURRENT = {"kind": "recurrent", "num_heads": 32, "key_dim": 128, "value_dim": 128}
LATENT = {"kind": "latent", "kv_lora_rank": 512, "rope_head_dim": 64}
DEEPSEEK_V3 = {"num_attention_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128}
# name -> (layers, query heads, head_dim, parameters held, parameters active per token)
MODELS = {
    "llama-8b": ([FULL(8, 128)] * 32, 32, 128, 8_030_000_000, 8_030_000_000),
    "llama-70b": ([FULL(8, 128)] * 80, 64, 128, 70_600_000_000, 70_600_000_000),
    "qwen3-next": (([RECURRENT] * 3 + [FULL(2, 256)]) * 12, 16, 256, 80 * 10**9, 3 * 10**9),
    "deepseek-v3": ([LATENT] * 61, 128, 128, 671 * 10**9, 37 * 10**9),
    # Gemma 3 27B: 62 layers, every sixth global, the others a 1,024-token window; its text
    # weights, 1,416M embedding and 25,600M other parameters (the report's Table 1).
    "gemma-3-27b": ([FULL(16, 128) if i % 6 == 5 else SLIDING(16, 128, 1024) for i in range(62)], 32, 128,
                    27_016_000_000, 27_016_000_000),
    "smollm2-135m": ([FULL(3, 64)] * 30, 9, 64, 134_515_008, 134_515_008),
}
# name -> (bytes of memory, bytes/s, FLOP/s): nvidia-smi's totals and the datasheets' figures.
GPUS = {"h100": (81_559 * 2**20, 3.35e12, 989e12), "h200": (143_771 * 2**20, 4.8e12, 989e12),
        "a100": (81_920 * 2**20, 2.039e12, 312e12)}
KV_BITS = {"bf16": 16, "fp8": 8, "int8": 8, "int4": 4}
WEIGHT_BITS = {"bf16": 16, "fp8": 8, "int4": 4}
INTEGERS = ("per_token", "per_request", "per_request_gpu", "weights_gpu", "used_gpu", "max_batch", "max_context",
            "step_bytes")
FLOATS = ("step_flops", "t_memory", "t_compute", "tpot", "intensity", "ridge")
SHOWN = INTEGERS + FLOATS + ("side",)


@cache
def chapters():
    from grading import load_solutions

    return load_solutions("01_kv_memory"), load_solutions("03_quantized_kv_cache"), load_solutions("13_mla")


class PlanError(ValueError):
    """A setting the arithmetic refuses; ``key`` is the page's name for it."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _refused(error: ValueError) -> PlanError:
    message = str(error)
    for word, key in (("tp_size", "bad_tp"), ("dcp_size", "bad_dcp"), ("group_size", "bad_group"),
                      ("head_dim", "bad_D")):
        if word in message:
            return PlanError(key)
    raise error


def _layer_bytes(p: dict, layer: dict, n: int, cap: int) -> tuple[int, int]:
    """(bytes of the whole layer, bytes on TP rank 0) for one sequence of n tokens, at most
    ``cap`` of them kept or read (0: no cap)."""
    ch1, ch3, ch13 = chapters()
    kind, bits, group, tp, dcp = layer["kind"], p["bits"], p["group"], p["tp"], p["dcp"]
    if kind == "recurrent":
        if layer["num_heads"] % tp:
            raise PlanError("bad_tp")
        share = dict(layer, num_heads=layer["num_heads"] // tp)
        return ch13.stack_kv_bytes([layer], n, 1, 4)[0], ch13.stack_kv_bytes([share], n, 1, 4)[0]
    kept = min(n, layer.get("window", n), cap or n)
    quantized = p["kv"] in ("int8", "int4")
    if kind == "latent":
        config = {"attention": "mla", "kv_lora_rank": layer["kv_lora_rank"],
                  "qk_rope_head_dim": layer["rope_head_dim"]}
        width, per_token_numbers = layer["kv_lora_rank"] + layer["rope_head_dim"], 1
    else:
        config = {"attention": "gqa", "num_key_value_heads": layer["num_kv_heads"], "head_dim": layer["head_dim"]}
        width = layer["head_dim"]
        per_token_numbers = 2 * max(1, layer["num_kv_heads"] // tp)
    # Exercise 13.4 applies a local layer's own window; a cap set on the page keeps `kept`.
    shape, tokens = ((layer, n) if kind == "sliding" and not cap
                     else (layer if kind == "latent" else dict(layer, kind="full"), kept))
    try:
        if not quantized:
            whole = ch13.stack_kv_bytes([shape], tokens, 1, bits // 8)[0]
            return whole, ch13.kv_bytes_per_rank(config, tp, kept, dcp, bits // 8)[0]
        tokens = ch13.kv_bytes_per_rank(config, tp, kept, dcp, 1)[0] // (per_token_numbers * width)
        if kind == "latent":  # one vector per token: Exercise 3.5 counts two (K and V)
            per_vector = ch3.quantized_bytes_per_token(1, 1, width, bits, group) // 2
            return kept * per_vector, tokens * per_vector
        heads = layer["num_kv_heads"]
        whole = kept * ch3.quantized_bytes_per_token(1, heads, width, bits, group)
        return whole, tokens * ch3.quantized_bytes_per_token(1, max(1, heads // tp), width, bits, group)
    except ValueError as error:
        raise _refused(error) from error


def _stack_bytes(p: dict, n: int, cap: int) -> tuple[int, int]:
    pairs = [_layer_bytes(p, layer, n, cap) for layer in p["layers"]]
    return sum(w for w, _ in pairs), sum(r for _, r in pairs)


def _attention_flops(p: dict, n: int, cap: int) -> int:
    """Exercise 13.3's FLOPs of one decode step, summed over the layers that attend."""
    _, _, ch13 = chapters()
    flops = 0
    for layer in p["layers"]:
        if layer["kind"] == "recurrent":
            continue
        read = min(n, layer.get("window", n), cap or n)
        if layer["kind"] == "latent":
            flops += ch13.decode_step_cost(DEEPSEEK_V3, read, "absorbed")[0]
        else:
            config = {"num_attention_heads": p["heads"], "num_key_value_heads": layer["num_kv_heads"],
                      "head_dim": layer["head_dim"]}
            flops += ch13.decode_step_cost(config, read, "gqa")[0]
    return flops


def expected(settings: dict) -> dict:
    """Every number the page shows for ``settings`` (the address's strings), or
    ``{"error": key}`` where the arithmetic refuses them."""
    ch1, _, _ = chapters()
    s = settings
    if s["m"] == "custom":
        params = int(s["P"]) * 10**6
        layers, heads, head_dim, active = [FULL(int(s["K"]), int(s["D"]))] * int(s["L"]), int(s["H"]), 0, params
    else:
        layers, heads, head_dim, params, active = MODELS[s["m"]]
    device, bandwidth, peak = (GPUS[s["gpu"]] if s["gpu"] != "custom"
                               else (int(s["mem"]) * 2**30, float(s["bw"]) * 1e12, float(s["tf"]) * 1e12))
    p = {"layers": layers, "heads": heads, "kv": s["kv"], "bits": KV_BITS[s["kv"]], "group": int(s["g"]),
         "tp": int(s["tp"]), "dcp": int(s["dcp"])}
    n, batch, reserve = int(s["n"]), int(s["b"]), int(s["r"]) * 2**30
    window = int(s["w"]) + int(s["s"]) if int(s["w"]) else 0  # StreamingLLM keeps sinks and window
    budget = int(s["k"])
    read = min(window, budget) if window and budget else window or budget
    try:
        per_token = _stack_bytes(p, 1, 0)[0] - _stack_bytes(p, 0, 0)[0]
        whole, rank = _stack_bytes(p, n, window)
        step_cache = _stack_bytes(p, n, read)[1]
    except PlanError as error:
        return {"error": error.key}
    weights = -(-params * WEIGHT_BITS[s["wd"]] // 8 // p["tp"])
    step_bytes = weights + batch * step_cache
    flops = batch * (2 * active + _attention_flops(p, n, read)) / p["tp"]
    t_memory, t_compute = step_bytes / bandwidth, flops / peak

    def fits(tokens: int) -> bool:  # Exercise 1.4 with a whole batch of requests as the unit
        return ch1.max_tokens(device, weights, batch * _stack_bytes(p, tokens, window)[1], reserve) >= 1

    return {"per_token": per_token, "per_request": whole, "per_request_gpu": rank, "weights_gpu": weights,
            "used_gpu": weights + reserve + batch * rank, "max_batch": ch1.max_tokens(device, weights, rank, reserve),
            "max_context": _longest(fits), "step_bytes": step_bytes, "step_flops": flops, "t_memory": t_memory,
            "t_compute": t_compute, "tpot": max(t_memory, t_compute), "intensity": flops / step_bytes,
            "ridge": peak / bandwidth, "side": "memory_bound" if t_memory >= t_compute else "compute_bound"}


def _longest(fits) -> int:
    """The largest context in [1, MAX_CONTEXT] that fits (fits grows no truer with length); 0 if none."""
    if not fits(1):
        return 0
    lo, hi = 1, MAX_CONTEXT
    if fits(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def random_settings(rng: random.Random) -> dict:
    """One plan: the book's models and GPUs mostly, a custom one of each sometimes."""
    tp = rng.choice([1, 2, 4, 8, 16])
    s = {"m": rng.choice(list(MODELS) + ["custom"]), "n": str(int(2 ** rng.uniform(0, 24))),
         "b": str(rng.choice([1, 2, 8, 32, 256, rng.randint(1, 4096)])), "kv": rng.choice(list(KV_BITS)),
         "g": rng.choice(["32", "64"]), "wd": rng.choice(list(WEIGHT_BITS)),
         "w": str(rng.choice([0, 0, rng.randint(1, 2**16)])), "s": str(rng.choice([0, 4, rng.randint(0, 64)])),
         "k": str(rng.choice([0, 0, rng.randint(1, 2**16)])), "tp": str(tp),
         "dcp": str(rng.choice([d for d in (1, 2, 4, 8, 16) if d <= tp] + [rng.choice([1, 2, 4, 8, 16])])),
         "gpu": rng.choice(list(GPUS) + ["custom"]), "r": str(rng.randint(0, 16))}
    if s["m"] == "custom":
        kv = rng.choice([1, 2, 4, 8, 16])
        s.update(L=str(rng.randint(1, 128)), K=str(kv), H=str(kv * rng.randint(1, 8)),
                 D=str(rng.choice([64, 80, 96, 128, 256])), P=str(rng.randint(100, 800_000)))
    if s["gpu"] == "custom":
        s.update(bw=f"{rng.uniform(0.5, 10):.3f}", tf=str(rng.randint(50, 2500)), mem=str(rng.randint(8, 300)))
    return s


# ---- Driving the page. ----

READ_JS = r"""
const root = document.querySelector('.planner');
const out = {error: root.dataset.error || ''};
root.querySelectorAll('output[data-key]').forEach(o => { out[o.dataset.key] = [o.dataset.value, o.textContent]; });
return out;
"""
# Set the address and wait for the page to recompute (its data-ready counter moves).
SET_JS = r"""
const [hash, done] = arguments;
const root = document.querySelector('.planner');
const before = root.dataset.ready;
location.hash = hash;
const poll = () => root.dataset.ready !== before ? done(true) : setTimeout(poll, 2);
poll();
"""


def open_page(driver, url: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, MATH_TIMEOUT_S).until(
        lambda d: d.execute_script("const r = document.querySelector('.planner'); return r && r.dataset.ready"),
        message=f"{url}: the planner did not start")


def shown(driver, settings: dict, nonce: int) -> dict:
    driver.execute_async_script(SET_JS, "#" + urlencode(dict(settings, t=str(nonce))))
    return driver.execute_script(READ_JS)


def _read_shown(text: str) -> float:
    """A number as the page prints it: 4 significant digits, a time with its unit."""
    number, _, unit = text.partition(" ")
    return float(number) * {"": 1, "s": 1, "ms": 1e-3, "µs": 1e-6}[unit]


def mismatches(settings: dict, seen: dict) -> list[str]:
    """What the page showed that the reference does not: one line per number."""
    want = expected(settings)
    if "error" in want or seen["error"]:
        return [] if want.get("error") == seen["error"] else [f"error: page {seen['error']!r}, "
                                                                f"reference {want.get('error')!r}"]
    wrong = []
    for key in INTEGERS:
        value, text = seen[key]
        digits = text.split(" ")[0].replace(",", "").rstrip("+")
        if int(value) != want[key] or int(digits) != want[key]:
            wrong.append(f"{key}: page {value} ({text!r}), reference {want[key]}")
    for key in FLOATS:
        value, text = float(seen[key][0]), seen[key][1]
        if abs(value - want[key]) > REL_TOL * abs(want[key]):
            wrong.append(f"{key}: page {value!r}, reference {want[key]!r}")
        elif abs(_read_shown(text) - want[key]) > SHOWN_REL_TOL * abs(want[key]):
            wrong.append(f"{key}: the page shows {text!r} for {want[key]!r}")
    if seen["side"][0] != want["side"]:
        wrong.append(f"side: page {seen['side'][0]}, reference {want['side']}")
    return wrong


def compare_random_settings(driver, url: str, count: int = NUM_SETTINGS, seed: int = SETTINGS_SEED):
    """(settings compared, refused alike, [(settings, mismatches)]) over ``count`` seeded plans."""
    open_page(driver, url)
    rng = random.Random(seed)
    bad, refused = [], 0
    for i in range(count):
        settings = random_settings(rng)
        while "error" in expected(settings) and rng.random() < REDRAW_REFUSED:
            settings = random_settings(rng)
        seen = shown(driver, settings, i)
        refused += bool(seen["error"])
        wrong = mismatches(settings, seen)
        if wrong:
            bad.append((settings, wrong))
    return count, refused, bad


# ---- The tests. ----


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the built book without a log line per request."""

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_reference_matches_chapter_1():
    """The reference's own anchor: Chapter 1's Llama 3.1 8B in bf16 at 128K on an H200."""
    ch1, _, _ = chapters()
    s = {"m": "llama-8b", "n": "131072", "b": "1", "kv": "bf16", "g": "32", "wd": "bf16", "w": "0", "s": "0",
         "k": "0", "tp": "1", "dcp": "1", "gpu": "h200", "r": "8"}
    want = expected(s)
    assert want["per_token"] == ch1.kv_bytes_per_token(32, 8, 128, "bf16")
    assert want["per_request"] == ch1.kv_cache_bytes(32, 8, 128, 131_072, 1, "bf16")
    assert want["t_memory"] == (8_030_000_000 * 2 + want["per_request"]) / 4.8e12


def test_random_settings_match_the_graded_functions(browser, server):  # noqa: F811
    count, refused, bad = compare_random_settings(browser, f"{server}/{PAGE}")
    assert not bad, f"{len(bad)} of {count} settings differ; the first: {bad[0]}"
    assert refused < count // 4, f"{refused} of {count} random settings were refused: the test compares too few"


def test_settings_live_in_the_address(browser, server):  # noqa: F811
    """A shared link reopens the same plan; a control moved from the keyboard rewrites it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    settings = {"m": "llama-70b", "n": "131072", "b": "8", "tp": "8", "gpu": "h200", "wd": "fp8"}
    open_page(browser, f"{server}/{PAGE}#{urlencode(settings)}")
    values = browser.execute_script(READ_JS)
    assert browser.find_element(By.NAME, "m").get_attribute("value") == "llama-70b"
    full = dict(dict(zip(("g", "kv", "w", "s", "k", "dcp", "r"), ("32", "bf16", "0", "0", "0", "1", "8"))),
                **settings)
    assert not mismatches(full, values), mismatches(full, values)

    slider = browser.find_element(By.NAME, "n_log")
    slider.send_keys(Keys.ARROW_RIGHT)  # 2^17 -> 2^18 tokens
    assert "n=262144" in browser.execute_script("return location.hash")
    box = browser.find_element(By.NAME, "b")
    box.send_keys(Keys.BACKSPACE, "4")
    assert "b=4" in browser.execute_script("return location.hash")
    moved = dict(full, n="262144", b="4")
    assert not mismatches(moved, browser.execute_script(READ_JS))
    # Every control is reached with Tab: none is taken out of the order.
    skipped = browser.execute_script(
        "return Array.from(document.querySelectorAll('.planner-form [name]'))"
        ".filter(e => e.tabIndex < 0).map(e => e.name)")
    assert not skipped, f"controls Tab does not reach: {skipped}"


def test_bad_input_is_named(browser, server):  # noqa: F811
    open_page(browser, f"{server}/{PAGE}#m=smollm2-135m&tp=2")
    seen = browser.execute_script(READ_JS)
    text = browser.execute_script("return document.querySelector('.planner-error').textContent")
    assert seen["error"] == "bad_tp" and "tensor-parallel" in text, (seen["error"], text)
    open_page(browser, f"{server}/{PAGE}#n=-5")
    assert browser.execute_script(READ_JS)["error"] == "bad_n"


CLIPPED_JS = r"""
const column = (document.querySelector('article.bd-article') || document.body).getBoundingClientRect();
const out = [];
document.querySelectorAll('.planner output, .planner-field, .planner-results dt').forEach(el => {
  const box = el.getBoundingClientRect();
  if (box.right > column.right + 1 || box.left < column.left - 1 || el.scrollWidth > el.clientWidth + 1)
    out.push((el.dataset.key || el.textContent).slice(0, 40) + ` (${Math.round(box.left)}..${Math.round(box.right)})`);
});
if (document.documentElement.scrollWidth > window.innerWidth + 1) out.push('the page scrolls sideways');
return out;
"""


def test_phone_width_clips_no_number(browser, server):  # noqa: F811
    """At 390 px the longest numbers (DeepSeek-V3 at 16M tokens, a large batch) wrap, never clip."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": PHONE_WIDTH_PX, "height": PHONE_HEIGHT_PX, "deviceScaleFactor": 2, "mobile": False})
    try:
        for settings in ({"m": "deepseek-v3", "n": str(MAX_CONTEXT), "b": "4096", "gpu": "custom", "mem": "100000",
                          "bw": "0.5", "tf": "50"}, {"m": "smollm2-135m", "n": "1024", "gpu": "a100"}):
            open_page(browser, f"{server}/{PAGE}#{urlencode(settings)}")
            assert browser.execute_script("return window.innerWidth") == PHONE_WIDTH_PX
            clipped = browser.execute_script(CLIPPED_JS)
            assert not clipped, f"{settings['m']}: clipped at {PHONE_WIDTH_PX} px: {clipped}"
        SHOTS.mkdir(parents=True, exist_ok=True)
        # The window scrolls, as a reader's thumb does: scrollIntoView would also scroll the theme's
        # hidden-overflow containers sideways, and the picture would show a page no reader sees.
        browser.execute_script("const r = document.querySelector('.planner-results').getBoundingClientRect();"
                               "window.scrollTo(0, window.scrollY + r.top - 60)")
        browser.save_screenshot(str(SHOTS / "planner-390px.png"))
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


LABELS_JS = r"""
const root = document.querySelector('.planner-app');
const out = {};
root.querySelectorAll('legend, .planner-field > span:first-child, dt, option, a.planner-source').forEach((el, i) => {
  out[i + ':' + el.tagName.toLowerCase()] = el.textContent.trim();
});
out.side = root.querySelector('output[data-key="side"]').textContent.trim();
return out;
"""
# Labels that are names in both languages: models, dtypes, GPUs and numbers.
NAMES = {"Llama 3.1 8B", "Llama 3.1 70B", "SmolLM2-135M", "BF16", "FP8", "H100 SXM", "H200 SXM", "A100 SXM 80GB",
         "1", "2", "4", "8", "16", "32", "64"}


@pytest.mark.skipif(not (HTML / ZH_PAGE).exists(), reason="no Chinese edition built: run `make book` first")
def test_chinese_page_has_no_english_label(browser, server):  # noqa: F811
    import re

    open_page(browser, f"{server}/{PAGE}")
    english = browser.execute_script(LABELS_JS)
    open_page(browser, f"{server}/{ZH_PAGE}")
    chinese = browser.execute_script(LABELS_JS)
    assert chinese.keys() == english.keys()
    left = [text for key, text in chinese.items()
            if text not in NAMES and (text == english[key] or not re.search(r"[\u4e00-\u9fff]", text))]
    assert not left, f"labels of the Chinese page left in English: {left}"
    open_page(browser, f"{server}/{ZH_PAGE}#m=smollm2-135m&tp=2")
    error = browser.execute_script("return document.querySelector('.planner-error').textContent")
    assert re.search(r"[\u4e00-\u9fff]", error), f"the Chinese page's error is not in Chinese: {error!r}"


def test_each_number_links_to_a_section_that_exists(browser, server):  # noqa: F811
    open_page(browser, f"{server}/{PAGE}")
    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('a.planner-source')).map(a => a.getAttribute('href'))")
    assert len(links) == len(SHOWN), f"{len(SHOWN)} numbers, {len(links)} links to their sections"
    missing = []
    for link in links:
        page, _, section = link.partition("#")
        target = (HTML / "book" / page).resolve()
        if target.exists() and f'id="{section}"' not in target.read_text(encoding="utf-8"):
            missing.append(link)
    assert not missing, f"links to sections that do not exist: {missing}"


def test_script_is_small_and_self_contained():
    """No CDN and no server: the script loads nothing, and stays under 100 KiB."""
    for script in SCRIPTS:
        text = (HTML / script).read_text(encoding="utf-8")
        assert len(text.encode()) < MAX_SCRIPT_BYTES, f"{script}: {len(text.encode()):,} bytes"
        for word in ("fetch(", "XMLHttpRequest", "import(", "http://", "https://"):
            assert word not in text, f"{script} loads something: {word}"


def test_page_works_from_a_file(browser):  # noqa: F811
    """Opened from disk (file://), as a reader who downloaded the book would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_page(browser, (HTML / PAGE).as_uri() + "#m=gemma-3-27b&n=32768")
    seen = browser.execute_script(READ_JS)
    assert not seen["error"] and int(seen["per_request"][0]) > 0
    browser.find_element(By.NAME, "n_log").send_keys(Keys.ARROW_RIGHT)
    assert "n=65536" in browser.execute_script("return location.hash")
