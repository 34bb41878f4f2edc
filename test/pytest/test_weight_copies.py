"""CPU inference matmuls read a Linear layer's weight packed once by MKL and kept
(CompileOptions.prepack_weights, runtime/weight_copies.py): eager's result within fp32
tolerance on every call, the same bits on every call, and eager's result after every kind of
weight update between calls (the packed weight is packed again)."""
import pytest
import torch
import torch.nn as nn

from conftest import check_fallbacks, clear_reports

from ember.runtime import weight_copies

pytestmark = pytest.mark.skipif(weight_copies._MKL is None, reason="no MKL packed GEMM")


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 48), nn.ReLU(),
                         nn.Linear(48, 32)).eval()


def _compile(m, **options):
    torch._dynamo.reset()
    clear_reports()
    return torch.compile(m, backend="ember", options={"target": "cpu", **options})


def _x():
    return torch.randn(96, 64, generator=torch.Generator().manual_seed(1))


def _stats():
    return dict(weight_copies.stats)


def _delta(before):
    return {k: weight_copies.stats[k] - before[k] for k in before}


def _same_bits(a, b):
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_packed_weights_from_the_first_call():
    """Every call reads the packed weights (packed at the first): the same bits on every
    call, within fp32 tolerance of eager and of prepack_weights=False."""
    m, x = _mlp(), _x()
    with torch.no_grad():
        ref = m(x)
        plain = _compile(m, prepack_weights=False)(x)
        assert _delta(_stats()) == {k: 0 for k in weight_copies.stats}
        c = _compile(m)
        before = _stats()
        outs = [c(x) for _ in range(3)]
    check_fallbacks()
    d = _delta(before)
    assert d["packs"] == 3, d           # the three weights, once each
    assert d["reads"] == 9, d           # every matmul of every call
    assert d["probe_drops"] == 0, d
    for o in outs:
        assert _same_bits(o, outs[0])
        torch.testing.assert_close(o, ref, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(o, plain, rtol=1e-5, atol=1e-6)


def test_packed_gemm_is_mkls_linear():
    """The runtime's packed GEMM is Inductor's freezing's `mkl::_mkl_linear` bit for bit
    (the same MKL packing and compute), with and without a bias."""
    g = torch.Generator().manual_seed(0)
    for k, n in ((64, 256), (2048, 96)):
        x, w, b = torch.randn(40, k, generator=g), nn.Parameter(torch.randn(n, k, generator=g)), \
            torch.randn(n, generator=g)
        pk = torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), 40)
        for bias in (None, b):
            out = torch.empty(40, n)
            run = weight_copies.reading_packed(lambda ins, outs: 1 / 0, 1 if bias is None else 2,
                                               bias=bias is not None)
            run([x, w] if bias is None else [bias, x, w], [out])
            assert _same_bits(out, torch.ops.mkl._mkl_linear(x, pk, w.detach(), bias, 40))


def test_option_off_packs_nothing():
    m, x = _mlp(), _x()
    before = _stats()
    with torch.no_grad():
        c = _compile(m, prepack_weights=False)
        for _ in range(3):
            c(x)
    assert _delta(before)["packs"] == 0 and _delta(before)["reads"] == 0


def test_encoder_layer_weights_added_to_in_place():
    """cpu_bench's encoder layer (small): its four Linear weights packed; `w.add_(1)` under
    no_grad (the version counter) and a `.data` write (the probe) between calls: the next call
    gives eager's result for the new weights."""
    torch.manual_seed(0)
    m = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation="gelu",
                                   batch_first=True).eval()
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(2))
    c = _compile(m)
    before = _stats()
    with torch.no_grad():
        for _ in range(2):
            out = c(x)
        torch.testing.assert_close(out, m(x), rtol=1e-4, atol=1e-5)
        d = _delta(before)
        assert d["packs"] == 4 and d["reads"] == 8, d
        m.linear1.weight.add_(1)
        m.self_attn.in_proj_weight.mul_(0.5)
        out = c(x)
        torch.testing.assert_close(out, m(x), rtol=1e-4, atol=1e-5)
        m.linear2.weight.data.mul_(-2.0)       # no version bump: the probe sees it
        out = c(x)
        torch.testing.assert_close(out, m(x), rtol=1e-4, atol=1e-5)
    check_fallbacks()
    d = _delta(before)
    assert d["packs"] == 4 + 2 + 1 and d["probe_drops"] == 1, d


@pytest.mark.parametrize("update", ["no_grad_add_", "optimizer_step", "data_mul_", "data_assign",
                                    "copy_"])
def test_weight_updated_between_calls(update):
    """Each kind of in-place update (the version counter's, and `.data`'s, which bypasses it)
    between calls: the next call gives eager's result for the new weights."""
    m, x = _mlp(), _x()
    c = _compile(m)
    lin = m[0]
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    before = _stats()
    for step in range(3):
        with torch.no_grad():
            for _ in range(3):      # packed, then read
                out = c(x)
            torch.testing.assert_close(out, m(x), rtol=1e-4, atol=1e-5)
        if update == "no_grad_add_":
            with torch.no_grad():
                lin.weight.add_(0.25)
        elif update == "optimizer_step":
            for p in m.parameters():
                p.grad = torch.full_like(p, 0.1)
            opt.step()
        elif update == "data_mul_":       # no version bump: the probe sees it
            lin.weight.data.mul_(-1.5)
        elif update == "data_assign":     # a new tensor: another data pointer
            lin.weight.data = torch.randn_like(lin.weight)
        else:
            with torch.no_grad():
                lin.weight.copy_(torch.randn_like(lin.weight))
        with torch.no_grad():
            ref = m(x)
            out = c(x)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    check_fallbacks()
    d = _delta(before)
    assert d["packs"] >= 3 + 2 and d["reads"] > 0, d       # and again after an update
    assert (d["probe_drops"] > 0) == (update == "data_mul_"), d


def test_training_graphs_pack_nothing():
    """A training step's forward reads weights that change every step: nothing packed."""
    m, x = _mlp().train(), _x()
    c = _compile(m)
    before = _stats()
    for _ in range(3):
        c(x).square().mean().backward()
    check_fallbacks()
    assert _delta(before)["packs"] == 0


def test_plain_tensor_weights_are_not_packed():
    """Only parameters: a weight passed as an argument may be any tensor (an arena buffer of
    another program, rewritten behind its version counter)."""
    w = torch.randn(32, 64)

    def fn(x, w):
        return torch.relu(x @ w.t())

    x = _x()
    before = _stats()
    with torch.no_grad():
        c = _compile(fn)
        for _ in range(3):
            out = c(x, w)
    check_fallbacks()
    assert _delta(before)["packs"] == 0
    torch.testing.assert_close(out, fn(x, w))


def test_bf16_weights_are_not_packed():
    m, x = _mlp().to(torch.bfloat16), _x().to(torch.bfloat16)
    before = _stats()
    with torch.no_grad():
        c = _compile(m)
        for _ in range(3):
            out = c(x)
        ref = m(x)
    check_fallbacks()
    assert _delta(before)["packs"] == 0
    assert torch.equal(out, ref)


def test_probe_drop_and_budget(monkeypatch):
    """The runtime alone: packed on first sight, again for another row count or thread count;
    a `.data` write drops the packed weight; a spent budget packs none."""
    w = nn.Parameter(torch.randn(8, 16))
    p = weight_copies.packed(w, 4)
    assert p is not None and weight_copies.packed(w, 4) is p
    assert weight_copies.packed(w, 5) is not p
    threads = torch.get_num_threads()
    try:                                                 # MKL's plan: packed again
        torch.set_num_threads(1 if threads > 1 else 2)
        before = _stats()
        assert weight_copies.packed(w, 5) is not None and _delta(before)["packs"] == 1
    finally:
        torch.set_num_threads(threads)
    before = _stats()
    w.data[-1].mul_(2.0)                                 # the last row, behind the counter
    assert weight_copies.packed(w, 5) is not None
    assert _delta(before) == {"packs": 1, "reads": 0, "probe_drops": 1}
    monkeypatch.setattr(weight_copies, "BUDGET_BYTES", weight_copies.live_bytes())
    v = nn.Parameter(torch.randn(8, 16))
    assert weight_copies.packed(v, 4) is None           # over the budget


def test_dynamic_rows():
    """Under dynamic shapes the rows change from call to call: each call packs for its row
    count where the last call had another, and gives eager's result."""
    m = _mlp()
    xs = [torch.randn(n, 64, generator=torch.Generator().manual_seed(n)) for n in (96, 40, 96, 40, 7)]
    with torch.no_grad():
        before = _stats()
        torch._dynamo.reset()
        clear_reports()
        c = torch.compile(m, backend="ember", dynamic=True, options={"target": "cpu"})
        outs = [c(x) for x in xs + xs]
    check_fallbacks()
    d = _delta(before)
    assert d["packs"] >= 3 and d["reads"] > 0, d
    for o, x in zip(outs, xs + xs):
        torch.testing.assert_close(o, m(x), rtol=1e-4, atol=1e-5)
