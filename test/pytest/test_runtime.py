"""Runtime tests on hand-written Programs (no MLIR): C++ kernels through g++, Python/Triton
kernels (Triton under TRITON_INTERPRET=1), the arena, the artifact cache and externs."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from ember.runtime import (ArtifactCache, BuildError, Program, Step, ValueInfo, load, read_env,
                           vectorization_report)
from ember.runtime import cpp_build

# Follows the C++ kernel ABI of docs/internals.md: inputs, outputs, then every dim of every arg.
CPP = r"""
#include <cstdint>
extern "C" void ember_add(const float* __restrict__ a, const float* __restrict__ b,
                          float* __restrict__ out, const int64_t* __restrict__ sizes) {
  const int64_t n = sizes[0] * sizes[1];
  #pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
extern "C" void ember_rowsum(const float* __restrict__ in, float* __restrict__ out,
                             const int64_t* __restrict__ sizes) {
  const int64_t m = sizes[0], n = sizes[1];
  #pragma omp parallel for
  for (int64_t i = 0; i < m; ++i) {
    float acc = 0.f;
    for (int64_t j = 0; j < n; ++j) acc += in[i * n + j];
    out[i] = acc;
  }
}
"""
F32 = "float32"


def add_rowsum_program(m=4, n=8, source=CPP):
    # %2 = x + y and %3 = %2 + %2 are both live at the second add: separate 64-aligned slots;
    # %4 = rowsum(%3) escapes (own allocation).
    slot = -(-4 * m * n // 64) * 64
    vals = [ValueInfo((m, n), F32), ValueInfo((m, n), F32), ValueInfo((m, n), F32, 0),
            ValueInfo((m, n), F32, slot), ValueInfo((m,), F32)]
    steps = [Step("kernel", "ember_add", (0, 1), (2,)), Step("kernel", "ember_add", (2, 2), (3,)),
             Step("kernel", "ember_rowsum", (3,), (4,))]
    return Program("cpu", "cpp", source, vals, 2, steps, [4], 2 * slot,
                   ["ember_add", "ember_rowsum"])


def test_cpp_kernels_match_torch(tmp_path):
    cp = load(add_rowsum_program(), cache=tmp_path)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    (out,) = cp(x, y)
    torch.testing.assert_close(out, (2 * (x + y)).sum(1))
    # non-contiguous input is made contiguous, not misread
    xt = torch.randn(8, 4).t()
    (out,) = cp(xt, y)
    torch.testing.assert_close(out, (2 * (xt + y)).sum(1))


def test_input_checks(tmp_path):
    cp = load(add_rowsum_program(), cache=tmp_path)
    with pytest.raises(TypeError, match="takes 2 tensors, got 1"):
        cp(torch.randn(4, 8))
    with pytest.raises(ValueError, match=r"input 1 must be torch.float32 \[4, 8\].*\[4, 9\]"):
        cp(torch.randn(4, 8), torch.randn(4, 9))
    with pytest.raises(ValueError, match="input 0"):
        cp(torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8))


RECORDING_PY = """
import torch
LOG = []
def add(a, b, out):
    LOG.append(out.data_ptr())
    torch.add(a, b, out=out)
def rowsum(a, out):
    torch.sum(a, 1, out=out)
"""


@pytest.mark.parametrize("reuse_arena", [True, False])
def test_arena_reuse_shares_memory(tmp_path, reuse_arena):
    # %2 = x+x @0, %3 = %2+%2 @64, %4 = %3+%3 @0 (reuses %2's slot: %2 is dead), %5 = rowsum(%4)
    vals = [ValueInfo((4, 4), F32), ValueInfo((4, 4), F32, 0), ValueInfo((4, 4), F32, 64),
            ValueInfo((4, 4), F32, 0), ValueInfo((4,), F32)]
    steps = [Step("kernel", "add", (0, 0), (1,)), Step("kernel", "add", (1, 1), (2,)),
             Step("kernel", "add", (2, 2), (3,)), Step("kernel", "rowsum", (3,), (4,))]
    prog = Program("triton", "python", RECORDING_PY, vals, 1, steps, [4], 128, ["add", "rowsum"])
    cp = load(prog, cache=tmp_path, reuse_arena=reuse_arena)
    log = sys.modules[cp._kernels["add"].__module__].LOG
    x = torch.randn(4, 4)
    (out,) = cp(x)
    torch.testing.assert_close(out, (8 * x).sum(1))
    assert log[0] == log[2] and log[1] == log[0] + 64
    # the output does not alias the arena: a second call leaves the first result intact
    first = out.clone()
    cp(torch.randn(4, 4))
    torch.testing.assert_close(out, first)
    assert log[3] == log[5] and log[3] + 64 == log[4]


def test_concurrent_calls(tmp_path):
    # ctypes drops the GIL during kernels: calls from threads overlap, each needs its own arena.
    import concurrent.futures
    cp = load(add_rowsum_program(64, 256), cache=tmp_path)

    def work(seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(30):
            x, y = torch.randn(64, 256, generator=g), torch.randn(64, 256, generator=g)
            torch.testing.assert_close(cp(x, y)[0], (2 * (x + y)).sum(1), rtol=1e-4, atol=1e-3)
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        list(ex.map(work, range(4)))


def test_output_in_arena_is_rejected(tmp_path):
    vals = [ValueInfo((4, 8), F32), ValueInfo((4, 8), F32), ValueInfo((4, 8), F32, 0),
            ValueInfo((32,), F32)]
    steps = [Step("kernel", "ember_add", (0, 1), (2,)), Step("view", "", (2,), (3,))]
    prog = Program("cpu", "cpp", CPP, vals, 2, steps, [3], 128, ["ember_add"])
    with pytest.raises(AssertionError, match="aliases the arena"):
        load(prog, cache=tmp_path)


def test_const_and_view_steps(tmp_path):
    # %1 = const [[1,2],[3,4]]; %2 = view x [2,2]; %3 = %2 + %1; outputs %3 and %1 (cloned)
    vals = [ValueInfo((4,), F32), ValueInfo((2, 2), F32), ValueInfo((2, 2), F32),
            ValueInfo((2, 2), F32)]
    steps = [Step("const", "", (), (1,), {"value": [[1, 2], [3, 4]]}),
             Step("view", "", (0,), (2,)), Step("kernel", "ember_add", (2, 1), (3,))]
    cp = load(Program("cpu", "cpp", CPP, vals, 1, steps, [3, 1], 0, ["ember_add"]),
              cache=tmp_path)
    c = torch.tensor([[1., 2], [3, 4]])
    out, const = cp(torch.arange(4.))
    torch.testing.assert_close(out, torch.arange(4.).view(2, 2) + c)
    const.zero_()   # the caller's copy: must not change the program's constant
    out, _ = cp(torch.zeros(4))
    torch.testing.assert_close(out, c)


def test_build_error_has_compiler_message(tmp_path):
    bad = 'extern "C" void k(float* out, const long* s) { out[0] = undeclared_thing; }'
    prog = Program("cpu", "cpp", bad, [ValueInfo((1,), F32)], 0,
                   [Step("kernel", "k", (), (0,))], [0], 0, ["k"])
    with pytest.raises(BuildError) as e:
        load(prog, cache=tmp_path)
    assert "undeclared_thing" in str(e.value) and "error" in str(e.value)
    assert e.value.source_path.is_file() and e.value.source_path.read_text() == bad
    assert str(e.value.source_path) in str(e.value)


def test_atomic_write_and_stale_temp(tmp_path, monkeypatch):
    monkeypatch.setattr(cpp_build, "_loaded", {})     # forget libraries other tests loaded
    cache = ArtifactCache(tmp_path)
    key, so = cpp_build.build_shared_library(CPP, cache=cache)
    assert so.is_file() and not list(tmp_path.rglob("*.tmp"))
    # A writer that crashed mid-compile leaves only a temp file: it is never taken for the
    # artifact (fresh cache dir, so dlopen cannot hand back the library loaded above).
    cache2 = ArtifactCache(tmp_path / "second")
    so2 = cache2.path("cpp", key, ".so")
    so2.parent.mkdir(parents=True)
    stale = so2.parent / f".{so2.name}.crashed.tmp"
    stale.write_bytes(b"\x7fELF garbage")
    before = cpp_build.stats["compiles"]
    cp = load(add_rowsum_program(), cache=cache2)
    assert cpp_build.stats["compiles"] == before + 1 and stale.exists()
    x = torch.ones(4, 8)
    torch.testing.assert_close(cp(x, x)[0], torch.full((4,), 32.))


_SUBPROCESS = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, {testdir!r})
    from test_runtime import add_rowsum_program
    from ember.runtime import load, cpp_build
    cp = load(add_rowsum_program())          # cache dir from EMBER_CACHE_DIR
    x = torch.ones(4, 8)
    print(json.dumps({{"stats": cpp_build.stats, "out": cp(x, x)[0].tolist()}}))
""")


def _run_subprocess(cache_dir, n=1):
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache_dir))
    script = _SUBPROCESS.format(testdir=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def test_cache_hit_in_new_process(tmp_path):
    (first,) = _run_subprocess(tmp_path)
    assert first["stats"]["compiles"] == 1 and first["out"] == [32.0] * 4
    (second,) = _run_subprocess(tmp_path)
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_hits"] == 1
    assert second["out"] == [32.0] * 4


def test_corrupt_library_is_rebuilt(tmp_path):
    # A damaged file under the final name (ember's writes are atomic, so only something else
    # can produce one) fails to dlopen and is rebuilt. In a new process: dlopen matches an
    # already-loaded library by path, so this process could not observe the damage.
    _, so = cpp_build.build_shared_library(CPP, cache=ArtifactCache(tmp_path))
    so.unlink()
    so.write_bytes(b"not a shared object")
    (r,) = _run_subprocess(tmp_path)
    assert r["stats"]["compiles"] == 1 and r["out"] == [32.0] * 4


def test_concurrent_builds_compile_once(tmp_path):
    results = _run_subprocess(tmp_path, n=2)
    assert sum(r["stats"]["compiles"] for r in results) == 1
    assert all(r["out"] == [32.0] * 4 for r in results)
    assert not list(tmp_path.rglob("*.tmp"))


def test_vectorization_report():
    report = vectorization_report(CPP)
    assert "loop vectorized" in report


def test_extern_steps_match_torch(tmp_path):
    # inputs a b c x w bias p q (0..7); %8 = mm(a, b) in the arena; %9 = addmm(c, %8, b),
    # %10 = conv(x, w, bias), %11 = bmm(p, q) escape.
    shapes = [(4, 4), (4, 4), (4, 4), (2, 3, 9, 9), (5, 3, 3, 3), (5,), (3, 4, 5), (3, 5, 2),
              (4, 4), (4, 4), (2, 5, 4, 4), (3, 4, 2)]
    vals = [ValueInfo(s, F32, 0 if i == 8 else None) for i, s in enumerate(shapes)]
    conv = {"stride": [2, 2], "padding": [0, 0], "dilation": [1, 1], "groups": 1}
    steps = [Step("extern", "aten.mm", (0, 1), (8,)),
             Step("extern", "aten.addmm", (2, 8, 1), (9,)),
             Step("extern", "aten.convolution", (3, 4, 5), (10,), conv),
             Step("extern", "aten.bmm", (6, 7), (11,))]
    cp = load(Program("cpu", "cpp", "", vals, 8, steps, [9, 10, 11], 64), cache=tmp_path)
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)
    x, w, bias = torch.randn(2, 3, 9, 9), torch.randn(5, 3, 3, 3), torch.randn(5)
    p, q = torch.randn(3, 4, 5), torch.randn(3, 5, 2)
    r_addmm, r_conv, r_bmm = cp(a, b, c, x, w, bias, p, q)
    torch.testing.assert_close(r_addmm, torch.addmm(c, a @ b, b))
    torch.testing.assert_close(r_conv, torch.nn.functional.conv2d(x, w, bias, stride=2))
    torch.testing.assert_close(r_bmm, torch.bmm(p, q))


def test_extern_sdpa(tmp_path):
    vals = [ValueInfo((2, 3, 8, 4), F32)] * 3 + [ValueInfo((2, 3, 8, 4), F32)]
    prog = Program("cpu", "cpp", "", vals, 3,
                   [Step("extern", "aten.sdpa", (0, 1, 2), (3,), {"is_causal": True})], [3])
    q, k, v = (torch.randn(2, 3, 8, 4) for _ in range(3))
    torch.testing.assert_close(
        load(prog, cache=tmp_path)(q, k, v)[0],
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))


TRITON_PY = """
import triton
import triton.language as tl

@triton.jit
def _add_kernel(a, b, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(a + offs, mask=m) + tl.load(b + offs, mask=m), mask=m)

def ember_tadd(a, b, out):
    n = out.numel()
    _add_kernel[(triton.cdiv(n, 64),)](a, b, out, n, BLOCK=64)
"""


def test_triton_module_under_interpreter(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    # triton 3.x reads TRITON_INTERPRET when @triton.jit decorates, i.e. at module import.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    vals = [ValueInfo((10, 10), F32), ValueInfo((10, 10), F32), ValueInfo((10, 10), F32, 0),
            ValueInfo((10, 10), F32)]
    steps = [Step("kernel", "ember_tadd", (0, 1), (2,)), Step("kernel", "ember_tadd", (2, 2), (3,))]
    cp = load(Program("triton", "python", TRITON_PY, vals, 2, steps, [3], 448, ["ember_tadd"]),
              cache=tmp_path)
    x, y = torch.randn(10, 10), torch.randn(10, 10)
    torch.testing.assert_close(cp(x, y)[0], 2 * (x + y))
    assert list(tmp_path.rglob("*.py")) and not list(tmp_path.rglob("*.tmp"))


def test_read_env():
    e = read_env({"EMBER_CACHE_DIR": "/x/c", "EMBER_DEBUG_DIR": "/x/d", "EMBER_TARGET": "cpu"})
    assert (str(e.cache_dir), str(e.debug_dir), e.target) == ("/x/c", "/x/d", "cpu")
    assert str(read_env({"XDG_CACHE_HOME": "/xdg", "HOME": "/h"}).cache_dir) == "/xdg/ember"
    assert str(read_env({"HOME": "/h"}).cache_dir) == "/h/.cache/ember"
    with pytest.raises(ValueError, match="EMBER_TARGET"):
        read_env({"EMBER_TARGET": "tpu"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (device tool)")
def test_cuda_triton_and_externs(tmp_path):
    pytest.importorskip("triton")
    # %2 = x + y (Triton, arena @0); %3 = mm(%2, y) (arena @512); %4 = view %3; %5 = %4 + %4
    vals = [ValueInfo((8, 8), F32), ValueInfo((8, 8), F32), ValueInfo((8, 8), F32, 0),
            ValueInfo((8, 8), F32, 512), ValueInfo((64,), F32), ValueInfo((64,), F32)]
    steps = [Step("kernel", "ember_tadd", (0, 1), (2,)), Step("extern", "aten.mm", (2, 1), (3,)),
             Step("view", "", (3,), (4,)), Step("kernel", "ember_tadd", (4, 4), (5,))]
    src = TRITON_PY + "\n# compiled for the GPU, not interpreted\n"
    cp = load(Program("triton", "python", src, vals, 2, steps, [5], 768, ["ember_tadd"]),
              "cuda", cache=tmp_path)
    x, y = torch.randn(8, 8, device="cuda"), torch.randn(8, 8, device="cuda")
    (out,) = cp(x, y)
    assert out.is_cuda
    torch.testing.assert_close(out, (2 * ((x + y) @ y)).view(64), rtol=1e-3, atol=1e-3)


def test_inference_attention_library_call_dispatches_like_eager():
    # A traced memory-efficient attention with attn_bias=None (a None positional argument) and
    # only its output used goes back through F.scaled_dot_product_attention: it runs even where
    # that specific kernel does not exist (the CPU), and gives eager's result.
    import torch.nn.functional as F
    from ember.runtime.externs import resolve_library
    run = resolve_library("aten._scaled_dot_product_efficient_attention.default", {
        "tensor_args": ["query", "key", "value"],
        "kwargs": {"compute_log_sumexp": False, "dropout_p": 0.0, "is_causal": True,
                   "none_args": ["attn_bias"]},
        "results": [0]})
    q, k, v = torch.randn(3, 2, 4, 16, 8).unbind(0)
    (out,) = run([q, k, v])
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


THREADS_PROBE = r"""#include <omp.h>
extern "C" int ember_region_threads() {
  int n = 0;
  #pragma omp parallel
  {
    #pragma omp single
    n = omp_get_num_threads();
  }
  return n;
}
"""


def test_kernel_threads_follow_torch(tmp_path):
    """Kernel libraries are built with -fopenmp against libgomp.so.1, which resolves to the
    OpenMP runtime torch has already loaded: one thread pool, and a parallel region of a
    kernel uses torch.get_num_threads() threads (torch.set_num_threads applies, also in a
    thread that torch set up), never a second pool that oversubscribes the cores."""
    import threading
    lib = cpp_build.load_library(THREADS_PROBE, cache=tmp_path)
    before = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            assert lib.ember_region_threads() == n == torch.get_num_threads()
            seen = []

            def other():
                seen.append((torch.get_num_threads(), lib.ember_region_threads()))
            t = threading.Thread(target=other)
            t.start()
            t.join()
            assert seen[0][0] == seen[0][1], seen
    finally:
        torch.set_num_threads(before)


def test_convolution_extern_hands_over_the_librarys_result():
    # aten.convolution.out is the functional op plus a copy into `out`: the extern returns
    # the library's own result instead, which the executor keeps (no second pass over it)
    from ember.runtime.externs import resolve
    efn = resolve("aten.convolution", {"stride": [2, 2], "padding": [1, 1],
                                       "dilation": [1, 1], "groups": 1})
    x, w, b = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3), torch.randn(4)
    planned = torch.full((2, 4, 5, 5), float("nan"))
    own = efn([x, w, b], [planned])
    assert isinstance(own, list) and len(own) == 1
    assert torch.equal(own[0], torch.nn.functional.conv2d(x, w, b, stride=2, padding=1))
    assert planned.isnan().all()        # nothing copied into the planned buffer


def test_tail_split_runs_the_last_kernel_apart(tmp_path):
    """CompiledProgram.tail_split / run_head / run_tail (what a CUDA graph uses to launch the
    last kernel after each replay, into new memory): the head's table plus the tail give the
    call's outputs; the tail's output is new memory on each run; a last kernel writing into
    the arena or below the size bound is no tail."""
    cp = load(add_rowsum_program(), cache=tmp_path)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert cp.tail_split(1 << 20) is None       # 16 bytes of output: below the bound
    # a generated kernel's launch from Python costs more than a copy of small outputs
    assert cp.tail_split(0, kernel_min_bytes=17) is None
    assert cp.tail_split(0, kernel_min_bytes=16) is not None
    start, positions = cp.tail_split(0)
    assert positions == {0} and start == (2, ())      # the third step's runs: its output's alloc first
    vals = cp.run_head((x, y), start)
    assert vals[4] is None and vals[3] is not None      # rowsum not run, its input computed
    (a,), (b,) = cp.run_tail(vals, start), cp.run_tail(vals, start)
    torch.testing.assert_close(a, cp(x, y)[0])
    assert a.data_ptr() != b.data_ptr()
    torch.testing.assert_close(a, b)
    # what the tail reads (%3, planned in the arena) has memory of its own in the head: a
    # graph keeping it for its tail keeps 128 bytes, not the arena (%2's storage)
    assert cp._tail_own(start) == (3,) and cp.tail_split(0, arena_free=True)[0] == start
    assert vals[3].untyped_storage().nbytes() == 4 * 8 * 4
    assert vals[3].untyped_storage().data_ptr() != vals[2].untyped_storage().data_ptr()


def test_tail_split_takes_a_last_library_call_and_its_views(tmp_path):
    """A last library call (torch allocates its result) and the views of its result after it
    are a tail too: a CUDA graph runs them after each replay and hands out their new memory
    (an exact-mode bf16 layer norm ending an MLP block: no copy of the output out of the
    pool). Not when the call writes a fill in place, nor when a trailing view reads a value
    of the head."""
    from ember.runtime.program import Program, Step, ValueInfo

    def program(params=None, view_of=3):
        vals = [ValueInfo((4, 8), F32), ValueInfo((4, 8), F32),
                ValueInfo((4, 8), F32, 0 if view_of == 3 else None),
                ValueInfo((4, 8), F32), ValueInfo((32,), F32)]
        steps = [Step("kernel", "ember_add", (0, 1), (2,)),
                 Step("library", "aten.cumsum.default", (2,), (3,),
                      params or {"tensor_args": ["self"], "kwargs": {"dim": 1}}),
                 Step("view", "collapse_shape", (view_of,), (4,))]
        return Program("cpu", "cpp", CPP, vals, 2, steps, [4], 128, ["ember_add", "ember_rowsum"])

    cp = load(program(), cache=tmp_path)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert cp.tail_split(1 << 20) is None       # 128 bytes of output: below the bound
    # a library call launches cheaply: the bound for generated kernels does not hold it back
    assert cp.tail_split(0, kernel_min_bytes=1 << 20) is not None
    start, positions = cp.tail_split(0)
    assert positions == {0} and start == (1, ())      # the library call's run (the add is one run)
    vals = cp.run_head((x, y), start)
    assert vals[3] is None and vals[2] is not None
    (a,), (b,) = cp.run_tail(vals, start), cp.run_tail(vals, start)
    torch.testing.assert_close(a, torch.cumsum(x + y, 1).reshape(32))
    assert a.data_ptr() != b.data_ptr() and a.data_ptr() != vals[2].data_ptr()
    in_place = {"tensor_args": ["self"], "kwargs": {"dim": 1}, "in_place": 0}
    assert load(program(in_place), cache=tmp_path).tail_split(0) is None
    assert load(program(view_of=2), cache=tmp_path).tail_split(0) is None


def embedding_backward_program(fill_read_twice=False):
    """A backward's last steps as ember compiles an embedding's gradient: a kernel writes the
    token gradients (%3 = g + s) into a donated saved activation's memory (%2), then a fill
    (%6, vocabulary x hidden) and `scatter_add` into it in place (%7 = the weight's gradient).
    Inputs: %0 token ids [4], %1 g [4, 8], %2 s [4, 8] (donated); outputs: %7 [16, 8] and
    %5 = rowsum(%3) [4]."""
    from ember.runtime.program import Program, Step, ValueInfo
    vals = [ValueInfo((4,), "int64"), ValueInfo((4, 8), F32), ValueInfo((4, 8), F32),
            ValueInfo((4, 8), F32, 0, in_input=2), ValueInfo((4, 8), F32), ValueInfo((4,), F32),
            ValueInfo((16, 8), F32), ValueInfo((16, 8), F32)]
    scatter = {"tensor_args": ["self", "index", "src"], "kwargs": {"dim": 0}, "results": [0],
               "views": [[1, 0, 4, 8, 1, 0]], "in_place": 0}
    steps = [Step("kernel", "ember_add", (1, 2), (3,)),
             Step("kernel", "ember_rowsum", (3,), (5,)),
             Step("view", "collapse_shape", (3,), (4,)),
             Step("fill", "full", (), (6,), {"value": 0.0}),
             Step("library", "aten.scatter_add.default", (6, 0, 4), (7,), scatter)]
    if fill_read_twice:     # the fill read by another step too: no tail
        steps.insert(4, Step("kernel", "ember_rowsum", (6,), (5,)))
        del steps[1]
    return Program("cpu", "cpp", CPP, vals, 3, steps, [7, 5], 0, ["ember_add", "ember_rowsum"],
                   donated_inputs=[2])


def test_tail_split_takes_an_embedding_gradients_fill_and_scatter(tmp_path):
    """A backward ending in a fill and a `scatter_add` written into it in place (the embedding
    gradient, IN_PLACE) has those two steps as its tail: a CUDA graph runs them after each
    replay into new memory, so the gradient (Llama's 62.5 MB, GPT-2's 150 MB) does not lie in
    the graph's pool between steps. The tail reads the token gradients where the head wrote
    them (a donated input's memory, not the arena: allowed with `arena_free`); head + tail
    give the call's outputs bit for bit, the gradient in new memory each time. Not when the
    fill has another reader."""
    cp = load(embedding_backward_program(), cache=tmp_path)
    idx = torch.tensor([3, 0, 3, 15])
    g, s = torch.randn(4, 8), torch.randn(4, 8)
    want = torch.zeros(16, 8).scatter_add_(0, idx.view(4, 1).expand(4, 8), g + s)
    assert cp.tail_split(1 << 20) is None           # 512 bytes: below the bound
    tail, positions = cp.tail_split(0, arena_free=True)
    assert positions == {0} and tail == (cp._step_start[3], ())    # from the fill on
    assert cp.tail_reads(tail) == {0, 4}            # the ids, the token gradients' view
    ref = cp(idx, g, s.clone())
    head = cp.run_head((idx, g, s.clone()), tail)
    assert head[7] is None and head[6] is None and torch.equal(head[5], ref[1])
    (a, _), (b, _) = cp.run_tail(head, tail), cp.run_tail(head, tail)
    assert torch.equal(a, ref[0]) and torch.equal(a, want) and torch.equal(b, a)
    assert a.data_ptr() != b.data_ptr()
    assert load(embedding_backward_program(fill_read_twice=True),
                cache=tmp_path).tail_split(0) is None


def test_fill_tail_starts_where_nothing_is_read_in_the_arena(tmp_path):
    """Two embedding gradients at the backward's end (BERT: token types', whose scatter reads
    an index made in the arena, then the words'): the tail starts at the second fill, whose
    run reads nothing in the arena, so the graph keeps nothing for it beside the gradient it
    writes; with the order reversed, both (the arena value gets memory of its own)."""
    from ember.runtime.program import Program, Step, ValueInfo
    scatter = {"tensor_args": ["self", "index", "src"], "kwargs": {"dim": 0}, "results": [0],
               "views": [[1, 0, 4, 8, 1, 0]], "in_place": 0}

    def program(arena_first=True):
        vals = [ValueInfo((4,), "int64"), ValueInfo((4, 8), F32), ValueInfo((4, 8), F32),
                ValueInfo((4, 8), F32, 0, in_input=2), ValueInfo((4, 8), F32, 0),
                ValueInfo((16, 8), F32), ValueInfo((16, 8), F32), ValueInfo((16, 8), F32),
                ValueInfo((16, 8), F32)]
        pairs = [[Step("fill", "full", (), (5,), {"value": 0.0}),
                  Step("library", "aten.scatter_add.default", (5, 0, 4), (6,), scatter)],
                 [Step("fill", "full", (), (7,), {"value": 0.0}),
                  Step("library", "aten.scatter_add.default", (7, 0, 3), (8,), scatter)]]
        if not arena_first:
            pairs.reverse()
        steps = [Step("kernel", "ember_add", (1, 2), (3,)),
                 Step("kernel", "ember_add", (1, 1), (4,))] + pairs[0] + pairs[1]
        return Program("cpu", "cpp", CPP, vals, 3, steps, [8, 6], 128,
                       ["ember_add", "ember_rowsum"], donated_inputs=[2])

    idx = torch.tensor([3, 0, 3, 15])
    g, s = torch.randn(4, 8), torch.randn(4, 8)
    want = [torch.zeros(16, 8).scatter_add_(0, idx.view(4, 1).expand(4, 8), v)
            for v in (g + s, g + g)]
    for arena_first, start_step, positions in ((True, 4, {0}), (False, 2, {0, 1})):
        cp = load(program(arena_first), cache=tmp_path)
        tail, pos = cp.tail_split(0, arena_free=True)
        assert tail == (cp._step_start[start_step], ()) and pos == positions
        assert cp._tail_own(tail) == (() if arena_first else (4,))
        outs = cp.run_tail(cp.run_head((idx, g, s.clone()), tail), tail)
        assert torch.equal(outs[0], want[0]) and torch.equal(outs[1], want[1])


def test_tail_split_for_a_shared_pool_takes_the_cast_its_matmul_reads(tmp_path):
    """With `arena_free` (a training forward, whose pool its backward's capture shares) the
    tail also takes the kernel that makes, from program inputs alone, an arena value the last
    step reads (autocast's bf16 copy of the LM head's weight): the head skips it, the tail runs
    it first into new memory, and nothing the tail reads lies in the arena. Without the option
    (inference) the tail is the last step alone, as before."""
    from ember.runtime.program import Program, Step, ValueInfo

    vals = [ValueInfo((4, 8), F32), ValueInfo((4, 8), F32),
            ValueInfo((4, 8), F32, 0), ValueInfo((4, 8), F32), ValueInfo((32,), F32)]
    steps = [Step("kernel", "ember_add", (0, 1), (2,)),
             Step("library", "aten.cumsum.default", (2,), (3,),
                  {"tensor_args": ["self"], "kwargs": {"dim": 1}}),
             Step("view", "collapse_shape", (3,), (4,))]
    cp = load(Program("cpu", "cpp", CPP, vals, 2, steps, [4], 128, ["ember_add", "ember_rowsum"]),
              cache=tmp_path)
    # (not a kernel reading a donated input: after the head its memory may hold later values
    # of a backward; the tail then reads the arena value, given memory of its own)
    donated = load(Program("cpu", "cpp", CPP, vals, 2, steps, [4], 128,
                           ["ember_add", "ember_rowsum"], donated_inputs=[0]), cache=tmp_path)
    start = donated._step_start[1]     # (after the release run of the donated input)
    assert donated.tail_split(0, arena_free=True)[0] == (start, ())
    assert donated._tail_own((start, ())) == (2,)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert cp.tail_split(0)[0] == (1, ())
    tail, positions = cp.tail_split(0, arena_free=True)
    assert tail == (1, (0,)) and positions == {0}
    assert cp.tail_reads(tail) == {0, 1}            # program inputs only: no arena
    head = cp.run_head((x, y), tail)
    arena_view = head[2].view(torch.int32)     # (bits: its uninitialised bytes may be NaNs)
    before = arena_view.clone()
    (a,), (b,) = cp.run_tail(head, tail), cp.run_tail(head, tail)
    torch.testing.assert_close(a, torch.cumsum(x + y, 1).reshape(32))
    torch.testing.assert_close(b, a)
    assert torch.equal(arena_view, before)          # the add wrote new memory, not the arena
    assert a.data_ptr() != b.data_ptr()
