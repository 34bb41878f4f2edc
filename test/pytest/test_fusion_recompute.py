"""Cheap pointwise values recomputed in the kernels that read them instead of stored
(passes/fusion_recompute.py, ember-fuse's last step): a layer norm's backward in fp32 and bf16,
against eager on every target, with no eager fallback, and the backward's report naming what
was recomputed (the products that the column sums read were stored by the row kernel before).
"""
import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import assert_close, check_fallbacks, clear_reports, ember_compile


def _randn(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def _fwd_bwd(fn, args, target, device, tol):
    args = [a.to(device) for a in args]
    ref_in = [a.detach().clone().requires_grad_() for a in args]
    out_in = [a.detach().clone().requires_grad_() for a in args]
    ref = fn(*ref_in)
    clear_reports()
    out = ember_compile(fn, target)(*out_in)
    assert_close(out, ref, tol=tol)
    cot = _randn(ref.shape, seed=7).to(device, ref.dtype)
    (ref.float() * cot.float()).sum().backward()
    (out.float() * cot.float()).sum().backward()
    for a, b in zip(out_in, ref_in):
        assert_close(a.grad, b.grad, tol=tol, what="grad")
    check_fallbacks()
    return {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_backward_recomputes_its_products(target, device, dtype):
    """dy * xhat (the weight gradient's column sum) and dy (the bias gradient's) are computed
    again in the column sums' kernel from the row kernel's inputs, instead of written out by
    the row kernel (the input gradient's) and read back."""
    def f(x, w, b):
        return F.layer_norm(x, (48,), w, b)

    args = [_randn((2, 8, 48), 0, dtype), _randn(48, 1, dtype), _randn(48, 2, dtype)]
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    bwd = _fwd_bwd(f, args, target, device, tol)["backward"]
    assert bwd["recomputed"], bwd["fused_groups"]
    assert all(d["bytes_saved"] > 0 and d["consumers"] for d in bwd["recomputed"])


def test_gpt2_style_layer_norm_backward_under_autocast(target, device):
    """GPT-2's block under bf16 autocast: a layer norm (f32 under autocast) feeds a bf16
    matmul. In the backward, dy is the matmul's gradient rounded to bf16 and widened; the row
    kernel stored the widened dy and dy * xhat for the column sums (the H100 profile's
    LN backward kernel, 3 f32 results); both are recomputed there now."""
    def f(x, g, beta, w):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return F.layer_norm(x, (32,), g, beta) @ w

    args = [_randn((2, 8, 32)), _randn(32, 2), _randn(32, 3), _randn((32, 16), 1) * 0.2]
    bwd = _fwd_bwd(f, args, target, device, tol=2e-2)["backward"]
    assert len(bwd["recomputed"]) >= 2, (bwd["recomputed"], bwd["fused_groups"])


_UNARY = [torch.tanh, torch.sigmoid, torch.relu, lambda t: t * t, torch.exp, torch.neg]
_BINARY = [torch.mul, torch.add, torch.sub, torch.maximum]


def _random_graph(seed):
    """A pointwise value p of x and y (and a broadcast weight w) summed per row (with a
    full-size result that reads the row sums: one kernel) and per column (beside y's column
    sum: another kernel), the shape of a norm's backward; ops drawn by `seed`."""
    g = torch.Generator().manual_seed(seed)

    def pick(ops):
        return ops[int(torch.randint(len(ops), (1,), generator=g))]

    binary, unary, with_w = pick(_BINARY), pick(_UNARY), bool(torch.randint(2, (1,), generator=g))
    combine = pick(_BINARY)

    def f(x, y, w):
        p = unary(binary(x, y))
        if with_w:
            p = p * w
        rows = p.sum(-1, keepdim=True)
        return combine(x, rows), p.sum(0), y.sum(0)

    return f


@pytest.mark.parametrize("seed", range(4))
def test_random_row_and_column_sums_of_one_value(target, device, seed):
    """Random graphs in which p feeds a row and a column reduction: results identical to
    eager's (within the fp32 tolerance) with p recomputed in the column sums' kernel."""
    f = _random_graph(seed)
    args = [_randn((6, 40), seed) * 0.5, _randn((6, 40), seed + 1) * 0.5, _randn(40, seed + 2)]
    args = [a.to(device) for a in args]
    ref = f(*args)
    out = ember_compile(f, target)(*args)
    assert_close(list(out), list(ref), tol=1e-4)
    check_fallbacks()
    assert any(r.get("recomputed") for r in ember.last_reports())


def _dense_block(x, *params):
    """A DenseNet block (torchvision's _DenseLayer, one conv per layer): each layer reads the
    concatenation of the block's input and every earlier layer's output through a training
    BatchNorm, a ReLU and a 1x1 convolution."""
    feats = [x]
    for k in range(0, len(params), 3):
        w, b, conv = params[k:k + 3]
        h = F.batch_norm(torch.cat(feats, 1), None, None, w, b, training=True)
        feats.append(F.conv2d(torch.relu(h), conv))
    return torch.cat(feats, 1)


def test_dense_block_training_step_matches_eager(target, device, monkeypatch):
    """A dense block's training step against eager, nothing eager. Its backward slices each
    concatenation's gradient for every earlier layer: one value read by a kernel per layer
    (densenet121: 24). recompute_producers weighs recomputing such a value in each reader;
    its producer's cone is walked once for all of them (each op's reads looked up once while
    no plan is applied), where it was walked again per reader (densenet121's backward: 7.2 CPU
    s of recompute, 3.5 after)."""
    from ember.passes import fusion_recompute as fr
    walks, most = {}, []
    real_outer, real_try = fr._outer_operands, fr._try_value

    def outer(op):
        walks[id(op)] = walks.get(id(op), 0) + 1
        return real_outer(op)

    def try_value(state, gi, v, *rest):
        walks.clear()
        consumers = {state.where.get(u) for u in fr.users(v)} - {gi, None}
        found = real_try(state, gi, v, *rest)
        most.append((len(consumers), max(walks.values(), default=0)))
        return found
    monkeypatch.setattr(fr, "_outer_operands", outer)
    monkeypatch.setattr(fr, "_try_value", try_value)
    c0, growth, layers = 4, 4, 4
    args = [_randn((2, c0, 6, 6), 0)]
    for i in range(layers):
        c = c0 + i * growth
        args += [_randn(c, 10 + i).abs() + 0.5, _randn(c, 20 + i),
                 _randn((growth, c, 1, 1), 30 + i) * 0.3]
    _fwd_bwd(_dense_block, args, target, device, tol=1e-4)
    # values read by several kernels were weighed, and no op's reads were looked up more
    # than twice for one value (once for its cone, once more at most for a reader's loads)
    assert max(n for n, _ in most) >= 3, most
    assert max(w for _, w in most) <= 2, most
