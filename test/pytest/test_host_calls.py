"""The per-call host fast paths (issue 12, training host overhead): frontend/host_calls.py's
closures give what fx_prep.assemble / compiled_inputs give (size, stride, storage offset,
storage), runtime/fast_views.reinterpret what as_strided gives, and the CUDA-graph runtime's
prebuilt replay plan hands out what its per-call loop did (on CPU tensors, the replay a no-op)."""
import pytest
import torch

import ember
from conftest import check_fallbacks
from ember.frontend import fx_prep, host_calls
from ember.runtime import cuda_graphs as cg
from ember.runtime.fast_views import reinterpret


def _same_view(a, b):
    assert a.shape == b.shape and a.stride() == b.stride(), (a.shape, a.stride(), b.stride())
    assert a.storage_offset() == b.storage_offset() and a.dtype == b.dtype
    assert a.data_ptr() == b.data_ptr()
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("size,stride,offset", [((4, 6), (6, 1), 0), ((6, 4), (1, 6), 0),
                                                ((3, 2), (12, 2), 5), ((2, 3, 4), (1, 8, 2), 1)])
def test_reinterpret_is_as_strided(size, stride, offset):
    base = torch.randn(64, requires_grad=True)
    t = base.detach()[3:]           # a storage offset of its own
    fast = reinterpret(t, size, stride, offset)
    _same_view(fast, t.as_strided(size, stride, t.storage_offset() + offset))
    assert not fast.requires_grad
    t.add_(1)                       # the same memory
    assert torch.equal(fast, t.as_strided(size, stride, t.storage_offset() + offset))


class _Block(torch.nn.Module):
    """Attention-like: q, k, v split from one projection (saved as views of it)."""

    def __init__(self):
        super().__init__()
        self.qkv, self.out = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 4, 3, 16).unbind(2)
        y = self.out(torch.softmax(q @ k.transpose(-1, -2), -1) @ v).relu()
        return y.transpose(0, 1), y.sum(-1).t()


def test_assembler_matches_assemble_on_a_training_step(monkeypatch):
    """A training forward whose saved activations are views (q, k, v of one projection) and
    whose user outputs are views too: every output has assemble's geometry and storage; saved
    views only ember reads skip the dispatcher (no `_base`), the user-visible ones do not; so
    may the backward's gradients."""
    made = []
    real = host_calls.assembler

    def spy(prep, private=(), gradients=False):
        fast = real(prep, private, gradients)
        fast_ok = frozenset(private or ()) if not gradients else frozenset(range(len(prep.plan)))

        def both(c, h):
            made.append((prep, fast_ok, fx_prep.assemble(prep, c, h)))
            out = fast(c, h)
            made[-1] += (out,)
            return out
        return both
    monkeypatch.setattr(host_calls, "assembler", spy)
    torch.manual_seed(0)
    model, ref = _Block(), _Block()
    ref.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="ember", options={"target": "cpu"})
    x = torch.randn(2, 4, 16)
    for _ in range(2):
        a, b = compiled(x)
        (a.square().sum() + b.sum()).backward()
    ra, rb = ref(x)
    (ra.square().sum() + rb.sum()).backward()
    torch.testing.assert_close(a, ra)
    torch.testing.assert_close(b, rb)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, 2 * q.grad, rtol=1e-5, atol=1e-5)
    assert made
    fast_views = slow_views = 0
    for prep, private, slow, fast in made:
        slow, fast = (s if isinstance(s, list) else [s] for s in (slow, fast))
        assert len(slow) == len(fast)
        for i, (s, f) in enumerate(zip(slow, fast)):
            if not isinstance(s, torch.Tensor):
                assert s == f
                continue
            _same_view(s, f)
            if prep.plan[i][0] == "view":
                if i in private and f._base is None:
                    fast_views += 1
                else:
                    assert (f._base is None) == (s._base is None), i
                    slow_views += 1
    assert fast_views > 0, "no saved view took the fast path"
    assert slow_views > 0, "no user-visible view"


def test_input_taker_matches_compiled_inputs():
    """A transposed input is taken in its physical order: the same view as `permute` gives,
    and inputs with other strides still go through `permute`."""
    def f(x, y):
        return (x * 2 + 1).sum(0), y + 1
    torch._dynamo.reset()
    made = []
    real = host_calls.input_taker

    def spy(prep):
        made.append(prep)
        return real(prep)
    host_calls.input_taker = spy
    try:
        cf = torch.compile(f, backend="ember", options={"target": "cpu"})
        x, y = torch.randn(12, 8).t(), torch.randn(5)
        torch.testing.assert_close(cf(x, y)[0], f(x, y)[0])
    finally:
        host_calls.input_taker = real
    perms = [p for p in made if p.in_perms]
    assert perms, "no permuted input"
    prep = perms[0]
    take = real(prep)
    for t in (x, torch.randn(12, 8).t(), torch.randn(8, 12)):
        args = [t if i in prep.in_perms else y for i in range(len(prep.in_perms) + 1)]
        if len(args) != sum(1 for n in prep.gm.graph.nodes if n.op == "placeholder") \
                - len(prep.folded):
            pytest.skip("graph inputs differ from the test's assumption")
        for a, b in zip(take(args), fx_prep.compiled_inputs(prep, args)):
            _same_view(a, b)


class _NoGraph:
    def replay(self):
        pass


def _graphed_state():
    """A GraphedProgram as after a capture (the replay a no-op), on CPU tensors, input 3 copied
    in per call: 8 outputs,
    0-1 fresh, 2-3 guarded aliases, 4-5 bare, 6-7 views into a pooled input's storage (6 of the
    input's dtype, 7 reinterpreted as int32)."""
    inputs = [torch.randn(64) for _ in range(4)]
    runs = []
    g = cg.GraphedProgram(lambda *a: runs.append(a) or ["eager"])
    pool = torch.randn(6 * 16)
    g._graph = _NoGraph()
    g._static_out = [pool[k * 16:(k + 1) * 16].view(4, 4) for k in range(6)] + [None, None]
    g._pooled = [(2, inputs[2].data_ptr())]
    g._inplace = [(0, inputs[0].data_ptr()), (1, inputs[1].data_ptr())]
    g._stable = [True] * 4
    g._static_in = [None, None, None, torch.empty(64)]
    g._copied = [3]         # copied into its static buffer per call
    g._in_pool = {6: (2, 8 * 4, (4, 2), (1, 4), torch.float32),
                  7: (2, 16 * 4, (2, 8), (8, 1), torch.int32)}
    use = torch._C._storage_Use_Count
    g._guard = [(pool.untyped_storage(), use(pool.untyped_storage()._cdata))]
    g.lend([], guarded=[2, 3, 4, 5, 6, 7], bare=[4, 5])
    return g, inputs, runs


def test_graphed_replay_plan_hands_out_what_the_loop_did():
    g, inputs, runs = _graphed_state()
    static = list(g._static_out)
    outs = g(*inputs)
    assert not runs and len(outs) == 8
    for j in (0, 1):        # fresh memory, the values copied
        assert outs[j].untyped_storage().data_ptr() != static[j].untyped_storage().data_ptr()
        assert torch.equal(outs[j], static[j]) and outs[j].stride() == static[j].stride()
    for j in (2, 3):        # a new alias each call
        assert outs[j] is not static[j]
        _same_view(outs[j], static[j])
    for j in (4, 5):
        assert outs[j] is static[j]
    for j in (6, 7):
        _same_view(outs[j], cg._view_in(inputs[2], *g._in_pool[j][1:]))
    assert torch.equal(g._static_in[3], inputs[3])
    # an alias still alive: the next call runs without the graph
    assert g(*inputs) == ["eager"] and len(runs) == 1
    del outs
    assert len(g(*inputs)) == 8 and len(runs) == 1


def test_graphed_replay_sees_a_moved_input(monkeypatch):
    g, inputs, runs = _graphed_state()
    recaptured = []
    monkeypatch.setattr(g, "_recapture", lambda ins: recaptured.append(1) or False)
    moved = list(inputs)
    moved[1] = inputs[1].clone()        # read in place, now elsewhere
    assert g(*moved) == ["eager"] and recaptured == [1]
    g3, inputs3, runs3 = _graphed_state()
    wrong = list(inputs3)
    wrong[3] = torch.randn(65)          # a copied input of another shape: the executor's error
    assert g3(*wrong) == ["eager"] and len(runs3) == 1
    g2, inputs2, runs2 = _graphed_state()
    moved = list(inputs2)
    moved[2] = inputs2[2].clone()       # a pooled input elsewhere: this call without the graph
    assert g2(*moved) == ["eager"] and g2.ungraphed_calls == 1


def test_executor_takes_inputs_as_its_per_input_loop(tmp_path):
    """The executor's C-level input check (runtime/executor.py _take_inputs) takes exactly what
    the per-input loop takes: the inputs themselves when they are as compiled; a
    non-contiguous one or a wrong shape or dtype goes through the loop (copied, or refused)."""
    from test_runtime import add_rowsum_program
    from ember.runtime import load
    cp = load(add_rowsum_program(), cache=tmp_path)
    assert cp._fast_inputs is not None
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    fast = [None] * 5
    cp._take_inputs((x, y), fast)
    assert fast[0] is x and fast[1] is y
    xt = torch.randn(8, 4).t()
    taken = [None] * 5
    cp._take_inputs((xt, y), taken)
    assert taken[0] is not xt and taken[0].is_contiguous() and torch.equal(taken[0], xt)
    with pytest.raises(ValueError, match="input 1"):
        cp._take_inputs((x, torch.randn(4, 9)), [None] * 5)
    with pytest.raises(ValueError, match="input 0"):
        cp._take_inputs((x.double(), y), [None] * 5)
    (out,) = cp(xt, y)
    torch.testing.assert_close(out, (2 * (xt + y)).sum(1))


def test_dynamic_program_takes_host_scalars_as_a_static_one_does():
    """A symbolic GPU program's inputs (_bind_inputs) take a 0-dim CPU tensor where a scalar
    of its dtype is expected, as the static path (_take_inputs) does: Dynamo lifts Python
    scalars, and dropout's philox seed and offset, to CPU tensors under dynamic shapes too (a
    GPU transformer block's backward refused its int64 seed on the H200). A CPU tensor of
    another rank, or a scalar of another dtype, is still refused."""
    from types import SimpleNamespace
    from ember.runtime.executor import CompiledProgram
    stub = SimpleNamespace(
        _dev_type="cuda", device=torch.device("cuda"), _host_scalar_ok=True,
        _host_scalar_moves=set(),       # read by library calls only: taken as they are
        program=SimpleNamespace(values=[SimpleNamespace(dtype="i64")] * 2
                                + [SimpleNamespace(dtype="f32")]),
        _in_checks=[((), torch.int64), ((), torch.int64), (("v3",), torch.float32)])
    stub._is_host_scalar = lambda *a: CompiledProgram._is_host_scalar(stub, *a)
    seed, offset = torch.tensor(7), torch.tensor(9)
    vals = [None] * 3
    with pytest.raises(ValueError, match="input 2 must be torch.float32 .* on cuda"):
        CompiledProgram._bind_inputs(stub, (seed, offset, torch.randn(4)), vals)
    assert vals[0] is seed and vals[1] is offset
    with pytest.raises(ValueError, match="input 1 must be torch.int64"):
        CompiledProgram._bind_inputs(stub, (seed, offset.double(), torch.randn(4)), [None] * 3)


def test_a_graph_without_tensor_inputs_runs_where_its_values_live():
    """A graph whose only input is a size (a causal mask made on x's device from x.shape[1],
    under dynamic shapes) runs on the device its FX values live on, not on the CPU for want of
    a tensor input (on the H200 its Triton kernel was handed CPU buffers); among tensor inputs
    a GPU one decides over a 0-dim CPU scalar that comes first."""
    import torch.fx as fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    from ember.frontend.compile_module import run_device
    from ember.frontend.options import resolve_target, run_devices
    with FakeTensorMode():
        mask = torch.empty(3, 3, device="cuda")
    g = fx.Graph()
    n = g.placeholder("n")
    out = g.call_function(torch.full, ((n, n), 1.0))
    out.meta["val"] = mask
    g.output(out)
    gm = fx.GraphModule({}, g)
    devices = run_devices([3], gm)
    assert devices == [torch.device("cuda", 0)]
    assert resolve_target("auto", devices) in ("cuda", "rocm")
    assert run_device("triton", devices) == torch.device("cuda", 0)
    assert run_devices([torch.zeros(2)], gm) == [torch.device("cpu")]   # inputs decide first
    assert run_device("triton", [torch.device("cpu"), torch.device("cuda", 0)]).type == "cuda"
    assert run_device("cpu", []) == torch.device("cpu")


def test_replay_hands_out_the_inputs_its_graph_wrote_into():
    """lend's write_into (on CPU tensors, the replay a no-op): an output whose value the capture
    copied into its input is that input itself, and the capture copies only lent new values of
    inputs read in place that match them."""
    g, inputs, runs = _graphed_state()
    g._into = [(4, 1)]
    outs = g(*inputs)
    assert not runs and outs[4] is inputs[1] and outs[5] is g._static_out[5]
    static = [torch.zeros(16), torch.zeros(16), torch.zeros(16)]
    h = cg.GraphedProgram(lambda *a: [])
    h._inplace = [(0, static[0].data_ptr()), (1, static[1].data_ptr())]
    h._static_out = [torch.ones(16), torch.ones(8), static[1], torch.full((16,), 2.0)]
    # 1: another shape; 2: already the input's memory (written in place); 3: input 2 is
    # copied in per call, not read in place
    h._write_into = {0: 0, 1: 1, 2: 1, 3: 2}
    assert h._copy_into_inputs(static) == [(0, 0)]
    assert torch.equal(static[0], torch.ones(16)) and torch.equal(static[2], torch.zeros(16))


def test_write_into_pairs_program_outputs_with_program_inputs():
    """compile._write_into: lent compiled new values of inputs taken as they are, indexed as
    the program sees them (`pos`: the program's inputs among the graph's)."""
    from types import SimpleNamespace
    from ember.frontend.compile import _write_into
    from ember.frontend.input_mutations import InputMutations
    prep = SimpleNamespace(plan=[("compiled", 0), ("compiled", 1), ("compiled", 2),
                                 ("view", 2, [], None)],
                           host_gm=None, in_perms={2: [1, 0]})
    # input 0's new value: output 1 (lent); input 2's: output 2 (the input is permuted);
    # input 1's: output 3 (a view)
    mutations = InputMutations(1, ((0, 1), (2, 2), (1, 3)))
    assert _write_into(prep, mutations, {1, 2}, None) == {1: 0}
    assert _write_into(prep, mutations, {2}, None) == {}
    assert _write_into(prep, mutations, {1, 2}, [1, 0, 2]) == {1: 1}
    assert _write_into(prep, None, {1, 2}, None) == {}


def test_saved_range_leaves_out_lifted_input_mutations(monkeypatch):
    """A training forward's saved activations (AOTAutograd's slice of its outputs) do not
    include the new values of the inputs ember lifts out of the graph (BatchNorm's running
    statistics, appended after the graph's own outputs): those are written back, not lent to
    the backward."""
    from ember.frontend import compile as ec
    made, init = [], ec.EmberGraph.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        made.append(self)
    monkeypatch.setattr(ec.EmberGraph, "__init__", spy)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                            torch.nn.ReLU()).train()
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8),
                              torch.nn.ReLU()).train()
    ref.load_state_dict(m.state_dict())
    torch._dynamo.reset()
    ember.clear_reports()
    x = torch.randn(4, 3, 10, 10)
    torch.compile(m, backend="ember", options={"target": "cpu"})(x).sum().backward()
    ref(x).sum().backward()
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(m[0].weight.grad, ref[0].weight.grad, rtol=1e-4, atol=1e-4)
    (fwd,) = [g for g in made if g.kind == "forward"]
    assert fwd._mutations is not None and len(fwd._mutations.targets) == 3
    assert fwd.lent_outputs is not None and len(fwd.lent_outputs) > 0
    assert fwd.lent_outputs.stop <= fwd._mutations.num_outputs, (
        fwd.lent_outputs, fwd._mutations)
    check_fallbacks()
