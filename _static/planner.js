/* "Plan a deployment" (book/planner.md): the book's memory and time arithmetic, in the browser.

   Every byte count is a BigInt, so a product of 64-bit size stays exact; only the times
   and ratios are floats. The formulas are the solutions' (Exercises 1.4, 3.5, 13.3, 13.4
   and 13.5); tests/browser/test_planner.py drives this page through random settings and
   compares every number it shows with those Python functions. The words come from the
   page itself (the lists in `.planner-words`), so the translated page shows no English. */
(function () {
  "use strict";

  const MIB = 2n ** 20n;
  const GIB = 2n ** 30n;
  const MAX_CONTEXT = 2 ** 24; // the longest context the planner searches (tokens)
  const STATE_BYTES = 4n; // a recurrent state is kept in fp32 (Chapter 12), whatever the KV dtype
  const META_BYTES = 2n; // an fp16 scale and an fp16 zero-point per group (Exercise 3.5)

  const full = (kv, d) => ({ kind: "full", kv: kv, d: d });
  const sliding = (kv, d, window) => ({ kind: "sliding", kv: kv, d: d, window: window });
  const latent = (r, rope) => ({ kind: "latent", r: r, rope: rope });
  const recurrent = (heads, dk, dv) => ({ kind: "recurrent", heads: heads, dk: dk, dv: dv });
  const repeat = (pattern, times) => Array.from({ length: times }, () => pattern).flat();

  // The book's configurations (Chapters 1, 12 and 13 cite each source).
  const MODELS = {
    "llama-8b": { layers: repeat([full(8, 128)], 32), heads: 32, d: 128, params: 8030000000n, active: 8030000000n },
    "llama-70b": { layers: repeat([full(8, 128)], 80), heads: 64, d: 128, params: 70600000000n, active: 70600000000n },
    "qwen3-next": { layers: repeat([recurrent(32, 128, 128), recurrent(32, 128, 128), recurrent(32, 128, 128),
      full(2, 256)], 12), heads: 16, d: 256, params: 80000000000n, active: 3000000000n },
    "deepseek-v3": { layers: repeat([latent(512, 64)], 61), heads: 128, d: 128, nope: 128, dv: 128,
      params: 671000000000n, active: 37000000000n },
    "gemma-3-27b": { layers: repeat([sliding(16, 128, 1024), sliding(16, 128, 1024), sliding(16, 128, 1024),
      sliding(16, 128, 1024), sliding(16, 128, 1024), full(16, 128)], 11).slice(0, 62), heads: 32, d: 128,
      params: 27016000000n, active: 27016000000n },
    "smollm2-135m": { layers: repeat([full(3, 64)], 30), heads: 9, d: 64, params: 134515008n, active: 134515008n },
  };
  // HBM bytes as nvidia-smi reports them (MiB), bytes/s and dense BF16 FLOP/s.
  const GPUS = {
    h100: { mib: 81559n, bw: 3.35e12, peak: 989e12 },
    h200: { mib: 143771n, bw: 4.8e12, peak: 989e12 },
    a100: { mib: 81920n, bw: 2.039e12, peak: 312e12 },
  };
  const KV_DTYPES = { bf16: 16n, fp8: 8n, int8: 8n, int4: 4n }; // bits per number
  const WEIGHT_BITS = { bf16: 16n, fp8: 8n, int4: 4n };
  const DEFAULTS = { m: "llama-8b", L: "32", H: "32", K: "8", D: "128", P: "8030", n: "131072", b: "1",
    kv: "bf16", g: "32", wd: "bf16", w: "0", s: "0", k: "0", tp: "1", dcp: "1", gpu: "h200",
    bw: "4.8", tf: "989", mem: "141", r: "8" };

  class PlanError extends Error {
    constructor(key) { super(key); this.key = key; }
  }

  function int(settings, key, min, max) {
    const text = String(settings[key]).trim();
    if (!/^[0-9]+$/.test(text)) throw new PlanError("bad_" + key);
    const value = Number(text);
    if (value < min || value > max) throw new PlanError("bad_" + key);
    return value;
  }

  function positive(settings, key) {
    const value = Number(String(settings[key]).trim());
    if (!(value > 0) || !Number.isFinite(value)) throw new PlanError("bad_" + key);
    return value;
  }

  function model(settings) {
    if (settings.m !== "custom") {
      if (!(settings.m in MODELS)) throw new PlanError("bad_m");
      return MODELS[settings.m];
    }
    const kv = int(settings, "K", 1, 4096);
    const d = int(settings, "D", 1, 4096);
    const params = BigInt(int(settings, "P", 1, 10 ** 8)) * 1000000n;
    return { layers: repeat([full(kv, d)], int(settings, "L", 1, 1024)), heads: int(settings, "H", 1, 4096), d: d,
      params: params, active: params };
  }

  function gpu(settings) {
    if (settings.gpu === "custom") {
      return { bytes: BigInt(int(settings, "mem", 1, 100000)) * GIB, bw: positive(settings, "bw") * 1e12,
        peak: positive(settings, "tf") * 1e12 };
    }
    if (!(settings.gpu in GPUS)) throw new PlanError("bad_gpu");
    const g = GPUS[settings.gpu];
    return { bytes: g.mib * MIB, bw: g.bw, peak: g.peak };
  }

  /* Bytes of `count` vectors of `width` numbers: Exercise 3.5's per-vector size under
     int8/int4 (codes plus an fp16 scale and zero-point per group), bits / 8 otherwise. */
  function vectorBytes(plan, width, count) {
    const w = BigInt(width);
    if (plan.kv === "int8" || plan.kv === "int4") {
      if (w % plan.group) throw new PlanError("bad_group");
      if (w * plan.bits % 8n) throw new PlanError("bad_D");
      return count * (w * plan.bits / 8n + w / plan.group * META_BYTES * 2n);
    }
    return count * w * plan.bits / 8n;
  }

  // How many of `tokens` tokens TP rank 0 holds: token i lives on rank i mod dcp (Exercise 13.5).
  const rankTokens = (tokens, dcp) => BigInt(Math.ceil(tokens / dcp));

  /* One layer's bytes for one sequence of `n` tokens, for the whole model and on TP rank 0;
     `cap` (0: none) is the tokens a layer reads or keeps at most (a window or a budget). */
  function layerBytes(plan, layer, n, cap) {
    if (layer.kind === "recurrent") {
      const state = BigInt(layer.heads * layer.dk * layer.dv) * STATE_BYTES;
      if (layer.heads % plan.tp) throw new PlanError("bad_tp");
      return { whole: state, rank: state / BigInt(plan.tp) };
    }
    let kept = layer.kind === "sliding" ? Math.min(n, layer.window) : n;
    if (cap > 0) kept = Math.min(kept, cap);
    if (layer.kind === "latent") {
      if (plan.tp % plan.dcp) throw new PlanError("bad_dcp");
      const width = layer.r + layer.rope;
      return { whole: vectorBytes(plan, width, BigInt(kept)), rank: vectorBytes(plan, width, rankTokens(kept, plan.dcp)) };
    }
    if (layer.kv % plan.tp && plan.tp % layer.kv) throw new PlanError("bad_tp");
    if (Math.max(1, Math.floor(plan.tp / layer.kv)) % plan.dcp) throw new PlanError("bad_dcp");
    const heads = Math.max(1, Math.floor(layer.kv / plan.tp));
    return { whole: vectorBytes(plan, layer.d, BigInt(2 * layer.kv * kept)),
      rank: vectorBytes(plan, layer.d, 2n * BigInt(heads) * rankTokens(kept, plan.dcp)) };
  }

  function stackBytes(plan, n, cap) {
    let whole = 0n, rank = 0n;
    for (const layer of plan.model.layers) {
      const b = layerBytes(plan, layer, n, cap);
      whole += b.whole;
      rank += b.rank;
    }
    return { whole: whole, rank: rank };
  }

  // FLOPs of one decode step's attention for one sequence (Exercise 13.3: "gqa" or "absorbed").
  function attentionFlops(plan, n, cap) {
    const m = plan.model, H = BigInt(m.heads);
    let flops = 0n;
    for (const layer of m.layers) {
      if (layer.kind === "recurrent") continue;
      let read = layer.kind === "sliding" ? Math.min(n, layer.window) : n;
      if (cap > 0) read = Math.min(read, cap);
      const N = BigInt(read);
      if (layer.kind === "latent") {
        const r = BigInt(layer.r), rope = BigInt(layer.rope), nope = BigInt(m.nope), dv = BigInt(m.dv);
        flops += 2n * H * nope * r + 2n * H * N * (r + rope) + 2n * H * N * r + 2n * H * r * dv;
      } else {
        flops += 4n * H * N * BigInt(layer.d);
      }
    }
    return flops;
  }

  // Exercise 1.4: floor((device - weights - reserve) / unit), 0 when nothing fits.
  function maxUnits(device, weights, unit, reserve) {
    const budget = device - weights - reserve;
    return budget <= 0n ? 0n : budget / unit;
  }

  // The longest context (up to MAX_CONTEXT) whose batch of requests fits on each GPU.
  function maxContext(plan, room) {
    const fits = (n) => BigInt(plan.batch) * stackBytes(plan, n, plan.window).rank <= room;
    if (!fits(1)) return 0;
    let lo = 1, hi = MAX_CONTEXT;
    if (fits(hi)) return hi;
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (fits(mid)) lo = mid; else hi = mid;
    }
    return lo;
  }

  /* Every number the page shows, from its settings (strings, as the URL holds them).
     Throws PlanError(key) naming the setting that is out of range. */
  function compute(settings) {
    const m = model(settings), device = gpu(settings);
    if (!(settings.kv in KV_DTYPES)) throw new PlanError("bad_kv");
    if (!(settings.wd in WEIGHT_BITS)) throw new PlanError("bad_wd");
    const plan = { model: m, kv: settings.kv, bits: KV_DTYPES[settings.kv], group: BigInt(int(settings, "g", 1, 4096)),
      tp: int(settings, "tp", 1, 1024), dcp: int(settings, "dcp", 1, 1024), batch: int(settings, "b", 1, 1 << 20) };
    const n = int(settings, "n", 1, MAX_CONTEXT);
    const sinks = int(settings, "s", 0, MAX_CONTEXT), window = int(settings, "w", 0, MAX_CONTEXT);
    const budget = int(settings, "k", 0, MAX_CONTEXT);
    const reserve = BigInt(int(settings, "r", 0, 100000)) * GIB;
    plan.window = window > 0 ? window + sinks : 0; // StreamingLLM keeps the sinks and the window
    const read = plan.window > 0 && budget > 0 ? Math.min(plan.window, budget) : plan.window || budget;

    const perToken = stackBytes(plan, 1, 0).whole - stackBytes(plan, 0, 0).whole;
    const held = stackBytes(plan, n, plan.window);
    const weightBytes = m.params * WEIGHT_BITS[settings.wd] / 8n;
    const weightsGpu = (weightBytes + BigInt(plan.tp) - 1n) / BigInt(plan.tp);
    const room = device.bytes - weightsGpu - reserve;
    const stepBytes = weightsGpu + BigInt(plan.batch) * stackBytes(plan, n, read).rank;
    const flops = BigInt(plan.batch) * (2n * m.active + attentionFlops(plan, n, read));
    const flopsGpu = Number(flops) / plan.tp;
    const tMemory = Number(stepBytes) / device.bw, tCompute = flopsGpu / device.peak;
    return {
      per_token: perToken, per_request: held.whole, per_request_gpu: held.rank, weights_gpu: weightsGpu,
      used_gpu: weightsGpu + reserve + BigInt(plan.batch) * held.rank,
      max_batch: maxUnits(device.bytes, weightsGpu, held.rank, reserve),
      max_context: BigInt(maxContext(plan, room)), step_bytes: stepBytes, step_flops: flopsGpu,
      t_memory: tMemory, t_compute: tCompute, tpot: Math.max(tMemory, tCompute),
      intensity: flopsGpu / Number(stepBytes), ridge: device.peak / device.bw,
      side: tMemory >= tCompute ? "memory_bound" : "compute_bound",
    };
  }

  /* ---- The page: words, controls, URL. ---- */

  function words(root) {
    const found = {}, links = {};
    root.querySelectorAll(".planner-words li").forEach((li) => {
      const codes = li.querySelectorAll("code");
      if (!codes.length) return;
      const key = codes[0].textContent.trim();
      if (codes.length > 1) {
        const target = codes[1].textContent.trim().split("#");
        const text = li.textContent.replace(codes[0].textContent, "").replace(codes[1].textContent, "");
        links[key] = { href: "../" + target[0] + ".html" + (target[1] ? "#" + target[1] : ""),
          text: text.replace(/^[\s:：]+/, "").trim() };
      } else {
        found[key] = li.textContent.replace(codes[0].textContent, "").replace(/^[\s:：]+/, "").trim();
      }
    });
    return { say: (key) => found[key] || key, links: links };
  }

  const grouped = (big) => big.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");

  function binary(bytes) {
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let value = Number(bytes), unit = "B";
    for (const u of units) {
      if (value < 1024) break;
      value /= 1024;
      unit = u;
    }
    return unit === "B" ? "" : " = " + value.toFixed(value < 10 ? 2 : 1) + " " + unit;
  }

  function seconds(s) {
    if (s >= 1) return s.toPrecision(4) + " s";
    if (s >= 1e-3) return (s * 1e3).toPrecision(4) + " ms";
    return (s * 1e6).toPrecision(4) + " µs";
  }

  const BYTE_OUTPUTS = ["per_token", "per_request", "per_request_gpu", "weights_gpu", "used_gpu", "step_bytes"];

  function show(root, say, result) {
    root.querySelectorAll("output[data-key]").forEach((out) => {
      const key = out.dataset.key, value = result[key];
      let text;
      if (BYTE_OUTPUTS.includes(key)) text = grouped(value) + " B" + binary(value);
      else if (key === "max_batch") text = grouped(value);
      else if (key === "max_context") text = grouped(value) + (Number(value) === MAX_CONTEXT ? "+" : "");
      else if (key === "side") text = say(value);
      else if (key.startsWith("t_") || key === "tpot") text = seconds(value);
      else text = value.toPrecision(4);
      out.dataset.value = typeof value === "number" ? String(value) : value.toString();
      out.textContent = text;
    });
  }

  function readHash() {
    const settings = Object.assign({}, DEFAULTS);
    new URLSearchParams(location.hash.replace(/^#/, "")).forEach((value, key) => {
      if (key in DEFAULTS) settings[key] = value;
    });
    return settings;
  }

  function writeHash(settings) {
    const changed = new URLSearchParams();
    for (const key of Object.keys(DEFAULTS)) if (settings[key] !== DEFAULTS[key]) changed.set(key, settings[key]);
    const hash = "#" + changed.toString();
    if (location.hash === hash || (hash === "#" && !location.hash)) return;
    try {
      history.replaceState(null, "", hash);
    } catch (e) { // some browsers refuse replaceState on file:// pages; the hash still works
      location.hash = hash;
    }
  }

  function field(say, key, control) {
    const label = document.createElement("label");
    label.className = "planner-field";
    label.dataset.field = key;
    const name = document.createElement("span");
    name.textContent = say("in_" + key);
    label.append(name, control);
    return label;
  }

  function input(key, type, attrs) {
    const el = document.createElement("input");
    el.type = type;
    el.name = key;
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
    return el;
  }

  function select(say, key, options) {
    const el = document.createElement("select");
    el.name = key;
    for (const value of options) {
      const option = document.createElement("option");
      option.value = value;
      option.textContent = /^[0-9]+$/.test(value) ? value : say("opt_" + value);
      el.append(option);
    }
    return el;
  }

  /* A slider beside a box for any value; both write one setting. A "log" slider moves in
     powers of two (its 0 means 0 where the setting can be 0: no window, no budget). */
  function slider(say, key, lo, hi, log) {
    const wrap = document.createElement("span");
    wrap.className = "planner-pair";
    const range = input(key + (log ? "_log" : "_lin"), "range", { min: lo, max: hi, step: 1, "aria-label": say("in_" + key) });
    const box = input(key, "number", { min: log && lo ? 1 : 0, inputmode: "numeric" });
    range.dataset.sliderFor = key;
    range.dataset.log = log ? "1" : "";
    wrap.append(range, box);
    return wrap;
  }
  const powerSlider = (say, key, lo, hi) => slider(say, key, lo, hi, true);

  // The setting a slider's position stands for, and the position that shows a setting.
  function fromSlider(el) {
    const v = Number(el.value);
    if (!el.dataset.log) return String(v);
    return String(v === 0 && el.name !== "b_log" ? 0 : 2 ** v);
  }
  function toSlider(el, value) {
    const v = Math.max(0, Number(value) || 0);
    return String(el.dataset.log ? Math.max(Number(el.min), Math.round(Math.log2(Math.max(1, v)))) : Math.min(v, Number(el.max)));
  }

  function build(say) {
    const form = document.createElement("form");
    form.className = "planner-form";
    form.addEventListener("submit", (e) => e.preventDefault());
    const groups = [
      ["model", [["m", select(say, "m", Object.keys(MODELS).concat(["custom"]))]]],
      ["custom", ["L", "H", "K", "D", "P"].map((k) => [k, input(k, "number", { min: 1, inputmode: "numeric" })])],
      ["load", [["n", powerSlider(say, "n", 10, 24)], ["b", powerSlider(say, "b", 0, 12)]]],
      ["cache", [["kv", select(say, "kv", Object.keys(KV_DTYPES))], ["g", select(say, "g", ["32", "64"])],
        ["wd", select(say, "wd", Object.keys(WEIGHT_BITS))], ["w", powerSlider(say, "w", 0, 20)],
        ["s", slider(say, "s", 0, 64, false)], ["k", powerSlider(say, "k", 0, 20)]]],
      ["parallel", [["tp", select(say, "tp", ["1", "2", "4", "8", "16"])], ["dcp", select(say, "dcp", ["1", "2", "4", "8", "16"])]]],
      ["device", [["gpu", select(say, "gpu", Object.keys(GPUS).concat(["custom"]))], ["r", input("r", "number", { min: 0 })]]],
      ["custom_gpu", [["bw", input("bw", "number", { min: 0, step: "any" })], ["tf", input("tf", "number", { min: 0, step: "any" })],
        ["mem", input("mem", "number", { min: 1 })]]],
    ];
    for (const [name, fields] of groups) {
      const set = document.createElement("fieldset");
      set.className = "planner-group planner-" + name;
      const legend = document.createElement("legend");
      legend.textContent = say("group_" + name);
      set.append(legend);
      for (const [key, control] of fields) set.append(field(say, key, control));
      form.append(set);
    }
    return form;
  }

  function results(say, links) {
    const table = document.createElement("dl");
    table.className = "planner-results";
    for (const key of ["per_token", "per_request", "per_request_gpu", "weights_gpu", "used_gpu", "max_batch",
      "max_context", "step_bytes", "step_flops", "t_memory", "t_compute", "tpot", "intensity", "ridge", "side"]) {
      const term = document.createElement("dt");
      term.textContent = say("out_" + key);
      const value = document.createElement("dd");
      const out = document.createElement("output");
      out.dataset.key = key;
      value.append(out);
      if (links[key]) {
        const a = document.createElement("a");
        a.href = links[key].href;
        a.textContent = links[key].text;
        a.className = "planner-source";
        value.append(" ", a);
      }
      table.append(term, value);
    }
    return table;
  }

  function mount(root) {
    const { say, links } = words(root);
    const form = build(say), table = results(say, links);
    const error = document.createElement("p");
    error.className = "planner-error";
    error.setAttribute("role", "alert");
    root.querySelector(".planner-app").append(form, error, table);

    const controls = () => form.querySelectorAll("[name]");
    function fill(settings) {
      controls().forEach((el) => {
        const key = el.dataset.sliderFor;
        if (key) el.value = toSlider(el, settings[key]);
        else if (el.name in settings) el.value = settings[el.name];
      });
      form.querySelector(".planner-custom").hidden = settings.m !== "custom";
      form.querySelector(".planner-custom_gpu").hidden = settings.gpu !== "custom";
    }
    function update(settings) {
      try {
        show(root, say, compute(settings));
        error.textContent = "";
        root.dataset.error = "";
      } catch (e) {
        if (!(e instanceof PlanError)) throw e;
        error.textContent = say("err_" + e.key.replace(/^bad_/, ""));
        root.dataset.error = e.key;
        root.querySelectorAll("output[data-key]").forEach((out) => { out.textContent = "–"; out.dataset.value = ""; });
      }
      root.dataset.ready = String(Number(root.dataset.ready || 0) + 1);
    }
    let settings = readHash();
    fill(settings);
    update(settings);
    form.addEventListener("input", (event) => {
      const el = event.target, key = el.dataset.sliderFor;
      if (key) {
        settings[key] = fromSlider(el);
      } else if (el.name) {
        settings[el.name] = el.value;
      }
      fill(settings);
      update(settings);
      writeHash(settings);
    });
    window.addEventListener("hashchange", () => {
      settings = readHash();
      fill(settings);
      update(settings);
    });
  }

  window.planner = { compute: compute, MAX_CONTEXT: MAX_CONTEXT };
  document.addEventListener("DOMContentLoaded", () => document.querySelectorAll(".planner").forEach(mount));
})();
