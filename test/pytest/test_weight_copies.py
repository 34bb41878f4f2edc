"""CPU inference matmuls read a Linear layer's weight from a kept transposed copy
(CompileOptions.prepack_weights, runtime/weight_copies.py): same bits as the library call
on the weight itself, and eager's result after every kind of weight update between calls."""
import pytest
import torch
import torch.nn as nn

from conftest import check_fallbacks, clear_reports

from ember.runtime import weight_copies


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


def test_copies_give_the_library_calls_bits():
    """Calls 2 and 3 read the copies (the first only notes the weights' versions): their
    output is bit for bit the one with prepack_weights=False, within fp32 tolerance of eager."""
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
    assert d["copies"] == 3, d          # the three weights, once each
    assert d["reads"] >= 3, d           # call 3 read all three (call 2 checked the bits)
    assert d["differ"] == 0 and d["probe_drops"] == 0, d
    for o in outs:
        assert _same_bits(o, plain)
        torch.testing.assert_close(o, ref, rtol=1e-4, atol=1e-5)


def test_option_off_makes_no_copy():
    m, x = _mlp(), _x()
    before = _stats()
    with torch.no_grad():
        c = _compile(m, prepack_weights=False)
        for _ in range(3):
            c(x)
    assert _delta(before)["copies"] == 0


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
            for _ in range(3):      # the copies are made and read
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
    assert d["copies"] >= 3 + 2 and d["reads"] > 0, d     # and again after an update
    assert (d["probe_drops"] > 0) == (update == "data_mul_"), d


def test_training_graphs_make_no_copy():
    """A training step's forward reads weights that change every step: no copy."""
    m, x = _mlp().train(), _x()
    c = _compile(m)
    before = _stats()
    for _ in range(3):
        c(x).square().mean().backward()
    check_fallbacks()
    assert _delta(before)["copies"] == 0


def test_plain_tensor_weights_are_not_copied():
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
    assert _delta(before)["copies"] == 0
    torch.testing.assert_close(out, fn(x, w))


def test_bf16_weights_are_not_copied():
    m, x = _mlp().to(torch.bfloat16), _x().to(torch.bfloat16)
    before = _stats()
    with torch.no_grad():
        c = _compile(m)
        for _ in range(3):
            out = c(x)
        ref = m(x)
    check_fallbacks()
    assert _delta(before)["copies"] == 0
    assert torch.equal(out, ref)


def test_probe_drop_and_budget(monkeypatch):
    """The runtime alone: a `.data` write drops the copy; a spent budget makes none."""
    w = nn.Parameter(torch.randn(8, 16))
    assert weight_copies.transposed(w) is None          # first sight: noted
    wt = weight_copies.transposed(w)
    assert wt is not None and torch.equal(wt, w.t())
    w.data[-1].mul_(2.0)                                 # the last row, behind the counter
    assert weight_copies.transposed(w) is None
    assert torch.equal(weight_copies.transposed(w), w.t())
    monkeypatch.setattr(weight_copies, "BUDGET_BYTES", weight_copies.live_bytes())
    v = nn.Parameter(torch.randn(8, 16))
    assert weight_copies.transposed(v) is None
    assert weight_copies.transposed(v) is None          # over the budget


def test_dynamic_rows():
    """Under dynamic shapes the rows change from call to call: each row count is checked
    bitwise once, and every call's output is the library call's. (MKL computes a few rows
    with another summation order than the transposed copy's: 7 rows of the 256 -> 48 layer on
    the 2-core Xeon, 1-2 rows of most shapes. The check keeps the library call there.)"""
    m = _mlp()
    xs = [torch.randn(n, 64, generator=torch.Generator().manual_seed(n)) for n in (96, 40, 96, 40, 7)]
    with torch.no_grad():
        torch._dynamo.reset()
        plain = torch.compile(m, backend="ember", dynamic=True,
                              options={"target": "cpu", "prepack_weights": False})
        refs = [plain(x) for x in xs]
        before = _stats()
        torch._dynamo.reset()
        clear_reports()
        c = torch.compile(m, backend="ember", dynamic=True, options={"target": "cpu"})
        outs = [c(x) for x in xs + xs]
    check_fallbacks()
    d = _delta(before)
    assert d["copies"] == 3 and d["reads"] > 0, d
    for o, r, x in zip(outs, refs + refs, xs + xs):
        assert _same_bits(o, r)
        torch.testing.assert_close(o, m(x), rtol=1e-4, atol=1e-5)
