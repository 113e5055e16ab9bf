"""Compile a Triton kernel for an NVIDIA GPU on a machine that has none.

Triton compiles ahead of time for a named target: ``triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))`` runs the whole pipeline (Triton IR, TritonGPU IR,
LLVM IR, PTX, and NVIDIA's ``ptxas`` to a cubin) without a driver. The wheel ships
``ptxas`` and ``nvdisasm``, so the registers, spills and shared memory a kernel would
use on an A100 (``sm_80``) or an H100 (``sm_90``), and its machine code (SASS), are
known on a laptop. Chapter 7's graders, its book chapter and its benchmark all compile
through this module:

    compiled = compile_kernel(add_kernel, {"x_ptr": "*fp32", ...}, {"BLOCK_SIZE": 1024}, arch="sm_90")
    compiled.usage        # Usage(registers=..., spill_store_bytes=0, spill_load_bytes=0, shared_bytes=...)
    sass(compiled)        # nvdisasm's listing of the cubin

A kernel defined under ``TRITON_INTERPRET=1`` (an interpreted function, as in the book's
notebooks on a CPU) is compiled from the same Python source: the interpreter and the
compiler read one function. A kernel the compiler rejects raises
:class:`KernelCompileError`, whose message names the kernel's own line (file, cell and
line, and the code) and the compiler's complaint, without Triton's internals.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

ARCHS = {"sm_80": 80, "sm_90": 90}  # A100 and H100 (Triton compiles 90 as sm_90a, with wgmma)
_HOOK_KEY = "gpucompile-ptxas-log-v1"  # part of Triton's cache key for kernels compiled here


class KernelCompileError(Exception):
    """The compiler rejected a kernel that the interpreter may well run."""


@dataclass(frozen=True)
class Usage:
    """What ``ptxas -v`` reports for one kernel, plus Triton's dynamic shared memory.

    registers: 32-bit registers per thread (at most 255); spill_*_bytes: bytes per thread
    stored to and loaded from local memory because the registers ran out; stack_bytes: the
    per-thread stack frame; shared_bytes: shared memory per program (thread block)."""

    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass
class Compiled:
    """One kernel compiled for one target: ``asm`` holds ttir, ttgir, llir, ptx and cubin."""

    name: str
    arch: str
    num_warps: int
    num_stages: int
    asm: dict
    usage: Usage
    ptxas_log: str


def _nvidia_tool(name: str) -> str:
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: this Triton wheel does not ship NVIDIA's {name}")
    return str(path)


# -- from the notebook's function to a compilable one ---------------------------------------
def _python_function(kernel):
    """The Python function behind a @triton.jit kernel, interpreted or not."""
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel.fn
    if type(kernel).__name__ == "InterpretedFunction":
        return kernel.fn
    raise TypeError(f"kernel must be a @triton.jit function, got {type(kernel).__name__}")


def _is_kernel(value) -> bool:
    from triton.runtime.jit import JITFunction

    return isinstance(value, JITFunction) or type(value).__name__ == "InterpretedFunction"


def as_jit(kernel, _done: dict | None = None):
    """A ``JITFunction`` for ``kernel``; the @triton.jit helpers it calls are converted too.

    Under ``TRITON_INTERPRET=1`` ``triton.jit`` returns an interpreted function. The
    compiler needs a ``JITFunction`` for the kernel and for every jitted helper its
    globals name, so the function is rebuilt over a copy of its globals in which each
    helper is converted the same way. The source (read through ``linecache``, as for a
    notebook cell) and the code object are the kernel's own."""
    from triton.runtime.jit import JITFunction

    done = {} if _done is None else _done
    fn = _python_function(kernel)
    if id(fn) in done:
        return done[id(fn)]
    if isinstance(kernel, JITFunction) and not any(_is_kernel(v) and not isinstance(v, JITFunction)
                                                   for v in fn.__globals__.values()):
        done[id(fn)] = kernel
        return kernel
    scope = dict(fn.__globals__)
    clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__, clone.__annotations__ = fn.__kwdefaults__, dict(fn.__annotations__)
    clone.__module__, clone.__qualname__, clone.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    jit = done[id(fn)] = JITFunction(clone)
    for name in _names(fn):
        value = fn.__globals__.get(name)
        if _is_kernel(value) and value is not kernel:
            scope[name] = as_jit(value, done)
    return jit


# -- compiling -------------------------------------------------------------------------------
def _hook(backend=None, stages=None, options=None, language=None, capability=None):
    """Triton's stage-inspection hook: keep ``ptxas -v``'s report in the kernel's metadata
    (it is cached with the kernel), instead of the temporary file Triton deletes."""
    if backend is None:
        return _HOOK_KEY, _HOOK_KEY
    make_cubin = stages["cubin"]

    def cubin(src, metadata):
        from triton import knobs

        out = io.StringIO()
        with knobs.nvidia.scope(), contextlib.redirect_stdout(out):
            knobs.nvidia.dump_ptxas_log = True  # Triton prints the log; catch it
            binary = make_cubin(src, metadata)
        metadata["ptxas_log"] = out.getvalue()
        return binary

    stages["cubin"] = cubin


@contextlib.contextmanager
def _stderr_to(path: Path):
    """File descriptor 2 into ``path``: MLIR prints its diagnostics there, not to sys.stderr."""
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "w") as sink:
        os.dup2(sink.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def parse_ptxas(log: str) -> dict:
    """Registers, spill bytes and stack frame from a ``ptxas -v`` log (zeros where absent)."""
    def grab(pattern):
        m = re.search(pattern, log)
        return int(m.group(1)) if m else 0

    if not re.search(r"Used (\d+) registers", log):
        raise ValueError("not a ptxas -v log: no 'Used N registers' line")
    return {"registers": grab(r"Used (\d+) registers"), "spill_store_bytes": grab(r"(\d+) bytes spill stores"),
            "spill_load_bytes": grab(r"(\d+) bytes spill loads"), "stack_bytes": grab(r"(\d+) bytes stack frame")}


def compile_kernel(kernel, signature: dict, constexprs: dict, *, attrs: dict | None = None, arch: str = "sm_90",
                   num_warps: int = 4, num_stages: int = 3) -> Compiled:
    """Compile ``kernel`` for ``arch`` (``"sm_80"`` or ``"sm_90"``) through ptxas.

    ``signature`` maps each runtime argument to its Triton type (``"*bf16"`` a pointer to
    bf16, ``"i32"``, ``"fp32"``); ``constexprs`` gives every ``tl.constexpr`` argument its
    value; ``attrs`` marks arguments (``{"stride": [["tt.divisibility", 16]]}``), as
    :func:`specialize` does for a launch. Raises :class:`KernelCompileError` (the kernel's
    line and the compiler's message) if the compiler rejects the kernel, ValueError for an
    unknown ``arch``."""
    result = compile_many([dict(kernel=kernel, signature=signature, constexprs=constexprs, attrs=attrs, arch=arch,
                                num_warps=num_warps, num_stages=num_stages)])[0]
    if isinstance(result, KernelCompileError):
        raise result
    return result


def compile_many(requests: list[dict]) -> list:
    """``compile_kernel(**request)`` for each request: a :class:`Compiled`, or the
    :class:`KernelCompileError` it raised, in order.

    Where Triton was imported under ``TRITON_INTERPRET=1`` (a notebook on a CPU), Triton's
    own library functions are interpreted too and this process cannot compile; the
    kernels' sources then go to one child process that imports Triton for compiling."""
    for r in requests:
        if r["arch"] not in ARCHS:
            raise ValueError(f"arch must be one of {sorted(ARCHS)}, got {r['arch']!r}")
    if _can_compile_here():
        out = []
        for r in requests:
            try:
                out.append(_compile_here(**r))
            except KernelCompileError as exc:
                out.append(exc)
        return out
    return _compile_in_child(requests)


def _can_compile_here() -> bool:
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    return isinstance(tl.cdiv, JITFunction)  # a library function: interpreted if Triton was imported so


def _compile_here(kernel, signature: dict, constexprs: dict, *, attrs: dict | None = None, arch: str = "sm_90",
                  num_warps: int = 4, num_stages: int = 3) -> Compiled:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jit = as_jit(kernel)
    name = jit.fn.__name__
    sig = dict(signature)
    for key in constexprs:
        sig[key] = "constexpr"
    missing = [a for a in jit.arg_names if a not in sig]
    if missing:
        raise ValueError(f"signature and constexprs must cover every argument of {name}; missing {missing}")
    marks = {(jit.arg_names.index(k),): v for k, v in (attrs or {}).items()}
    source = ASTSource(fn=jit, signature=sig, constexprs=dict(constexprs), attrs=marks)
    target = GPUTarget("cuda", ARCHS[arch], 32)
    previous = knobs.runtime.add_stages_inspection_hook
    with tempfile.TemporaryDirectory(prefix="gpucompile-") as tmp:
        diagnostics = Path(tmp) / "stderr.txt"
        try:
            knobs.runtime.add_stages_inspection_hook = _hook
            # TRITON_INTERPRET=1 (a notebook on a CPU) also steers the compiler's front end; off while compiling.
            with knobs.runtime.scope(), _stderr_to(diagnostics):
                knobs.runtime.interpret = False
                compiled = triton.compile(source, target=target,
                                          options={"num_warps": num_warps, "num_stages": num_stages})
        except Exception as exc:  # noqa: BLE001 - every compiler failure becomes the student's message
            raise KernelCompileError(explain(exc, jit, arch, diagnostics.read_text(errors="replace"))) from None
        finally:
            knobs.runtime.add_stages_inspection_hook = previous
    log = getattr(compiled.metadata, "ptxas_log", "") or ""
    counts = parse_ptxas(log)
    usage = Usage(shared_bytes=int(compiled.metadata.shared), **counts)
    return Compiled(name, arch, num_warps, num_stages, dict(compiled.asm), usage, log)


# -- the compiler's message, trimmed to the kernel's line --------------------------------------
def _names(fn) -> set:
    """The global names a function's code (and the code nested in it) refers to."""
    names, stack = set(), [fn.__code__]
    while stack:
        code = stack.pop()
        names |= set(code.co_names)
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return names


def jitted_functions(kernel) -> dict:
    """{name: JITFunction} of the kernel and every jitted helper it calls, directly or not."""
    from triton.runtime.jit import JITFunction

    found, stack = {}, [as_jit(kernel)]
    while stack:
        jit = stack.pop()
        if jit.fn.__name__ in found:
            continue
        found[jit.fn.__name__] = jit
        for name in _names(jit.fn):
            value = jit.fn.__globals__.get(name)
            if isinstance(value, JITFunction):
                stack.append(value)
    return found


def _where(filename: str, line: int) -> str:
    if "#cell-" in filename:
        path, cell = filename.rsplit("#cell-", 1)
        return f"{Path(path).name} cell {cell}, line {line}"
    return f"{Path(filename).name} line {line}"


def _source_line(filename: str, line: int) -> str:
    import linecache

    return linecache.getline(filename, line).strip()


def explain(exc: BaseException, jit, arch: str, diagnostics: str = "") -> str:
    """One short message: which kernel, which target, which line of the kernel, and why."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.jit import get_jit_fn_file_line

    head = f"{jit.fn.__name__} does not compile for {arch}"
    # The innermost CompilationError is the student's line (a helper's, if the helper failed).
    innermost, cause = None, exc
    while cause is not None:
        if isinstance(cause, CompilationError) and getattr(cause.node, "lineno", None):
            innermost = cause
        cause = cause.__cause__ or (cause.__context__ if isinstance(cause, CompilationError) else None)
    if innermost is not None:
        owner = next((f for f in jitted_functions(jit).values() if f.src == innermost.src), jit)
        filename, begin = get_jit_fn_file_line(owner)
        line = begin + innermost.node.lineno - 1
        reason = (innermost.error_message or "").strip() or type(innermost).__name__
        # NameError("...") -> NameError: ...
        reason = re.sub(r"^(\w+)\((['\"])(.*)\2\)$", r"\1: \3", reason, flags=re.S)
        return f"{head} ({_where(filename, line)}: `{_source_line(filename, line)}`):\n  {_first_lines(reason)}"
    # Past the front end, MLIR reports "file:line:col: error: ..." on stderr with the kernel's location.
    for m in re.finditer(r"^(.*?):(\d+):(\d+): error: (.*)$", diagnostics, flags=re.M):
        filename, line = m.group(1), int(m.group(2))
        return f"{head} ({_where(filename, line)}: `{_source_line(filename, line)}`):\n  {_first_lines(m.group(4))}"
    text = str(exc).strip() or type(exc).__name__
    return f"{head}: {type(exc).__name__}: {_first_lines(text)}"


def _first_lines(text: str, limit: int = 4) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n  ".join(lines[:limit]) + (" ..." if len(lines) > limit else "")


# -- machine code ------------------------------------------------------------------------------
def sass(compiled: Compiled) -> str:
    """The kernel's SASS (the GPU's own instructions), disassembled from the cubin by nvdisasm."""
    with tempfile.TemporaryDirectory(prefix="gpucompile-") as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        proc = subprocess.run([_nvidia_tool("nvdisasm"), "-c", str(cubin)], capture_output=True, text=True, check=True)
    return proc.stdout


# -- what a wrapper would launch ----------------------------------------------------------------
def specialize(kernel, values: dict) -> dict:
    """The signature, constexprs and attributes a launch with these argument ``values`` compiles
    to, by Triton's own rule for launches: an int equal to 1 becomes a constant, and an int or a
    tensor's address divisible by 16 is marked so (the compiler then vectorises loads through it).
    ``values`` maps every argument name to a tensor (or ``triton.runtime.jit.MockTensor``), a
    number, or, for a tl.constexpr argument, its value."""
    from triton import knobs
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    jit = as_jit(kernel)
    missing = [p.name for p in jit.params if p.name not in values]
    if missing:
        raise TypeError(f"{jit.fn.__name__}: no value for the arguments {missing}")
    signature, constexprs, attrs = {}, {}, {}
    for p in jit.params:
        value = values[p.name]
        if p.is_constexpr:
            constexprs[p.name] = value
            continue
        with knobs.runtime.scope():
            # It may import Triton's gluon library, which must be told whether Triton was imported
            # interpreted (the variable may have changed since).
            knobs.runtime.interpret = not _can_compile_here()
            kind, key = native_specialize_impl(BaseBackend, value, False, not p.do_not_specialize,
                                               not p.do_not_specialize_on_alignment)
        if kind == "constexpr":
            constexprs[p.name] = value
        else:
            signature[p.name] = kind
            if isinstance(key, str) and "D" in key:
                attrs[p.name] = [["tt.divisibility", 16]]
    return {"signature": signature, "constexprs": constexprs, "attrs": attrs}


@contextlib.contextmanager
def capture_launches(arch: str = "sm_90"):
    """Inside the block, ``kernel[grid](...)`` launches nothing: each launch becomes a compile
    request (the kernel, the Triton types of its arguments, its constexprs, ``num_warps`` and
    ``num_stages``) appended to the list this yields. So a wrapper's own choice of block sizes
    is what gets compiled, specialised as a real launch would be (:func:`specialize`). Only for
    kernels defined without the interpreter (``TRITON_INTERPRET=0``)."""
    from triton.runtime.jit import JITFunction

    requests: list[dict] = []
    original = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        options = {"num_warps": kwargs.pop("num_warps", 4), "num_stages": kwargs.pop("num_stages", 3)}
        bound = dict(zip(self.arg_names, args))
        bound.update({k: v for k, v in kwargs.items() if k in self.arg_names})
        requests.append(dict(kernel=self, **specialize(self, bound), arch=arch, **options))

    JITFunction.run = run
    try:
        yield requests
    finally:
        JITFunction.run = original


# -- compiling in a child process ---------------------------------------------------------------
_PLAIN = (int, float, bool, str, type(None))


def _ship(kernel, functions: dict, values: dict, modules: dict) -> str:
    """Collect what the child needs to rebuild ``kernel``: the source of it and of every jitted
    helper it names, with their file names and first lines (so errors point at the notebook),
    and the modules and plain values among their globals."""
    import inspect

    fn = _python_function(kernel)
    if fn.__name__ in functions:
        return fn.__name__
    lines, first = inspect.getsourcelines(fn)
    functions[fn.__name__] = {"file": fn.__code__.co_filename, "first": first, "source": "".join(lines)}
    for name in _names(fn):
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if _is_kernel(value):
            _ship(value, functions, values, modules)
        elif isinstance(value, types.ModuleType):
            modules[name] = value.__name__
        elif isinstance(value, _PLAIN):
            values[name] = {"plain": value}
        elif type(value).__name__ == "constexpr" and isinstance(getattr(value, "value", None), _PLAIN):
            values[name] = {"constexpr": value.value}
    return fn.__name__


def _compile_in_child(requests: list[dict]) -> list:
    import base64
    import json
    import sys

    jobs = []
    for r in requests:
        functions, values, modules = {}, {}, {}
        name = _ship(r["kernel"], functions, values, modules)
        jobs.append({"kernel": name, "functions": functions, "values": values, "modules": modules,
                     **{k: v for k, v in r.items() if k != "kernel"}})
    with tempfile.TemporaryDirectory(prefix="gpucompile-") as tmp:
        spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec.write_text(json.dumps(jobs))
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        proc = subprocess.run([sys.executable, "-m", "gpucompile", str(spec), str(result)], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not result.exists():
            raise RuntimeError(f"the compiling child process failed (status {proc.returncode}):\n{proc.stderr[-3000:]}")
        answers = json.loads(result.read_text())
    out = []
    for a in answers:
        if "error" in a:
            out.append(KernelCompileError(a["error"]))
            continue
        asm = {k: base64.b64decode(v) if k == "cubin" else v for k, v in a["asm"].items()}
        out.append(Compiled(a["name"], a["arch"], a["num_warps"], a["num_stages"], asm, Usage(**a["usage"]),
                            a["ptxas_log"]))
    return out


def child_main(spec_path: str, result_path: str) -> int:
    """In the child: rebuild each kernel from its source, compile it, write the results as JSON.
    A job may hold ``setup``: module-level code run first ([{"file", "source"}], trusted)."""
    import base64
    import importlib
    import json
    import linecache
    from dataclasses import asdict

    import triton.language as tl

    answers = []
    for job in json.loads(Path(spec_path).read_text()):
        scope = {"__name__": "gpucompile_kernels", "triton": importlib.import_module("triton"), "tl": tl}
        for setup in job.get("setup", []):  # trusted module-level code (a reference module's constants)
            exec(compile(setup["source"], setup["file"], "exec"), scope)
        for name, module in job["modules"].items():
            scope[name] = importlib.import_module(module)
        for name, v in job["values"].items():
            scope[name] = tl.constexpr(v["constexpr"]) if "constexpr" in v else v["plain"]
        files: dict = {}  # the notebook's lines, each function at its own line, for messages and getsource
        for f in job["functions"].values():
            lines = files.setdefault(f["file"], [])
            body = f["source"].splitlines(True)
            lines += ["\n"] * max(0, f["first"] - 1 + len(body) - len(lines))
            lines[f["first"] - 1: f["first"] - 1 + len(body)] = body
        for file, lines in files.items():
            linecache.cache[file] = (sum(map(len, lines)), None, lines, file)
        for f in job["functions"].values():
            exec(compile("\n" * (f["first"] - 1) + f["source"], f["file"], "exec"), scope)
        # A Triton dtype passed as a constexpr crosses as {"tl_dtype": "fp16"} (gpucompile.chapter07.launch_request).
        constexprs = {k: tl.dtype(v["tl_dtype"]) if isinstance(v, dict) and "tl_dtype" in v else v
                      for k, v in job["constexprs"].items()}
        try:
            c = _compile_here(scope[job["kernel"]], job["signature"], constexprs, attrs=job.get("attrs"),
                              arch=job["arch"], num_warps=job["num_warps"], num_stages=job["num_stages"])
        except KernelCompileError as exc:
            answers.append({"error": str(exc)})
            continue
        asm = {k: base64.b64encode(v).decode() if isinstance(v, bytes) else v for k, v in c.asm.items()}
        answers.append({"name": c.name, "arch": c.arch, "num_warps": c.num_warps, "num_stages": c.num_stages,
                        "asm": asm, "usage": asdict(c.usage), "ptxas_log": c.ptxas_log})
    Path(result_path).write_text(json.dumps(answers))
    return 0


__all__ = ["ARCHS", "Compiled", "KernelCompileError", "Usage", "as_jit", "capture_launches", "compile_kernel",
           "compile_many", "explain", "jitted_functions", "parse_ptxas", "sass", "specialize"]
