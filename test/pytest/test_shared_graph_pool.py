"""One CUDA-graph memory pool for a training step (runtime/pool_family.py through
runtime/cuda_graphs.py): the graphed backward is captured into the pool of the forward whose
saved activations it reads, so its temporaries and gradients reuse the forward's freed
temporaries (an optimizer step's graph keeps a pool of its own). Every loop here runs against eager over several steps
(warm-up, capture, replays); the loops that keep a gradient past the next forward check that
no replay wrote over it (the guard: a replay finds no output of a later capture of its pool
alive). Needs a GPU: skipped on the CPU-only CI (the bookkeeping itself: test_pool_family.py)."""
import pytest
import torch

import ember
from conftest import check_fallbacks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    ember.clear_reports()
    yield
    torch._dynamo.reset()


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                               torch.nn.Linear(1024, 1024), torch.nn.GELU(),
                               torch.nn.Linear(1024, 256), torch.nn.LayerNorm(256)).cuda().train()


class _SpatialMean(torch.nn.Module):
    def forward(self, x):
        return x.mean((2, 3))


def _conv(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(8, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                               torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1),
                               torch.nn.ReLU(), _SpatialMean(),
                               torch.nn.Linear(32, 10)).cuda().train()


def _pair(make):
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    return model, ref


def _x(model, step):
    torch.manual_seed(100 + step)
    if isinstance(model[0], torch.nn.Conv2d):
        return torch.randn(16, 8, 16, 16, device="cuda")
    return torch.randn(512, 256, device="cuda")


def _loss(out):
    return out.square().mean()


def _kind(g) -> str:
    return (g.stats or {}).get("graph_id", "").rsplit("-", 1)[-1]


def _roles(made):
    """(forward, backward) graphed programs of the one training graph pair."""
    fwd = [g for g in made if _kind(g) == "forward" and g.captured]
    bwd = [g for g in made if _kind(g) == "backward" and g.captured]
    assert len(fwd) == 1 and len(bwd) == 1, ([_kind(g) for g in made])
    return fwd[0], bwd[0]


def _close_params(model, ref, **tol):
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q, p, **(tol or TOL))


@pytest.mark.parametrize("make", [_mlp, _conv])
def test_sgd_loop_shares_one_pool_and_matches_eager(graphs, make, monkeypatch):
    """A plain loop (zero_grad, forward, backward, SGD step): the backward is captured into
    the forward's pool, every step replays both graphs, and the parameters after eight steps
    are eager's (the convolutions without TF32, with a convolution's tolerance: cuDNN picks
    other algorithms for other layouts)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    tol = TOL if make is _mlp else dict(rtol=1e-3, atol=1e-4)
    model, ref = _pair(make)
    f = torch.compile(model, backend="ember")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, ref)]
    for step in range(8):
        x = _x(model, step)
        for m, fn, opt in ((model, f, opts[0]), (ref, ref, opts[1])):
            opt.zero_grad(set_to_none=True)
            _loss(fn(x)).backward()
            opt.step()
        _close_params(model, ref, **tol)
    fwd, bwd = _roles(graphs)
    assert fwd._family is not None and bwd._family is fwd._family
    assert bwd._seq > fwd._seq
    assert fwd.ungraphed_calls == bwd.ungraphed_calls == 0
    reports = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()
               if r.get("cudagraphs")}
    fam = fwd._family
    assert reports["forward"]["shared_pool_bytes"] == reports["backward"]["shared_pool_bytes"] \
        == fam.bytes >= fwd.pool_bytes + bwd.pool_bytes
    check_fallbacks()


def test_gradient_accumulation_without_zero_grad(graphs):
    """Two micro-batches per step without zeroing in between: the first micro-batch's
    gradients (lent by the backward, kept as `.grad`) are alive at the second forward, whose
    replay would write its temporaries where they may lie: it runs without its graph, the
    backward leaves the pool, and the gradients are eager's at every step."""
    model, ref = _pair(_mlp)
    f = torch.compile(model, backend="ember")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, ref)]
    for step in range(8):
        for micro in range(2):
            x = _x(model, 2 * step + micro)
            _loss(f(x)).backward()
            _loss(ref(x)).backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **TOL)
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
    _close_params(model, ref)
    fwd, bwd = _roles(graphs)
    assert fwd.captured and bwd.captured
    # the guard fired (a forward replay over live gradients was refused) and the backward
    # left the shared pool
    assert fwd.ungraphed_calls >= 1
    assert bwd._family is None and bwd._private


def test_gradients_held_across_the_next_forward_are_not_overwritten(graphs):
    """Step 1's gradient tensors themselves are held (not clones) while step 2's forward runs:
    they must keep step 1's values bit for bit."""
    model, ref = _pair(_mlp)
    f = torch.compile(model, backend="ember")
    for step in range(4):               # warm-up, captures, a replay
        model.zero_grad(set_to_none=True)
        _loss(f(_x(model, step))).backward()
    fwd, bwd = _roles(graphs)
    assert bwd._family is fwd._family
    for step in range(4, 8):
        held = [p.grad for p in model.parameters()]
        clones = [g.clone() for g in held]
        model.zero_grad(set_to_none=True)
        x = _x(model, step)
        out = f(x)                          # replays would reuse the forward's temporaries
        torch.cuda.synchronize()
        for g, c in zip(held, clones):
            assert torch.equal(g, c), step
        _loss(out).backward()
        ref.zero_grad(set_to_none=True)
        _loss(ref(x)).backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **TOL)
        for g, c in zip(held, clones):
            assert torch.equal(g, c), step
        del held
    assert fwd.ungraphed_calls >= 1


def test_autograd_grad_results_held_across_a_second_forward(graphs):
    """torch.autograd.grad's results (the backward's lent gradients) kept while the next
    forward and backward run: values unchanged, and each step's gradients are eager's."""
    model, ref = _pair(_mlp)
    f = torch.compile(model, backend="ember")
    params, rparams = list(model.parameters()), list(ref.parameters())
    kept = []
    for step in range(7):
        x = _x(model, step)
        grads = torch.autograd.grad(_loss(f(x)), params)
        rgrads = torch.autograd.grad(_loss(ref(x)), rparams)
        for g, r in zip(grads, rgrads):
            torch.testing.assert_close(g, r, **TOL)
        kept.append((grads, [g.clone() for g in grads]))
        for old, copies in kept:
            for g, c in zip(old, copies):
                assert torch.equal(g, c), step
    fwd, bwd = _roles(graphs)
    assert fwd.ungraphed_calls >= 1


def test_adamw_step_compiled_keeps_its_own_pool_and_matches_eager(graphs):
    """Model and AdamW step both compiled: the step reads the backward's gradients in place but
    is captured into a pool of its own (only a forward and its backward share one); the
    parameters after six steps are eager's (rounding of the fused step grows to ~1e-4; a stale
    or overwritten value would be off by ~lr)."""
    model, ref = _pair(_mlp)
    f = torch.compile(model, backend="ember")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref)]
    step_fn = torch.compile(opts[0].step, backend="ember")
    # Not `_loss`: the square of a LayerNorm's output has a mean of ~1 whatever its input, so
    # the Linear weights' gradients are rounding noise (max 6e-5, wrong by 7e-10 in f32), which
    # AdamW's normalised update turns into +-lr steps: eager f32 itself ends 0.018 from eager
    # f64 after six steps (on an H100 ember's parameters were 0.026 from eager's). Weighted
    # by fixed random numbers, the gradients are real (max 0.026) and f32 ends 1.5e-4 from f64.
    torch.manual_seed(1)
    c = torch.randn(256, device="cuda")
    for step in range(6):
        x = _x(model, step)
        (f(x) * c).mean().backward()
        (ref(x) * c).mean().backward()
        step_fn()
        opts[1].step()
        for m in (model, ref):
            m.zero_grad(set_to_none=True)
    _close_params(model, ref, rtol=1e-3, atol=5e-4)
    fwd, bwd = _roles(graphs)
    assert fwd._family is not None and bwd._family is fwd._family
    opt = [g for g in graphs if g.captured and _kind(g) not in ("forward", "backward")]
    assert all(g._family is None for g in opt), [(_kind(g), g._seq) for g in graphs]
    assert fwd.ungraphed_calls == bwd.ungraphed_calls == 0


def _pool_bytes(shared: bool) -> tuple[int, int]:
    torch._dynamo.reset()
    ember.clear_reports()
    model, _ = _pair(_mlp)
    f = torch.compile(model, backend="ember", options={"shared_graph_pool": shared})
    for step in range(5):
        model.zero_grad(set_to_none=True)
        _loss(f(_x(model, step))).backward()
    reports = [r for r in ember.last_reports() if r.get("cudagraphs")]
    kinds = {r["graph_id"].rsplit("-", 1)[-1] for r in reports}
    assert kinds == {"forward", "backward"}, kinds
    return (sum(r.get("graph_pool_bytes", 0) for r in reports),
            max(r.get("shared_pool_bytes", 0) for r in reports))


def test_shared_pool_reserves_less_than_two_pools(graphs):
    """The backward's new bytes in the shared pool are fewer than its own pool's: the forward
    and backward together reserve less with sharing than without (option off: two pools)."""
    shared, shared_total = _pool_bytes(True)
    private, private_total = _pool_bytes(False)
    assert shared_total == shared > 0
    assert private_total == 0
    assert shared < private, (shared, private)
    fams = {id(g._family) for g in graphs if g.captured and g._family is not None}
    assert len(fams) == 1     # the second model's graphs have none


def test_zero_grad_after_the_forward_and_inference_graphs(graphs):
    """`out = f(x); opt.zero_grad(); out.backward()` keeps the previous step's gradients alive
    at each forward: the forward runs without its graph rather than over them, the backward
    leaves the pool, and the values are eager's. A no_grad inference graph of the same model
    between steps keeps a pool of its own."""
    model, ref = _pair(_mlp)
    f = torch.compile(model, backend="ember")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, ref)]
    for step in range(10):
        x = _x(model, step)
        for m, fn, opt in ((model, f, opts[0]), (ref, ref, opts[1])):
            out = fn(x)
            opt.zero_grad(set_to_none=True)
            _loss(out).backward()
            opt.step()
        _close_params(model, ref)
        if step % 3 == 2:
            with torch.no_grad():
                model.eval(), ref.eval()
                torch.testing.assert_close(f(x), ref(x), **TOL)
                model.train(), ref.train()
    fwd, bwd = _roles(graphs)
    assert fwd.ungraphed_calls >= 1
    assert bwd._family is None or bwd._family is not fwd._family     # it left
    infer = [g for g in graphs if g.captured and _kind(g) not in ("forward", "backward")]
    assert infer and all(g._family is None for g in infer)
