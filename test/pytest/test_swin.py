"""The pieces of a Swin transformer (torchvision's swin_t), written with torch ops so that CI
needs no torchvision: cyclic shift (`roll`), window partition, relative-position-bias gather,
the shifted-window attention mask built by slice assignment, patch merging (pad + strided
slices + cat). Each compiles with no eager fallback, forward and backward, on both targets."""
import pytest
import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

import ember
from conftest import assert_close, clear_reports


class MiniSwin(nn.Module):
    """One shifted-window attention block and a patch merging, as swin_t computes them."""

    def __init__(self, c=8, heads=2, ws=4, shift=2):
        super().__init__()
        self.heads, self.ws, self.shift = heads, ws, shift
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.1)
        grid = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij"))
        grid = grid.flatten(1)
        rel = (grid[:, :, None] - grid[:, None, :]).permute(1, 2, 0) + (ws - 1)
        self.register_buffer("index", (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).flatten())
        self.norm = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.reduce = nn.Linear(4 * c, 2 * c, bias=False)

    def _mask(self, like, ph, pw):
        ws, s = self.ws, self.shift
        mask = like.new_zeros((ph, pw))
        count = 0
        for h in ((0, -ws), (-ws, -s), (-s, None)):
            for w in ((0, -ws), (-ws, -s), (-s, None)):
                mask[h[0]:h[1], w[0]:w[1]] = count
                count += 1
        n = ws * ws
        mask = mask.view(ph // ws, ws, pw // ws, ws).permute(0, 2, 1, 3).reshape(-1, n)
        mask = mask.unsqueeze(1) - mask.unsqueeze(2)
        return mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)

    def forward(self, x):
        b, h, w, c = x.shape
        ws, s, nh, n = self.ws, self.shift, self.heads, self.ws * self.ws
        y = F.pad(self.norm(x), (0, 0, 0, (ws - w % ws) % ws, 0, (ws - h % ws) % ws))
        _, ph, pw, _ = y.shape
        y = torch.roll(y, shifts=(-s, -s), dims=(1, 2))
        nw = (ph // ws) * (pw // ws)
        y = y.view(b, ph // ws, ws, pw // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b * nw, n, c)
        qkv = self.qkv(y).reshape(b * nw, n, 3, nh, c // nh).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * (c // nh) ** -0.5).matmul(k.transpose(-2, -1))
        bias = self.table[self.index].view(n, n, -1).permute(2, 0, 1).contiguous().unsqueeze(0)
        attn = attn + bias
        attn = attn.view(b, nw, nh, n, n) + self._mask(y, ph, pw).unsqueeze(1).unsqueeze(0)
        attn = F.softmax(attn.view(-1, nh, n, n), dim=-1)
        y = self.proj(attn.matmul(v).transpose(1, 2).reshape(b * nw, n, c))
        y = y.view(b, ph // ws, pw // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, ph, pw, c)
        y = torch.roll(y, shifts=(s, s), dims=(1, 2))
        x = x + y[:, :h, :w, :].contiguous()
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))            # patch merging
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :],
                       x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        return self.reduce(x)


def _compile(fn, target):
    torch._dynamo.reset()
    clear_reports()
    return torch.compile(fn, backend="ember", options={"target": target})


def _assert_no_fallback():
    reports = ember.last_reports()
    assert reports
    for r in reports:
        assert r["status"] == "compiled", (r["graph_id"], r["status"], r.get("error"))
        assert r["eager_fallback_ops"] == [], (r["graph_id"], r["fallback_reasons"])


def test_swin_block_inference(target, device):
    torch.manual_seed(0)
    m = MiniSwin().eval().to(device)
    x = torch.randn(2, 7, 7, 8, device=device)
    with torch.no_grad():
        out = _compile(m, target)(x)
        assert_close(out, m(x), matmul=True)
    _assert_no_fallback()


def test_swin_block_training(target, device):
    torch.manual_seed(0)
    m = MiniSwin().to(device)
    cm_model = MiniSwin().to(device)
    cm_model.load_state_dict(m.state_dict())
    x = torch.randn(2, 7, 7, 8, device=device)
    xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    m(xr).square().mean().backward()
    out = _compile(cm_model, target)(xc)
    out.square().mean().backward()
    assert_close(out, m(x), matmul=True)
    assert_close(xc.grad, xr.grad, matmul=True)
    for (name, p), q in zip(m.named_parameters(), cm_model.parameters()):
        assert_close(q.grad, p.grad, matmul=True, what=name)
    _assert_no_fallback()


@pytest.mark.targets("cpu", "cuda")     # the interpreter adds minutes, not coverage
def test_swin_block_training_bf16(target, device):
    torch.manual_seed(0)
    m = MiniSwin().to(device)
    cm_model = MiniSwin().to(device)
    cm_model.load_state_dict(m.state_dict())
    x = torch.randn(2, 7, 7, 8, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        ref = m(x).float().square().mean()
        cm = _compile(cm_model, target)
        out = cm(x).float().square().mean()
    ref.backward()
    out.backward()
    assert_close(out, ref, tol=1e-2)
    for (name, p), q in zip(m.named_parameters(), cm_model.parameters()):
        assert_close(q.grad, p.grad, tol=1e-2, what=name)
    _assert_no_fallback()


@pytest.mark.targets("cpu")
def test_bf16_layer_norm_saved_stats(target, device):
    """swin's patch embedding under bf16 autocast: a bf16 activation into LayerNorm with f32
    weights. The CPU kernel (a library call) returns f32 mean/rstd where torch's meta, which
    typed the graphs, says bf16; the backward must get what it was compiled for."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4))
    mc = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4))
    mc.load_state_dict(m.state_dict())
    x = torch.randn(4, 5, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = m(x).float().square().mean()
        out = _compile(mc, target)(x).float().square().mean()
    ref.backward()
    out.backward()
    assert_close(out, ref, tol=1e-2)
    for (name, p), q in zip(m.named_parameters(), mc.parameters()):
        assert_close(q.grad, p.grad, tol=1e-2, what=name)
    _assert_no_fallback()


def test_roll_variants(target, device):
    """roll over one dim, two dims, negative and oversized shifts, and flattened (no dims); of
    an input and of a value computed in the kernel (read once at a piecewise index: the
    ember-lower-to-triton-roll lit case)."""
    def f(x):
        return (torch.roll(x, 3, 1) + torch.roll(x, (-2, 9), (0, 2))
                + torch.roll(x, 5).sin() + torch.roll(x, 0, 1)
                + torch.roll((x * 1.5).exp(), (3, -4), (1, 2)))
    x = torch.randn(5, 6, 7, device=device, requires_grad=True)
    xc = x.detach().clone().requires_grad_()
    ref = f(x)
    out = _compile(f, target)(xc)
    assert_close(out, ref)
    ref.square().sum().backward()
    out.square().sum().backward()
    assert_close(xc.grad, x.grad)
    _assert_no_fallback()


def test_concat_of_slices_of_one_value(target, device):
    """A concat whose pieces are slices of one computed value (Triton: read once at a piecewise
    index): three pieces out of order, a piece repeated, and slices that also start past 0 in
    another dim (the same rows for every piece)."""
    def f(x):
        y = (x * 0.5).exp()
        a = torch.cat([y[:, 5:], y[:, 2:5], y[:, :2]], 1)
        b = torch.cat([y[:, 1:3], y[:, 1:3], y[:, 4:6]], 1)
        c = torch.cat([y[1:3, 4:], y[1:3, :4]], 1)
        return a * 2 + 1, b.sin(), c - 1
    x = torch.randn(4, 7, device=device)
    out = _compile(f, target)(x)
    for o, r in zip(out, f(x)):
        assert_close(o, r)
    _assert_no_fallback()


def test_strided_slice_backward(target, device):
    """The backward of strided slices (patch merging): slice_scatter with step 2 and 3, odd
    sizes, starts past 0."""
    def f(x):
        return x[:, 1::2, ::3] * 2, x[:, 0::2, 1::3].exp()
    x = torch.randn(3, 9, 10, device=device, requires_grad=True)
    xc = x.detach().clone().requires_grad_()
    ref = f(x)
    out = _compile(f, target)(xc)
    assert_close(out, ref)
    (ref[0].sum() + ref[1].sum()).backward()
    (out[0].sum() + out[1].sum()).backward()
    assert_close(xc.grad, x.grad)
    _assert_no_fallback()


def test_as_strided_restating_layout(target, device):
    """as_strided whose strides are the input's own layout (up to size-1 dims) is a view."""
    def f(x):
        y = x.permute(0, 3, 1, 2).mean((-1, -2), keepdim=True)        # strides of a permute
        return torch.as_strided(y, (2, 6, 1, 1), (6, 1, 6, 6)).flatten(1) * 3
    x = torch.randn(2, 4, 5, 6, device=device)
    out = _compile(f, target)(x)
    assert_close(out, f(x))
    _assert_no_fallback()


def test_pooled_head_backward(target, device):
    """swin's head: channels-last features permuted and average-pooled to 1x1. AOTAutograd
    writes the pooled layout as `as_strided` and its backward as `as_strided_scatter`, both of
    which restate a layout (a view, a reshape)."""
    def f(x, w):
        return F.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), 1).flatten(1) @ w
    for shape in ((1, 1, 1, 8), (2, 2, 2, 8)):
        x = torch.randn(*shape, device=device, requires_grad=True)
        w = torch.randn(8, 4, device=device, requires_grad=True)
        xc, wc = (t.detach().clone().requires_grad_() for t in (x, w))
        ref, out = f(x, w), _compile(f, target)(xc, wc)
        assert_close(out, ref, matmul=True)
        ref.square().sum().backward()
        out.square().sum().backward()
        assert_close(xc.grad, x.grad, matmul=True)
        assert_close(wc.grad, w.grad, matmul=True)
        _assert_no_fallback()


def test_outline_keeps_topological_order():
    """A piece of a split graph creates its placeholders where first used; a library call cut
    out of it gets placeholders that must still precede their uses."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from ember.frontend.library_calls import outline
    g = fx.Graph()
    a = g.placeholder("a")
    scan = g.call_function(torch.ops.aten.cumsum.default, (a, 0))
    twice = g.call_function(torch.ops.aten.mul.Tensor, (scan, 2.0))
    b = g.placeholder("b")
    out = g.call_function(torch.ops.aten.add.Tensor, (twice, b))
    g.output((out,))
    with FakeTensorMode():
        for node in (a, scan, twice, b, out):
            node.meta["val"] = torch.empty(4)
    gm, calls = outline(fx.GraphModule(torch.nn.Module(), g), {scan})
    gm.graph.lint()
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    assert names == ["a", "b", "ember_lib0_out0"] and len(calls) == 1
    x, y, s = torch.randn(4), torch.randn(4), torch.randn(4)
    assert torch.equal(gm(x, y, s)[0], s * 2 + y)


class LastStage(nn.Module):
    """Patch merging, then the norm1 and window partition of a block whose one window covers
    the whole image (swin_t's last stage: 7x7 tokens, 7x7 windows, no shift)."""

    def __init__(self, c=8, ws=2):
        super().__init__()
        self.ws = ws
        self.norm = nn.LayerNorm(4 * c)
        self.reduce = nn.Linear(4 * c, 2 * c, bias=False)
        self.norm1 = nn.LayerNorm(2 * c)
        self.qkv = nn.Linear(2 * c, 2 * c)

    def forward(self, x):
        x = torch.cat([x[..., 0::2, 0::2, :], x[..., 1::2, 0::2, :],
                       x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :]], -1)
        x = self.reduce(self.norm(x))
        b, h, w, c = x.shape
        ws = self.ws
        y = self.norm1(x).view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        y = self.qkv(y.reshape(-1, ws * ws, c))
        y = y.view(b, h // ws, w // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        return x + y


def test_one_window_stage_bf16_fast(target, device):
    """exact_low_precision=False keeps the reduction's f32 product and fuses LayerNorm: one
    kernel returns the rounded product as [1, 2, 2, C] (the residual) and, through a folded
    expand-of-expand, as [1, 1, 2, 1, 2, C] (the window partition). Both split the 4 rows
    into (2, 2): the scheduler must see one pair of loops (it raised 'a kernel result is not
    indexed by the whole outer space' and swin_t ran wholly eagerly)."""
    torch.manual_seed(0)
    m = LastStage().eval().to(device, torch.bfloat16)
    x = torch.randn(1, 4, 4, 8, device=device, dtype=torch.bfloat16)
    torch._dynamo.reset()
    clear_reports()
    f = torch.compile(m, backend="ember",
                      options={"target": target, "exact_low_precision": False})
    with torch.no_grad():
        assert_close(f(x), m(x), tol=1e-2)
    _assert_no_fallback()


class _Attention(nn.Module):
    """Attention with 4-d matmuls, as swin_t writes it: `q @ k.transpose(-2, -1)`."""

    def __init__(self, c=64, heads=2):
        super().__init__()
        self.qkv, self.heads = nn.Linear(c, 3 * c), heads

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        a = ((q * 0.25) @ k.transpose(-2, -1)).softmax(-1)
        return (a @ v).transpose(1, 2).reshape(b, n, c)


def _compiled_backward_node(out):
    fn = out.grad_fn
    while fn is not None and "Compiled" not in type(fn).__name__:
        fn = fn.next_functions[0][0]
    return fn


@pytest.mark.targets("cpu", "cuda")
def test_saved_transposed_clone_in_own_order(target, device):
    """The contiguous copy of k^T that bmm's view needs, saved for the backward as k, is
    written in k's own order (frontend/saved_clones.py): the backward gets k contiguous (eager
    and main gave it a transposed view of a k^T copy, written by stores strided by k's last
    dim), and the gradients are eager's."""
    torch.manual_seed(0)
    m = _Attention().to(device)
    x = torch.randn(4, 49, 64, device=device, requires_grad=True)
    ref = m(x)
    ref.square().sum().backward()
    gx, gw = x.grad.clone(), m.qkv.weight.grad.clone()
    x.grad, m.qkv.weight.grad = None, None
    out = _compile(m, target)(x)
    saved = _compiled_backward_node(out).saved_tensors
    ks = [t for t in saved if tuple(t.shape) == (8, 49, 32)]
    assert ks and all(t.is_contiguous() for t in ks), [(t.shape, t.stride()) for t in saved]
    out.square().sum().backward()
    assert_close(out, ref)
    assert_close(x.grad, gx, what="x")
    assert_close(m.qkv.weight.grad, gw, what="qkv.weight")
    _assert_no_fallback()


def test_relative_bias_backward_dense(target, device, interpreted):
    """The backward of the relative-position-bias gather (`index_put(accumulate=True)` of 2401
    positions into 169 rows, negative indices wrapping) is one reduction on a GPU code
    generator, no library call (eager's GPU kernel sorts the indices first); on the CPU,
    eager's loop of adds stays. Gradients within f32 rounding of eager's."""
    torch.manual_seed(0)
    ws, heads = (3, 2) if interpreted else (7, 6)
    rows, n = (2 * ws - 1) ** 2, ws ** 4
    table = torch.randn(rows, heads, device=device, requires_grad=True)
    idx = torch.randint(0, rows, (n,), device=device)
    idx[::5] -= rows    # negative: index_put wraps them
    w = torch.randn(heads, ws * ws, ws * ws, device=device)

    def fn(t, i):
        bias = t[i].view(ws * ws, ws * ws, heads).permute(2, 0, 1)
        return (bias * w).sum()

    fn(table, idx).backward()
    ref = table.grad.clone()
    table.grad = None
    _compile(fn, target)(table, idx).backward()
    assert_close(table.grad, ref, what="table grad")
    _assert_no_fallback()
    calls = [c for r in ember.last_reports() for c in r.get("library_calls") or []]
    if target == "cpu":
        assert "aten.index_put.default" in calls, calls
    else:
        assert "aten.index_put.default" not in calls, calls


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_index_put_accumulate_dense(target, device, dtype):
    """index_put(accumulate=True) of a 1-d int64 / int32 index (negative ones wrapping) into a
    tensor that is not zeros, 1-d to 3-d: compiled with no eager part, eager's values."""
    torch.manual_seed(0)

    def fn(s, i, v):
        return torch.index_put(s * 2, (i,), v * 3, accumulate=True)

    for shape, n in (((7,), 20), ((4, 2, 3), 9)):
        s = torch.randn(*shape, device=device)
        i = torch.randint(-shape[0], shape[0], (n,), dtype=dtype, device=device)
        v = torch.randn(n, *shape[1:], device=device)
        out = _compile(fn, target)(s, i, v)
        assert_close(out, fn(s, i, v))
        _assert_no_fallback()
