"""Generated Triton modules' loading (runtime/py_module.py): while a module runs, Triton's jit
module reads each kernel's text from the function's code object and the module's text
(`function_lines`) instead of tokenizing it through inspect; what Triton keeps must be what
inspect gives, line for line, or its cache keys (source and line) would differ from the
compile workers', which load the text with inspect itself."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("triton")

import ember  # noqa: E402,F401

HANDWRITTEN = textwrap.dedent('''
    import triton
    import triton.language as tl


    def helper_without_decorator(x):
        return x + 1


    @triton.jit
    def _prelude(x):
        return x * 2   # a comment after the last statement


    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                     key=["n"])
    @triton.jit
    def k_autotuned(x_ptr, y_ptr, n,
                    BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        # a comment inside

        mask = offs < n
        tl.store(y_ptr + offs,
                 _prelude(tl.load(x_ptr + offs, mask=mask)),
                 mask=mask
                 )
        # a trailing comment at the body's indent


    @triton.jit
    def k_one_line(x_ptr): tl.store(x_ptr, 1.0)
    @triton.jit
    def k_last_is_if(x_ptr, n, BLOCK: tl.constexpr):
        if n > 0:
            tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), tl.float32))
        else:
            pass
''')

CHILD = textwrap.dedent('''
    import inspect, json, sys, textwrap
    import triton.runtime.jit as tj
    from ember.runtime import py_module
    from ember.runtime.cache import ArtifactCache
    from triton.runtime.jit import JITFunction
    answered = []
    real = py_module.function_lines

    def lines(fn, path):
        found = real(fn, path)
        if found is not None:
            answered.append(fn.__name__)
        return found
    py_module.function_lines = lines
    out = []
    for i, path in enumerate(sys.argv[2:]):
        mod = py_module.load_python_module(open(path).read(), ArtifactCache(sys.argv[1]))
        assert tj.inspect is inspect, "Triton's jit module kept the stand-in"
        for name, obj in sorted(vars(mod).items()):
            jit = py_module._jit_function(obj)
            if jit is None or jit.fn.__module__ != mod.__name__:
                continue
            lines, first = inspect.getsourcelines(jit.fn)
            kept = getattr(jit, "raw_src", None)
            src = getattr(jit, "src", None) or getattr(jit, "_src", None)
            out.append({"module": i, "name": name, "first": first,
                        "kept_first": jit.starting_line_number,
                        "same_lines": kept is None or list(kept) == lines,
                        "same_src": src is None or src in textwrap.dedent("".join(lines)),
                        "answered": name in answered})
    print(json.dumps(out))
''')


def test_kernel_text_is_inspects(tmp_path, exported_sources):
    """Every jit function of a handwritten module (decorator stacks, a multi-line last
    statement closed on its own line, a trailing comment, a one-line body, an `if` last) and
    of generated ones keeps inspect's lines and first line; the code objects answered for
    every generated kernel (inspect for the handwritten one with a trailing comment, which
    inspect counts in), and Triton's jit module has inspect back after the load."""
    from ember.frontend.options import CompileOptions  # noqa: F401 (ember's import order)

    def f(x, y):
        return torch.softmax(x * y + 1, dim=-1).sum(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"     # (else the interpreter's)
    torch.compile(f, backend="ember", options={"target": "triton"})(
        torch.randn(8, 32, device=device), torch.randn(8, 32, device=device))
    assert exported_sources, "no Triton program was generated"
    paths = []
    for k, text in enumerate([HANDWRITTEN, *exported_sources]):
        paths.append(tmp_path / f"m{k}.py")
        paths[-1].write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "cache"),
                           *map(str, paths)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    kernels = json.loads(proc.stdout.strip().splitlines()[-1])
    names = {k["name"] for k in kernels if k["module"] == 0}
    assert names == {"_prelude", "k_autotuned", "k_one_line", "k_last_is_if"}, names
    assert any(k["module"] > 0 for k in kernels)
    for k in kernels:
        assert k["first"] == k["kept_first"] and k["same_lines"] and k["same_src"], k
        assert k["answered"] == (k["name"] != "k_autotuned" or k["module"] > 0), k
