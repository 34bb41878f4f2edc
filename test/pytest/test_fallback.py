"""Eager fallback: an op ember cannot compile runs in torch inside the compiled program, a graph
ember cannot compile at all runs as eager runs it, nothing ember does breaks the user's
program, and nothing reaches stderr (frontend/compile.py, frontend/partition.py)."""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import (UNLOWERED, UNLOWERED_GRAD, assert_close, clear_reports, rel_err, unlowered,
                      unlowered_grad)


@pytest.fixture(autouse=True)
def _fresh_verdicts():
    # Probe verdicts are cached per process; a test that makes a pass fail must not leave
    # "aten.mm cannot compile" behind for the next one.
    from ember.frontend import partition
    partition._VERDICTS.clear()
    clear_reports()
    yield
    partition._VERDICTS.clear()


def compile_(fn, target="cpu", **options):
    torch._dynamo.reset()
    clear_reports()
    return torch.compile(fn, backend="ember", options={"target": target, **options})


def run_recording(fn, *args):
    """fn(*args) and ember's fallback warnings (not, say, the cache's about a stale artifact)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in caught
                 if str(w.message).startswith("ember") and "eager torch" in str(w.message)]


class Sandwich(torch.nn.Module):
    """Matmul + GELU, then an op ember has no lowering for, then matmul + bias + tanh."""

    def __init__(self, d):
        super().__init__()
        self.a = torch.nn.Linear(d, d)
        self.b = torch.nn.Linear(d, d)

    def forward(self, x):
        h = F.gelu(self.a(x)) * 0.5 + x
        h = unlowered(h)
        return torch.tanh(self.b(h) + h)


# ---------------------------------------------------------------- partial fallback

def test_unsupported_op_in_the_middle(target, device, interpreted):
    torch.manual_seed(0)
    d = 16 if interpreted else 64
    m = Sandwich(d).eval().to(device)
    x = torch.randn(8, d, device=device)
    with torch.no_grad():
        ref = m(x)
        cm = compile_(m, target)
        out, warned = run_recording(cm, x)
        assert_close(out, ref, matmul=True)
        assert len(warned) == 1 and "unlowered" in warned[0], warned
        out2, warned2 = run_recording(cm, x * 2)         # later calls: no further warning
        assert_close(out2, m(x * 2), matmul=True)
        assert warned2 == []
    reports = ember.last_reports()
    assert len(reports) == 1, [r["graph_id"] for r in reports]       # one program, no pieces
    r = reports[0]
    assert r["status"] == "partitioned"
    assert r["eager_fallback_ops"] == [UNLOWERED]
    assert list(r["fallback_reasons"]) == [UNLOWERED]
    assert "unlowered" in r["fallback_reasons"][UNLOWERED]
    # both sides compiled (a product is an extern, or with its epilogue a matmul kernel)
    products = r["num_externs"] + sum(1 for g in r["fused_groups"] if g and g[0] == "mm")
    assert r["num_kernels"] >= 2 and products >= 2
    # The same op in another graph: still the one warning of this process.
    torch._dynamo.reset()
    with torch.no_grad():
        out3, warned3 = run_recording(torch.compile(lambda t: unlowered(t) * t,
                                                    backend="ember", options={"target": target}), x)
    assert_close(out3, unlowered(x) * x)
    assert warned3 == []


@pytest.mark.targets("cpu")
def test_unsupported_op_in_training_graph(target):
    # The op's derivative has no lowering either: forward and backward graphs each keep their
    # compiled pieces, gradients match eager.
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)

    def f(x):
        h = torch.relu(lin(x)) + 1.5
        return (unlowered(h) * h).sum(-1)
    x = torch.randn(8, 16, requires_grad=True)
    ref = f(x)
    ref.sum().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in lin.parameters()]
    x.grad = None
    lin.zero_grad()
    cf = compile_(f, target)
    out, warned = run_recording(lambda t: cf(t).sum().backward() or cf(t), x)
    assert_close(out, ref, matmul=True)
    for g, w in zip([x.grad] + [p.grad for p in lin.parameters()], want):
        assert rel_err(g, w) < 1e-3
    reports = ember.last_reports()
    statuses = {r["graph_id"].rsplit("-", 1)[-1]: r for r in reports}
    assert statuses["forward"]["status"] == "partitioned", statuses["forward"]
    assert statuses["forward"]["eager_fallback_ops"] == [UNLOWERED]
    assert statuses["backward"]["status"] in ("partitioned", "compiled")
    assert statuses["backward"]["num_externs"] >= 1          # the weight-gradient matmul
    assert {w.split()[1] for w in warned} == {UNLOWERED, UNLOWERED_GRAD}
    assert len(warned) == 2, warned     # one per op kind, though each graph runs twice


def test_every_op_falls_back_runs_dynamos_graph(monkeypatch):
    # No op compiles: the graph runs as eager runs it. After the first call the backend calls
    # Dynamo's graph directly (no AOTAutograd wrapper, no decomposed ops), so ember's graph
    # object is never called again.
    def f(x):
        return unlowered_grad(unlowered(x), x)
    x = torch.randn(4, 32)
    cf = compile_(f)
    out, warned = run_recording(cf, x)
    torch.testing.assert_close(out, f(x), rtol=0, atol=0)
    r = ember.last_reports()[-1]
    assert r["status"] == "eager"
    assert set(r["eager_fallback_ops"]) >= {UNLOWERED, UNLOWERED_GRAD}
    assert set(r["fallback_reasons"]) == set(r["eager_fallback_ops"])
    assert len(warned) == 2 and all(w.split()[1] in r["eager_fallback_ops"] for w in warned)

    from ember.frontend.compile import EmberGraph

    def boom(self, *args):
        raise AssertionError("an all-eager graph must not go through EmberGraph again")
    monkeypatch.setattr(EmberGraph, "__call__", boom)
    out2, warned2 = run_recording(cf, x + 1)
    torch.testing.assert_close(out2, f(x + 1), rtol=0, atol=0)
    assert warned2 == []


def _returned_callables(monkeypatch):
    """[(Dynamo's graph module, what backend="eager" would return for it, what ember's
    backend returned, or the exception it raised)] as compiles happen."""
    from torch._dynamo.backends.debugging import eager as eager_backend
    from ember.frontend import backend
    seen, real = [], backend.ember_backend

    def spy(gm, example_inputs, **kwargs):
        try:
            fn = real(gm, example_inputs, **kwargs)
        except Exception as err:
            seen.append((gm, eager_backend(gm, example_inputs), err))
            raise
        seen.append((gm, eager_backend(gm, example_inputs), fn))
        return fn
    monkeypatch.setattr(backend, "ember_backend", spy)
    return seen


def _compile_spied(fn):
    torch._dynamo.reset()
    clear_reports()
    from ember.frontend import backend
    return torch.compile(fn, backend=lambda gm, ex: backend.ember_backend(gm, ex,
                                                                         options={"target": "cpu"}))


def _check_whole_graph_eager(out, warned, train, eager, x):
    """A graph known to run in eager torch: reported with its one op and its Dynamo graph,
    warned once, and (training) eager's gradient exactly."""
    r = ember.last_reports()[-1]
    assert r["status"] == "eager" and r["eager_fallback_ops"] == [UNLOWERED], r
    assert r["dynamo_graph"] and r["graph_id"].endswith("inference" if not train else "forward")
    assert len(warned) == 1 and UNLOWERED in warned[0]
    if train:
        out.sum().backward()
        got = x.grad.clone()
        x.grad = None
        eager().sum().backward()
        torch.testing.assert_close(got, x.grad, rtol=0, atol=0)


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_known_all_eager_frame_is_skipped(train, monkeypatch):
    # Every op of the frame is one torch-mlir cannot import, known before any call, and the
    # graph is the whole frame with no guard on a Python value: the backend reports and warns
    # as for any all-eager graph, then asks Dynamo to skip the frame (SkipFrame). Later calls
    # run the frame as eager runs it, with no guard or graph call (fallback_bench
    # all_eager_small): a new shape compiles nothing.
    from torch._dynamo.exc import SkipFrame
    seen = _returned_callables(monkeypatch)

    def g(x):
        return unlowered(unlowered(unlowered(x)))
    x = torch.randn(4, 32, requires_grad=train)
    cf = _compile_spied(g)
    out, warned = run_recording(cf, x)
    torch.testing.assert_close(out, g(x), rtol=0, atol=0)
    (gm, eager_fn, raised), = seen
    assert isinstance(raised, SkipFrame), raised
    _check_whole_graph_eager(out, warned, train, lambda: g(x), x)
    y = torch.randn(6, 8, requires_grad=train)     # another shape: no compile, no warning
    out2, warned2 = run_recording(cf, y)
    torch.testing.assert_close(out2, g(y), rtol=0, atol=0)
    assert len(seen) == 1 and warned2 == []


class _Applies(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x):
        return self.op(x)


def _applier(op):
    def apply(x):
        return op(x)
    return apply


@pytest.mark.parametrize("make", [_Applies, _applier], ids=["module", "closure"])
def test_shared_code_is_not_skipped(make, monkeypatch):
    # Every instance of a module class and every closure of one `def` share a code object,
    # which is what Dynamo skips: one whose graph falls back whole must not take the others
    # with it. The first runs as backend="eager" returns it; the second compiles.
    seen = _returned_callables(monkeypatch)
    x = torch.randn(4, 32)
    from ember.frontend import backend
    run = lambda m: torch.compile(m, backend=lambda gm, ex: backend.ember_backend(   # noqa: E731
        gm, ex, options={"target": "cpu"}))
    torch._dynamo.reset()
    clear_reports()
    out, warned = run_recording(run(make(unlowered)), x)
    torch.testing.assert_close(out, unlowered(x), rtol=0, atol=0)
    out2, _ = run_recording(run(make(torch.cos)), x)
    torch.testing.assert_close(out2, torch.cos(x))
    assert len(seen) == 2 and not isinstance(seen[0][2], Exception), seen
    assert ember.last_reports()[-1]["status"] == "compiled"


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_known_all_eager_graph_is_dynamos_forward(train, monkeypatch):
    # The same ops, but a Python value guards the frame (a flag that picks the ops): the frame
    # is not skipped, since the other value traces a graph ember compiles. The backend returns
    # exactly what backend="eager" returns (Dynamo's graph module's forward): no ember frame,
    # no AOTAutograd wrapper, the same per-call cost.
    seen = _returned_callables(monkeypatch)

    def f(x):
        return unlowered(unlowered(x) * 2)     # a view-free product between: an ATen op

    def h(x, eager_only):
        return unlowered(unlowered(unlowered(x))) if eager_only else torch.cos(x) * 2
    x = torch.randn(4, 32, requires_grad=train)
    cf = _compile_spied(h)
    out, warned = run_recording(cf, x, True)
    torch.testing.assert_close(out, h(x, True), rtol=0, atol=0)
    (gm, eager_fn, fn), = seen
    assert fn == eager_fn and fn.__self__ is gm, fn     # gm.forward, bound to Dynamo's graph
    _check_whole_graph_eager(out, warned, train, lambda: h(x, True), x)
    out2, _ = run_recording(cf, x, False)     # the flag's other value: compiled by ember
    torch.testing.assert_close(out2, h(x, False))
    assert len(seen) == 2 and ember.last_reports()[-1]["status"] == "compiled"
    # a compute op ember compiles beside the unlowered ones: not known, ember's own callable
    seen.clear()
    out, _ = run_recording(_compile_spied(f), x)
    torch.testing.assert_close(out, f(x), rtol=0, atol=0)
    assert getattr(seen[0][2], "__self__", None) is not seen[0][0]


def test_first_call_all_eager_calls_dynamos_generated_forward(monkeypatch):
    # A graph found at its first call to run wholly eagerly (here: the import fails) sends
    # later calls to Dynamo's generated forward itself, not to a lazy graph module's
    # `_lazy_forward` (nn.Module's __call__ and GraphModule's wrapper on every call).
    from ember.frontend import compile_module as comp
    seen = _returned_callables(monkeypatch)
    monkeypatch.setattr(comp, "import_graph", _fail)
    f = lambda x: torch.cos(x) * 3 + 1            # noqa: E731
    x = torch.randn(5)
    cf = _compile_spied(f)
    out, warned = run_recording(cf, x)
    assert_close(out, f(x))
    (gm, _, run), = seen
    call = run.ember_state["fn"]
    assert call.__self__ is gm and call.__name__ == "forward", call
    assert call.__func__ is type(gm).forward
    assert ember.last_reports()[-1]["status"] == "eager"


# ---------------------------------------------------------------- compile failures anywhere

def _fail(*args, **kwargs):
    raise RuntimeError("injected failure")


def _stage_patches():
    from ember.frontend import compile_module as comp, fx_prep
    from ember.passes.ember_buffer_reuse import EmberBufferReuse
    from ember.passes.ember_fuse import EmberFuse
    from ember.passes.ember_lower_to_cpp import EmberLowerToCpp
    from ember.runtime import cpp_build, executor
    from ember.frontend import export_program as exporter
    return {
        "prepare": (fx_prep, "prepare"),
        "import": (comp, "import_graph"),
        "ember-fuse": (EmberFuse, "run"),
        "ember-buffer-reuse": (EmberBufferReuse, "run"),
        "ember-lower-to-cpp": (EmberLowerToCpp, "run"),
        "export": (exporter, "export_program"),
        "build": (cpp_build, "build_shared_library"),
        "load": (executor, "load"),
    }


@pytest.mark.parametrize("stage", ["prepare", "import", "ember-fuse", "ember-buffer-reuse",
                                   "ember-lower-to-cpp", "export", "build", "load"])
def test_compile_failure_anywhere_runs_eagerly(stage, monkeypatch, capfd):
    def f(x, w):
        return torch.softmax(torch.relu(x @ w) * 2.0, -1)
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    owner, name = _stage_patches()[stage]
    monkeypatch.setattr(owner, name, _fail)
    out, warned = run_recording(compile_(f, cache_dir=None), x, w)
    assert_close(out, f(x, w), matmul=True)
    assert warned and all("ember" in m for m in warned)
    assert len(warned) == len(set(warned))
    r = ember.last_reports()[-1]
    assert r["status"] == "eager" and r["eager_fallback_ops"], r
    assert "injected failure" in r["error"] or any(
        "injected failure" in why for why in r["fallback_reasons"].values()), r
    assert capfd.readouterr().err == ""


def test_tracing_failure_runs_dynamos_graph(monkeypatch):
    from ember.frontend import backend
    monkeypatch.setattr(backend, "decomposition_table", _fail)
    f = lambda x: torch.cos(x) * 3            # noqa: E731
    x = torch.randn(5)
    out, warned = run_recording(compile_(f), x)
    assert_close(out, f(x))
    assert len(warned) == 1 and "injected failure" in warned[0]
    r = ember.last_reports()[-1]
    assert r["status"] == "eager" and "cos" in r["eager_fallback_ops"]
    assert "injected failure" in r["fallback_reasons"]["cos"]


def test_fallback_off_still_raises(monkeypatch):
    from ember.frontend import compile_module as comp
    monkeypatch.setattr(comp, "import_graph", _fail)
    with pytest.raises(Exception, match="injected failure"):
        compile_(lambda x: x.exp() + 1, fallback=False)(torch.randn(4))


# ---------------------------------------------------------------- a fused kernel that fails

def _refuse_kernels_with(monkeypatch, *ops):
    """Makes both lowerings refuse every kernel whose ops include all of `ops` (a fused group:
    each op alone still compiles, so no single node is to blame)."""
    from ember.dialects.contract import OPS
    from ember.passes import cpp_emitter, ember_lower_to_triton
    from ember.passes.kernel_schedule import Unschedulable
    refused = []

    def wrap(real):
        def schedule(fn):
            if set(ops) <= set(OPS.get(fn) or ()):
                refused.append(list(OPS.get(fn)))
                raise Unschedulable("injected: this group cannot be coded")
            return real(fn)
        return schedule
    for mod in (cpp_emitter, ember_lower_to_triton):
        monkeypatch.setattr(mod, "schedule_kernel", wrap(mod.schedule_kernel))
    return refused


def test_failing_fused_kernel_runs_its_ops_eagerly(target, device, monkeypatch, tmp_path):
    """A lowering failure on fused groups (exp * 2, twice) that no op alone explains: their
    ops become ATen calls inside the program (the second group is found in a second round:
    the lowering stops at the first), the rest (three matmuls, tanh + add) stays one
    compiled program; one warning; the report names the ops, the nodes and the reason, and
    its `error` keeps the diagnostic's message (location shortened to file:line)."""
    torch.manual_seed(0)

    def f(x, w1, w2):
        h = (x @ w1).exp() * 2.0
        h = (h @ w2).exp() * 2.0
        return torch.tanh(h @ w1) + 1.0
    x, w1, w2 = (torch.randn(8, 8, device=device) * 0.3 for _ in range(3))
    refused = _refuse_kernels_with(monkeypatch, "exp", "mul")
    out, warned = run_recording(compile_(f, target, debug_dir=str(tmp_path)), x, w1, w2)
    assert_close(out, f(x, w1, w2), matmul=True)
    assert refused, "the injected failure never fired"
    r = ember.last_reports()[-1]
    assert r["status"] == "partitioned", r
    assert r["eager_fallback_ops"] == ["aten.exp.default", "aten.mul.Tensor"], r
    assert len(r["fallback_nodes"]) == 4, r
    assert all("injected: this group cannot be coded" in why
               for why in r["fallback_reasons"].values()), r
    assert r["num_kernels"] >= 1 and r["num_externs"] >= 3, r    # tanh + add, three matmuls
    assert len(warned) == 1 and "aten.exp.default, aten.mul.Tensor" in warned[0], warned
    # the first diagnostic's message, not 500 characters of `loc(fused[callsite(...`
    assert "injected: this group cannot be coded" in r["error"], r["error"]
    assert "loc(" not in r["error"] and "test_fallback.py:" in r["error"], r["error"]
    dumped = "".join(p.read_text() for p in tmp_path.rglob("error.txt"))
    assert "loc(" in dumped      # the full location stays in the dump


# ---------------------------------------------------------------- diagnostics in reports

def test_compact_diagnostic():
    from ember.frontend.report import compact_diagnostic
    f = '"/x/torchvision/models/swin_transformer.py"'
    loc = (f'loc(fused[callsite({f}:85:0 at {f}:608:0), callsite({f}:453:0 at {f}:608:0), '
           f'callsite({f}:171:0 at callsite({f}:299:0 at callsite({f}:453:0 at {f}:608:0)))])')
    text = f"ember-lower-to-triton failed: {loc}: ember-lower-to-triton: no loop for it"
    assert compact_diagnostic(text) == ("ember-lower-to-triton failed: ember-lower-to-triton: "
                                        "no loop for it (at swin_transformer.py:85,453,171)")
    assert compact_diagnostic('loc("a/b.py":3:4): boom') == "boom (at b.py:3)"
    assert compact_diagnostic("loc(unknown): boom") == "boom"
    assert compact_diagnostic("no location here") == "no location here"
    many = ", ".join(f'"m.py":{i}:0' for i in range(1, 10))
    assert compact_diagnostic(f"loc(fused[{many}]): m") == "m (at m.py:1,2,3,4,5,6,...)"


# ---------------------------------------------------------------- errors at run time

def _program_fails_from_call(monkeypatch, n):
    """Makes every compiled program raise from its n-th call (counted over all programs)."""
    from ember.runtime.executor import CompiledProgram
    calls = {"n": 0}
    real = CompiledProgram.__call__

    def flaky(self, *inputs):
        calls["n"] += 1
        if calls["n"] >= n:
            raise RuntimeError("injected run-time failure")
        return real(self, *inputs)
    monkeypatch.setattr(CompiledProgram, "__call__", flaky)
    return calls


def test_run_time_error_on_a_later_call_falls_back(monkeypatch):
    f = lambda x: torch.sigmoid(x) * x + 1    # noqa: E731
    cf = compile_(f)
    x = torch.randn(64)
    calls = _program_fails_from_call(monkeypatch, 3)
    for i in range(5):
        out, warned = run_recording(cf, x + i)
        assert_close(out, f(x + i))
        assert len(warned) == (1 if i == 2 else 0), (i, warned)
    assert calls["n"] == 3          # after the failure, the graph no longer runs the program
    r = ember.last_reports()[-1]
    assert r["status"] == "eager" and "injected run-time failure" in r["error"]


def test_run_time_error_that_eager_raises_too_is_eagers(monkeypatch):
    # An index out of range: the compiled call fails, eager fails too, and the user sees
    # eager's IndexError; the graph stays compiled for the next, valid call.
    f = lambda i, w: F.embedding(i, w) * 2.0   # noqa: E731
    w = torch.randn(4, 3)
    cf = compile_(f)
    assert_close(cf(torch.tensor([1, 3]), w), f(torch.tensor([1, 3]), w))
    assert ember.last_reports()[-1]["status"] == "compiled"
    from ember.runtime.executor import CompiledProgram
    real = CompiledProgram.__call__

    def checked(self, *inputs):
        if any(not t.is_floating_point() and int(t.max()) >= 4 for t in inputs):
            raise RuntimeError("injected bounds check")
        return real(self, *inputs)
    monkeypatch.setattr(CompiledProgram, "__call__", checked)
    with pytest.raises(IndexError, match="index out of range"):
        cf(torch.tensor([6, 0]), w)
    out, warned = run_recording(cf, torch.tensor([2, 0]), w)
    assert_close(out, f(torch.tensor([2, 0]), w))
    assert warned == [] and ember.last_reports()[-1]["status"] == "compiled"


# ---------------------------------------------------------------- diagnostics

@pytest.mark.parametrize("name", ["unlowered", "argmax", "topk", "sort"])
def test_failed_compiles_print_nothing_to_stderr(name, tmp_path, capfd):
    fns = {"unlowered": lambda x: unlowered(x) + 1,
           "argmax": lambda x: x.argmax(),
           "topk": lambda x: torch.topk(x, 3),
           "sort": lambda x: torch.sort(x)}
    f = fns[name]
    x = torch.randn(8)
    out, warned = run_recording(compile_(f, debug_dir=str(tmp_path)), x)
    torch.testing.assert_close(out, f(x))
    assert capfd.readouterr().err == ""
    assert len(warned) <= 1 and all("\n" not in w for w in warned)
    if name == "unlowered":
        assert warned and UNLOWERED in warned[0] and "no lowering" in warned[0]
        dumped = "".join(p.read_text() for p in tmp_path.rglob("diagnostics.txt"))
        assert "failed to legalize" in dumped and "ember_test.unlowered" in dumped
        import json
        report = json.loads(next(tmp_path.rglob("report.json")).read_text())
        assert "no lowering" in report["fallback_reasons"][UNLOWERED]


def test_failed_import_writes_nothing_to_the_temp_dir(tmp_path, monkeypatch):
    """torch-mlir's own pipeline runner writes `<tempdir>/<module>.mlir` for every failed
    lowering; ember runs the pipelines itself and leaves nothing behind."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    f = lambda x: unlowered(x.sin()) + 1    # noqa: E731
    x = torch.randn(8)
    out, warned = run_recording(compile_(f), x)
    torch.testing.assert_close(out, f(x))
    assert warned and "no lowering" in warned[0]
    assert list(tmp_path.iterdir()) == []


def test_debug_dir_that_is_a_file_is_an_option_error(tmp_path):
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    for bad in (path, path / "sub"):
        with pytest.raises(ember.OptionsError, match="debug_dir.*not a directory"):
            ember.CompileOptions.from_user({"debug_dir": str(bad)})
    assert ember.CompileOptions.from_user({"debug_dir": str(tmp_path / "new" / "d")}).debug_dir


# ---------------------------------------------------------------- placement kwargs

def _relative_bias_graph():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, table):
        n = x.shape[0]
        pos = torch.arange(n, device=x.device)
        rel = (pos[None, :] - pos[:, None]).clamp(-3, 3) + 3
        bias = torch.index_select(table, 0, rel.reshape(-1)).reshape(n, n)
        return unlowered(x @ x.t() + bias)
    x, table = torch.randn(6, 4), torch.randn(7)
    return make_fx(f, tracing_mode="fake")(x, table), f, (x, table)


def _aranges(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and "arange" in str(n.target)]


def test_eager_paths_keep_placement_kwargs(monkeypatch):
    # The compiled graph drops factory ops' device= (torch-mlir cannot lower it); every graph
    # that torch runs must keep it: an arange made on the CPU for a CUDA graph breaks
    # index_select ("index is on cpu").
    from ember.frontend import compile as comp, fx_prep, partition
    gm, f, args = _relative_bias_graph()
    assert all("device" in n.kwargs for n in _aranges(gm))
    prep = fx_prep.prepare(gm)
    assert all("device" in n.kwargs for n in _aranges(prep.gm))
    assert not any("device" in n.kwargs for n in _aranges(fx_prep.strip_placement(prep.gm)))

    opts = ember.CompileOptions.from_user({"target": "cpu"})
    # Split path: the unsupported node cannot be a call, the graph is cut around it.
    monkeypatch.setattr(partition, "can_call", lambda node: False)
    graph = comp.EmberGraph(gm, opts, kind="inference")
    out, _ = run_recording(graph, *args)
    assert_close(out[0] if isinstance(out, list) else out, f(*args), matmul=True)
    assert graph.report["status"] == "partitioned" and graph.eager_modules
    for module in graph.eager_modules:
        nodes = [n for n in module.graph.nodes if n.op == "call_function"]
        assert any("unlowered" in str(n.target) for n in nodes)
    # Whole-graph path: the original graph, kwargs and all.
    monkeypatch.setattr(comp, "compile_static", _fail)
    partition._VERDICTS.clear()
    monkeypatch.setattr(partition, "probe", lambda *a, **k: None)
    graph = comp.EmberGraph(gm, opts, kind="inference")
    out, _ = run_recording(graph, *args)
    assert_close(out[0] if isinstance(out, list) else out, f(*args), matmul=True)
    assert graph.report["status"] == "eager"
    assert graph.eager_modules == [gm] and all("device" in n.kwargs for n in _aranges(gm))


def test_outlined_graph_drops_placement_in_its_one_copy(monkeypatch):
    """outline_library: with library nodes, the outlined copy is the importer's graph, its
    placement kwargs dropped as it is made (one copy of the graph, not a stripped copy copied
    again: 0.3 s a graph of densenet121's training step); the prepared graph keeps them."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from ember.frontend import compile_module, fx_prep

    def f(x):
        pos = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
        return torch.cumsum(x + pos, 0) * 2
    gm = make_fx(f, tracing_mode="fake")(torch.randn(5, 4))
    prep = fx_prep.prepare(gm)
    library = {n for n in prep.gm.graph.nodes if "cumsum" in str(n.target)}
    assert library and all("device" in n.kwargs for n in _aranges(prep.gm))
    copies = []
    real = torch.fx.Graph.node_copy
    monkeypatch.setattr(torch.fx.Graph, "node_copy",
                        lambda self, *a, **k: copies.append(1) or real(self, *a, **k))
    out, calls, _ = compile_module.outline_library(prep.gm, library)
    assert [c.op for c in calls] == ["aten.cumsum.default"]
    assert _aranges(out) and not any("device" in n.kwargs for n in _aranges(out))
    assert all("device" in n.kwargs for n in _aranges(prep.gm))
    assert len(copies) == len(prep.gm.graph.nodes), (len(copies), len(prep.gm.graph.nodes))
    assert fx_prep.strip_placement(out) is out      # the importer copies nothing more


class RelativePositionAttention(torch.nn.Module):
    """T5-style: an arange-based bucket index -> an embedding of per-head biases added to the
    attention scores."""

    def __init__(self, d=32, heads=4, buckets=8, max_distance=16):
        super().__init__()
        self.h, self.buckets, self.max_distance = heads, buckets, max_distance
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)
        self.rel = torch.nn.Embedding(buckets, heads)

    def bucket(self, n, device):
        pos = torch.arange(n, device=device)
        rel = pos[None, :] - pos[:, None]
        half = self.buckets // 2
        sign = (rel > 0).long() * half
        a = rel.abs()
        exact = half // 2
        big = exact + (torch.log(a.float().clamp(min=1) / exact)
                       / math.log(self.max_distance / exact) * (half - exact)).long()
        big = big.clamp(max=half - 1)
        return sign + torch.where(a < exact, a, big)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.h)
        bias = self.rel(self.bucket(n, x.device)).permute(2, 0, 1)
        att = torch.softmax(scores + bias, -1) @ v
        return self.out(att.transpose(1, 2).reshape(b, n, d))


@pytest.mark.targets("cpu")
def test_relative_position_bias_forward_backward(target):
    torch.manual_seed(0)
    m = RelativePositionAttention()
    x = torch.randn(2, 12, 32, requires_grad=True)
    ref = m(x)
    ref.square().sum().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    x.grad = None
    m.zero_grad()
    out, _ = run_recording(compile_(m, target), x)
    out.square().sum().backward()
    assert_close(out, ref, matmul=True)
    for g, w in zip([x.grad] + [p.grad for p in m.parameters()], want):
        assert rel_err(g, w) < 1e-3
    assert all(r["status"] != "eager" for r in ember.last_reports())


def test_library_call_beside_a_placed_factory_stays_compiled():
    # rand_like is a library call; the ones(device=...) beside it makes the importer's copy of
    # the graph differ from the prepared one: the call must still be found and compiled in.
    torch.manual_seed(0)
    f = lambda x: torch.rand_like(x) * 0.5 + x * 2 + torch.ones(3, device=x.device)  # noqa: E731
    x = torch.randn(3)
    torch.manual_seed(1)
    ref = f(x)
    cf = compile_(f)
    torch.manual_seed(1)
    out, warned = run_recording(cf, x)
    assert_close(out, ref)
    r = ember.last_reports()[-1]
    assert r["status"] == "compiled" and r["eager_fallback_ops"] == [], r
    assert warned == []
