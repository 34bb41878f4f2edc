"""The torch.compile frontend: registration, options, output handling, dynamic shapes, eager
fallback, the debug dump and training (docs/internals.md, stages 1 and 5)."""
import functools
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn

import ember
from ember.frontend import fx_prep
from ember.frontend.options import CompileOptions, OptionsError, default_pipeline, resolve_target
from conftest import UNLOWERED, unlowered

CPU = {"target": "cpu"}


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def compile_(fn, **kw):
    torch._dynamo.reset()
    ember.clear_reports()
    options = kw.pop("options", CPU)
    return torch.compile(fn, backend="ember", options=options, **kw)


# ---------------------------------------------------------------- registration and options

def test_backend_registered_in_fresh_interpreter(tmp_path):
    code = (
        "import sys, torch\n"
        "assert 'ember' in torch._dynamo.list_backends(), torch._dynamo.list_backends()\n"
        "f = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend='ember')\n"
        "x = torch.randn(64)\n"
        "torch.testing.assert_close(f(x), torch.sin(x) * 2 + 1)\n"
        "print('ok', 'ember' in sys.modules)\n")
    env = dict(os.environ, EMBER_CACHE_DIR=str(tmp_path / "cache"),
               EMBER_DEBUG_DIR=str(tmp_path / "debug"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ok True" in r.stdout
    # EMBER_DEBUG_DIR is honoured without options: one folder per compiled graph.
    dumped = list((tmp_path / "debug").glob("*/report.json"))
    assert dumped, list((tmp_path / "debug").rglob("*"))


def test_public_api_is_small():
    assert ember.__version__
    assert callable(ember.ember_backend) and callable(ember.last_reports)
    assert ember.CompileOptions is CompileOptions


def test_options_unknown_key_names_valid_ones():
    with pytest.raises(OptionsError) as info:
        CompileOptions.from_user({"max_grup_size": 3}, env=_env())
    msg = str(info.value)
    assert "max_grup_size" in msg
    for key in ("target", "max_group_size", "debug_dir", "cache_dir", "fallback", "pipeline"):
        assert key in msg


@pytest.mark.parametrize("bad", [{"target": "tpu"}, {"max_group_size": 0},
                                 {"max_group_size": "8"}, {"fallback": "yes"}])
def test_options_bad_values(bad):
    with pytest.raises(OptionsError):
        CompileOptions.from_user(bad, env=_env())


def _env(**kw):
    from ember.runtime.env import read_env
    return read_env({k: v for k, v in kw.items()})


def test_options_defaults_from_environment(tmp_path):
    env = _env(EMBER_DEBUG_DIR=str(tmp_path), EMBER_TARGET="triton", HOME=str(tmp_path))
    o = CompileOptions.from_user({}, env=env)
    assert o.debug_dir == str(tmp_path) and o.target == "triton"
    o = CompileOptions.from_user({"target": "cpu", "debug-dir": "x"}, env=env)
    assert o.target == "cpu" and o.debug_dir == "x"
    assert CompileOptions.from_user(o) is o


def test_options_torch_compile_passes_them():
    with pytest.raises(Exception, match="valid options are"):
        compile_(lambda x: x + 1, options={"nope": 1})(torch.randn(3))


def test_target_resolution_and_pipeline():
    assert resolve_target("auto", [torch.device("cpu")]) == "cpu"
    assert resolve_target("triton", [torch.device("cpu")]) == "triton"
    o = CompileOptions(max_group_size=7)
    assert default_pipeline(o, "cpu") == (
        "builtin.module(ember-convert-externs,ember-library-views,"
        "ember-fuse{max-group-size=7 target=cpu explain=true},"
        "canonicalize,ember-buffer-reuse{print-plan=true reshape-in-place=false},"
        "ember-lower-to-cpp)")
    assert "ember-fuse{max-group-size=7 target=triton explain=true}" in default_pipeline(o, "cuda")
    assert default_pipeline(o, "cuda").endswith("ember-lower-to-triton)")
    # a graphed backward's gradients lie in any saved activation they fit in (issue 11)
    assert "ember-buffer-reuse{print-plan=true donated-outputs-fill=0}" in \
        default_pipeline(o, "cuda")
    assert "donated-outputs-fill" not in default_pipeline(CompileOptions(cudagraphs=False),
                                                          "cuda")
    assert default_pipeline(CompileOptions(pipeline="builtin.module(x)"), "cpu") == \
        "builtin.module(x)"


def test_compile_modes(tmp_path):
    """torch.compile's `mode=`: max-autotune widens the Triton configuration search
    (ember-lower-to-triton{max-autotune=true}); the C++ path and the other modes compile as
    before; a mode torch.compile does not know is an error naming the valid ones."""
    o = CompileOptions(mode="max-autotune")
    assert default_pipeline(o, "cuda").endswith("ember-lower-to-triton{max-autotune=true})")
    assert default_pipeline(o, "cpu") == default_pipeline(CompileOptions(), "cpu")
    assert default_pipeline(CompileOptions(mode="reduce-overhead"), "cuda") == \
        default_pipeline(CompileOptions(), "cuda")
    env = _env()
    assert not CompileOptions.from_user({"mode": "max-autotune-no-cudagraphs"}, env=env).cudagraphs
    assert CompileOptions.from_user({"mode": "max-autotune-no-cudagraphs", "cudagraphs": True},
                                    env=env).cudagraphs
    with pytest.raises(OptionsError, match="mode must be one of 'default', 'reduce-overhead'"):
        CompileOptions.from_user({"mode": "fastest"}, env=env)

    def f(x):
        return torch.sigmoid(x) * 2 + 1

    x = torch.randn(40, 3)
    torch._dynamo.reset()
    ember.clear_reports()
    # what torch.compile(backend="ember", mode=...) calls, with the Triton target (interpreted)
    backend = functools.partial(ember.ember_backend, mode="max-autotune",
                                options={"target": "triton", "debug_dir": str(tmp_path)})
    torch.testing.assert_close(torch.compile(f, backend=backend)(x), f(x))
    assert [r["status"] for r in ember.last_reports()] == ["compiled"]
    (source,) = tmp_path.rglob("kernels.py")
    assert "triton.Config({'XBLOCK': 4096}, num_warps=8)" in source.read_text()
    torch._dynamo.reset()       # and through torch.compile itself (the C++ target here)
    torch.testing.assert_close(torch.compile(f, backend="ember", mode="max-autotune")(x), f(x))
    with pytest.raises(Exception, match="mode must be one of"):
        torch._dynamo.reset()
        torch.compile(f, backend="ember", mode="fastest")(x)


# ---------------------------------------------------------------- graph preparation

def test_prepare_splits_host_outputs():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w):
        y = torch.relu(x @ w)
        return y, x, None, x.t(), y, 3
    gm = make_fx(f)(torch.randn(4, 8), torch.randn(8, 3))
    prep = fx_prep.prepare(gm)
    assert [k for k, _ in prep.plan] == ["compiled", "host", "const", "host", "compiled", "const"]
    assert prep.plan[0] == prep.plan[4]           # a repeated output is computed once
    outs = [n for n in prep.gm.graph.nodes if n.op == "output"][0].args[0]
    assert len(outs) == 1


def test_none_and_input_outputs_end_to_end():
    def f(x, w):
        y = torch.relu(x @ w)
        return y, x, x.t(), y * 2, y
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    out = compile_(f)(x, w)
    ref = f(x, w)
    for o, r in zip(out, ref):
        torch.testing.assert_close(o, r)
    assert out[1].data_ptr() == x.data_ptr()       # inputs come back as themselves


# ---------------------------------------------------------------- export to a Program

LOWERED = """
module attributes {ember.target = "cpu", ember.prelude = "// prelude"} {
  func.func @main(%arg0: tensor<8x16xf32>, %arg1: tensor<16x32xf32>, %arg2: tensor<32xf32>)
      -> (tensor<256xf32>, tensor<8x32xf32>)
      attributes {ember.arena_bytes = 1024 : i64, ember.unplanned_bytes = 2048 : i64} {
    %s = arith.constant 1.0 : f32
    %c = arith.constant dense<[1.0, 2.5]> : tensor<2xbf16>
    %i = arith.constant dense<3> : tensor<2x2xi64>
    %e = tensor.empty() : tensor<4xi1>
    %0 = "ember.extern"(%arg0, %arg1) {callee = "aten.mm", ember.offsets = array<i64: 0>,
        params = {transpose_b = false, stride = [1, 2], pad = array<i64: 0, 1>, g = 1 : i64}}
        : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
    %1 = call @k0(%0, %arg2) {ember.offsets = array<i64: -1>}
        : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
    %2 = tensor.collapse_shape %1 [[0, 1]] : tensor<8x32xf32> into tensor<256xf32>
    return %2, %1 : tensor<256xf32>, tensor<8x32xf32>
  }
  func.func private @k0(%a: tensor<8x32xf32>, %b: tensor<32xf32>) -> tensor<8x32xf32>
      attributes {ember.kernel = "pointwise", ember.ops = ["add", "gelu"],
                  ember.symbol = "ember_k0", ember.source = "void ember_k0() {}"} {
    return %a : tensor<8x32xf32>
  }
}
"""


def test_export_program_from_lowered_module():
    from torch_mlir import ir
    from ember.frontend.importer import new_context
    from ember.frontend.export_program import export_program
    with new_context() as ctx, ir.Location.unknown(ctx):
        p = export_program(ir.Module.parse(LOWERED))
    assert p.target == "cpu" and p.lang == "cpp" and p.num_inputs == 3
    assert p.source == "// prelude\nvoid ember_k0() {}"
    assert p.arena_bytes == 1024 and p.kernel_names == ["ember_k0"]
    kinds = [(s.kind, s.name) for s in p.steps]
    assert kinds == [("const", "constant"), ("const", "constant"), ("empty", "empty"),
                     ("extern", "aten.mm"), ("kernel", "ember_k0"), ("view", "collapse_shape")]
    const_bf16, const_i64, empty, ext, kern, view = p.steps
    assert const_bf16.params["value"] == [1.0, 2.5] and p.values[3].dtype == "bfloat16"
    # a splat is its one value, which the runtime fills the tensor with
    assert const_i64.params["value"] == 3 and p.values[4].dtype == "int64"
    assert p.values[4].shape == (2, 2)
    assert p.values[5].dtype == "bool"
    assert ext.inputs == (0, 1) and ext.params == {"transpose_b": False, "stride": [1, 2],
                                                   "pad": [0, 1], "g": 1}
    assert p.values[ext.outputs[0]].offset == 0
    assert kern.inputs == (ext.outputs[0], 2) and p.values[kern.outputs[0]].offset is None
    assert view.inputs == kern.outputs and p.values[view.outputs[0]].shape == (256,)
    assert p.outputs == [view.outputs[0], kern.outputs[0]]


# ---------------------------------------------------------------- dynamic shapes

def test_dynamic_shapes_compile_once():
    """One symbolic compile for every size (more in test_dynamic.py)."""
    def f(x, b):
        return torch.tanh(x * 2 + b).sum(-1)
    cf = compile_(f, dynamic=True)
    for n in (3, 5, 9, 5):
        x, b = torch.randn(n, 16), torch.randn(16)
        torch.testing.assert_close(cf(x, b), f(x, b))
    reports = ember.last_reports()
    assert len(reports) == 1 and reports[0]["symbolic"]
    assert all(isinstance(d, str) for s in reports[0]["input_shapes"] for d in s)


def test_dynamic_training():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    cm = compile_(m, dynamic=True)
    for n in (2, 6):
        x = torch.randn(n, 8)
        m.zero_grad()
        cm(x).pow(2).sum().backward()
        got = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        m(x).pow(2).sum().backward()
        for g, r in zip(got, (p.grad for p in m.parameters())):
            assert rel_err(g, r) < 1e-4


# ---------------------------------------------------------------- eager fallback

def test_eager_fallback_for_unsupported_op():
    def f(x):
        y = torch.exp(x) + 1
        return unlowered(y) * 3 + y
    x = torch.rand(8, 8)
    cf = compile_(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = cf(x)
    torch.testing.assert_close(out, f(x))
    ours = [w for w in caught if "ember" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "unlowered" in str(ours[0].message)
    fell = [r for r in ember.last_reports() if r["eager_fallback_ops"]]
    assert fell and UNLOWERED in fell[0]["eager_fallback_ops"]
    assert fell[0]["status"] == "partitioned"


def test_fallback_off_raises():
    cf = compile_(lambda x: unlowered(x) + 1,
                  options={"target": "cpu", "fallback": False})
    with pytest.raises(Exception, match="ember"):
        cf(torch.rand(4) + 1)


# ---------------------------------------------------------------- debug dump

def test_debug_dir_contents(tmp_path):
    def f(x, w):
        return torch.softmax(torch.relu(x @ w) + 1, -1)
    cf = compile_(f, options={"target": "cpu", "debug_dir": str(tmp_path)})
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    torch.testing.assert_close(cf(x, w), f(x, w))
    dirs = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert len(dirs) == 1
    names = sorted(p.name for p in dirs[0].iterdir())
    for want in ("fx_graph.txt", "00-import.mlir", "02-ember-library-views.mlir",
                 "03-ember-fuse.mlir", "kernels.cpp", "report.json"):
        assert want in names, names
    assert not [n for n in names if n.endswith(".tmp")]
    report = json.loads((dirs[0] / "report.json").read_text())
    for key in ("graph_id", "target", "num_kernels", "num_externs", "fused_groups",
                "eager_fallback_ops", "planned_peak_bytes", "unplanned_peak_bytes",
                "compile_seconds"):
        assert key in report
    assert report["graph_id"] == dirs[0].name and report["target"] == "cpu"
    assert report["num_kernels"] >= 1 and report["num_externs"] == 1
    assert report == ember.last_reports()[-1]
    # Each decision explained: the matmul's result goes to the kernel that does the rest (a
    # library call: not fused); the plan places that result in the arena, which is what the
    # runtime allocates (rounded up to its own alignment).
    (pair,) = report["unfused"]
    line = f"{__file__}:{f.__code__.co_firstlineno + 1}:0"       # the user's line: `return ...`
    assert pair == {"producer": "aten.mm", "consumer": "where", "reason": "library call",
                    "detail": "'aten.mm' runs apart", "producer_at": line, "consumer_at": line}
    assert report["unfused_reasons"] == {"library call": 1}
    plan = report["memory_plan"]
    assert plan["arena_bytes"] == report["planned_peak_bytes"] == 64
    mm = plan["buffers"][0]
    assert (mm["bytes"], mm["offset"], mm["escapes"]) == (4 * 3 * 4, 0, False)
    assert plan["buffers"][-1]["escapes"] and plan["buffers"][-1]["offset"] == -1
    assert report["runtime_arena_bytes"] >= 4 * 3 * 4


# ---------------------------------------------------------------- training

def test_training_mlp_gradients_match_eager():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.LayerNorm(32),
                      nn.GELU(), nn.Linear(32, 10))
    x, y = torch.randn(8, 16), torch.randint(0, 10, (8,))
    ref_loss = nn.functional.cross_entropy(m(x), y)
    ref_loss.backward()
    ref = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    cm = compile_(m)
    loss = nn.functional.cross_entropy(cm(x), y)
    loss.backward()
    assert rel_err(loss, ref_loss) < 1e-4
    for p, r in zip(m.parameters(), ref):
        assert rel_err(p.grad, r) < 1e-4
    kinds = {r["graph_id"].rsplit("-", 1)[-1] for r in ember.last_reports()}
    assert {"forward", "backward"} <= kinds


def test_training_cnn_batchnorm_matches_eager():
    import copy
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8),
                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    ref_m = copy.deepcopy(m)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    cm = compile_(m)
    loss = nn.functional.cross_entropy(cm(x), y)
    loss.backward()
    ref_loss = nn.functional.cross_entropy(ref_m(x), y)
    ref_loss.backward()
    assert rel_err(loss, ref_loss) < 1e-4
    for p, r in zip(m.parameters(), ref_m.parameters()):
        # A conv bias before batch norm has a zero gradient in exact arithmetic: absolute error.
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-3, atol=1e-5)
    torch.testing.assert_close(m[1].running_mean, ref_m[1].running_mean)
    torch.testing.assert_close(m[1].running_var, ref_m[1].running_var)
    m.eval()
    ref_m.eval()
    with torch.no_grad():
        torch.testing.assert_close(cm(x), ref_m(x), rtol=1e-4, atol=1e-5)


def test_mlp_compiles_without_fallback():
    """The end goal: forward and backward of an MLP run entirely through ember's kernels."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    cm = compile_(m)
    cm(torch.randn(4, 16)).sum().backward()
    reports = ember.last_reports()
    assert reports
    bad = [(r["graph_id"], r["status"], r.get("error")) for r in reports
           if r["status"] not in ("compiled", "host-only")]
    assert not bad, bad


def test_cuda_graph_heuristic_weighs_launches_against_output_copies():
    from ember.frontend.compile import graph_pays_off
    from ember.runtime.program import Program, Step, ValueInfo

    def program(n_steps, out_shape):
        vals = [ValueInfo((8,), "float32"), ValueInfo(out_shape, "float32")]
        return Program("triton", "python", "", vals, 1,
                       [Step("kernel", "k", (0,), (1,))] * n_steps, [1])

    # One pointwise kernel writing 1 GiB: a replay would add a full copy of its output.
    assert not graph_pays_off(program(1, (1 << 28,)))
    # A transformer-sized graph: 150 launches, a 6 MiB output.
    assert graph_pays_off(program(150, (16, 128, 768)))
    # A backward graph copies its inputs (saved activations) in as well.
    big_in = program(150, (16, 128, 768))
    big_in.values[0] = ValueInfo((1 << 31,), "float32")
    assert graph_pays_off(big_in, "forward") and not graph_pays_off(big_in, "backward")
    # Not where the copies would take more than a quarter of the device's memory.
    assert not graph_pays_off(program(150, (16, 128, 768)), device_bytes=4 << 20)


def test_cuda_graph_may_capture_only_unread_host_inputs():
    from ember.frontend.compile import _unread_host_inputs
    from ember.runtime.program import Program, Step, ValueInfo

    def program(dropout_p):
        vals = [ValueInfo((4, 8), "float32"), ValueInfo((), "int64"), ValueInfo((4, 8), "float32")]
        attn = Step("library", "aten._scaled_dot_product_efficient_attention_backward.default",
                    (0, 1), (2,), {"tensor_args": ["grad_out_", "philox_seed"],
                                   "kwargs": {"dropout_p": dropout_p}})
        return Program("triton", "python", "", vals, 2, [attn], [2])
    assert _unread_host_inputs(program(0.0)) == {1}
    assert _unread_host_inputs(program(0.1)) == set()


# ---------------------------------------------------------------- library calls in the program

def test_library_op_is_a_call_inside_one_program():
    # cumsum is an ATen library kernel: the graph stays one compiled program (no split, no
    # eager fallback), the call sits between the two kernels.
    def f(x, w):
        return torch.cumsum(x * 2.0, 1) + w
    x, w = torch.randn(6, 33), torch.randn(33)
    out = compile_(f)(x, w)
    assert rel_err(out, f(x, w)) < 1e-5
    (r,) = ember.last_reports()
    assert r["status"] == "compiled" and r["eager_fallback_ops"] == []
    assert r["library_calls"] == ["aten.cumsum.default"]
    assert r["num_kernels"] == 2 and r["num_externs"] == 1


def test_training_library_calls_stay_in_program():
    # Backward of conv + adaptive max-pool: convolution_backward and adaptive_max_pool2d
    # return tuples; the used outputs become results of calls inside the one program.
    # (2-d max pooling with indices is generated code: frontend/pool_decomp.py)
    import copy
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d(8),
                      nn.Flatten(),
                      nn.Linear(8 * 8 * 8, 10))
    ref_m = copy.deepcopy(m)
    x = torch.randn(4, 3, 16, 16)
    cm = compile_(m)
    cm(x).square().sum().backward()
    ref_m(x).square().sum().backward()
    for p, r in zip(m.parameters(), ref_m.parameters()):
        assert rel_err(p.grad, r.grad) < 1e-4
    reports = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}
    assert reports["forward"]["status"] == "compiled"
    assert reports["forward"]["library_calls"] == ["aten.adaptive_max_pool2d.default"]
    back = reports["backward"]
    assert back["status"] == "compiled" and back["eager_fallback_ops"] == []
    assert sorted(back["library_calls"]) == ["aten.adaptive_max_pool2d_backward.default",
                                             "aten.convolution_backward.default"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash/efficient attention needs CUDA")
def test_cuda_attention_is_a_call_inside_one_program():
    import torch.nn.functional as F

    def f(q, k, v):
        return F.scaled_dot_product_attention(q * 1.5, k, v, is_causal=True).transpose(1, 2) + 1.0
    q, k, v = torch.randn(3, 2, 4, 64, 32, device="cuda").unbind(0)
    out = compile_(f, options={"target": "cuda"})(q, k, v)
    assert rel_err(out, f(q, k, v)) < 1e-3
    reports = ember.last_reports()
    summary = [(r["graph_id"], r["status"], r.get("library_calls"), r.get("library_splits"),
                r.get("error")) for r in reports]
    assert all(r["status"] == "compiled" and not r["eager_fallback_ops"] for r in reports), summary
    assert any("scaled_dot_product" in op for r in reports for op in r.get("library_calls", []))


def test_library_call_feeding_another():
    # The second scan reads the first one's result directly (as conv backward feeds max-pool
    # backward): the call must take the first call's value, not the placeholder it replaced.
    def f(x):
        return torch.cumsum(torch.cumsum(x * 2.0, 1), 0) - 1.0
    x = torch.randn(5, 7)
    out = compile_(f)(x)
    assert rel_err(out, f(x)) < 1e-5
    (r,) = ember.last_reports()
    assert r["status"] == "compiled" and r["library_calls"] == ["aten.cumsum.default"] * 2


def test_attention_library_call_forward_and_backward():
    # SDPA with a float mask traces to torch's fused CPU attention kernel (not a decomposed
    # softmax(QK^T)V): a library call in the forward program and its backward in the backward
    # program; gradients match eager.
    import torch.nn.functional as F
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
    mask = torch.randn(16, 16)

    def f(q, k, v):
        return (F.scaled_dot_product_attention(q * 2.0, k, v, attn_mask=mask) + 1.0).square()
    out = compile_(f)(q, k, v)
    ref = f(q, k, v)
    assert rel_err(out, ref) < 1e-5
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for g, r in zip(grads, ref_grads):
        assert rel_err(g, r) < 1e-4
    reports = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}
    assert {r["status"] for r in reports.values()} == {"compiled"}
    assert reports["forward"]["library_calls"] == [
        "aten._scaled_dot_product_flash_attention_for_cpu.default"]
    assert reports["backward"]["library_calls"] == [
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"]


def test_library_op_with_unread_outputs_stays_in_program():
    # Attention's log-sum-exp (and, on CUDA, its RNG state) come back as getitems nobody reads;
    # they must not stop the call from going inside the program.
    from torch.fx.experimental.proxy_tensor import make_fx
    from ember.frontend.compile import EmberGraph

    def f(q, k, v):
        out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q * 1.5, k, v, 0.0,
                                                                         True)
        return out[0].transpose(1, 2) + 1.0
    q, k, v = torch.randn(3, 2, 4, 16, 8).unbind(0)
    gm = make_fx(f, tracing_mode="fake")(q, k, v)
    getitems = [n for n in gm.graph.nodes if n.target is __import__("operator").getitem]
    assert any(not n.users for n in getitems)     # the case under test is really there
    graph = EmberGraph(gm, CompileOptions.from_user(CPU), kind="inference")
    out = graph(q, k, v)
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert rel_err(out, f(q, k, v)) < 1e-5
    assert graph.report["status"] == "compiled"
    assert graph.report["library_calls"] == [
        "aten._scaled_dot_product_flash_attention_for_cpu.default"]


def test_library_call_with_none_argument():
    # convolution_backward's bias_sizes=None is a positional argument with no default (as is
    # CUDA attention's attn_bias): the call must pass it explicitly.
    from torch.fx.experimental.proxy_tensor import make_fx
    from ember.frontend.compile import EmberGraph

    def f(g, x, w):
        gi, gw, _ = torch.ops.aten.convolution_backward.default(
            g * 2.0, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False])
        return gi + 1.0, gw
    g, x, w = torch.randn(2, 4, 6, 6), torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    gm = make_fx(f, tracing_mode="fake")(g, x, w)
    graph = EmberGraph(gm, CompileOptions.from_user(CPU), kind="inference")
    outs = graph(g, x, w)
    for o, r in zip(outs, f(g, x, w)):
        assert rel_err(o, r) < 1e-5
    assert graph.report["status"] == "compiled", graph.report.get("error")
    assert graph.report["library_calls"] == ["aten.convolution_backward.default"]


def test_view_outputs_fold_into_one_as_strided():
    """A chain of view ops over a computed output is replayed as one `as_strided` with eager's
    geometry (a training forward returns hundreds of such views); a base that comes back in
    another layout replays the views themselves."""
    from ember.frontend.output_layouts import _alias, fold_views, replay
    aten = torch.ops.aten
    base = torch.empty(4, 6)
    steps = ((aten.t.default, (), {}), (aten.slice.Tensor, (0, 1, None), {}),
             (aten.slice.Tensor, (1, 0, None, 2), {}), (aten.unsqueeze.default, (0,), {}))
    out = replay(base, steps)
    folded = fold_views(base, steps, out)
    assert len(folded) == 1 and folded[0][0] is _alias
    t = torch.randn(4, 6)
    got, ref = _alias(t, *folded[0][1]), replay(t, steps)
    assert got.stride() == ref.stride() and got.shape == ref.shape
    assert got.data_ptr() == ref.data_ptr() and torch.equal(got, ref)
    # dtype-changing views and conj bits are not geometry: replayed as they are
    z = torch.empty(3, dtype=torch.complex64)
    real = ((aten.view_as_real.default, (), {}),)
    assert fold_views(z, real, torch.view_as_real(z)) == real
    conj = ((aten.conj.default, (), {}),)
    assert fold_views(z, conj, z.conj()) == conj
    odd = torch.randn(6, 4).t()         # not contiguous: the views are replayed
    assert torch.equal(_alias(odd, *folded[0][1]), replay(odd, steps))
    # compiled end to end: the outputs are views of one another with eager's strides
    f = lambda x: (lambda y: (y, y.t()[1:], y.unsqueeze(0)[:, 1]))(x * 2)
    ours = torch.compile(f, backend="ember", options={"target": "cpu"})(torch.ones(3, 4))
    report = ember.last_reports()[-1]
    assert report["status"] == "compiled" and not report["eager_fallback_ops"], report
    theirs = f(torch.ones(3, 4))
    assert [o.stride() for o in ours] == [o.stride() for o in theirs]
    ours[0].add_(1)
    assert ours[1][0, 0].item() == 3.0 and ours[2][0, 0].item() == 3.0
