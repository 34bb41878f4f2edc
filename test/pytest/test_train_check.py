"""The model zoo's training check (benchmarks/train_check.py, model_zoo._opt_err): an ember bf16
step of a BatchNorm CNN passes it, and it fails when one thing in a correct step is wrong: a
gradient 20% or 2% off, a running statistic not updated or updated with another momentum, a
batch mean off by 9% of the channel's deviation, the loss 2% off, a counter not incremented, a
NaN, a missing gradient, an optimizer step with another learning rate or without weight decay."""
import copy

import pytest
import torch
import torch.nn.functional as F

from ember.benchmarks import model_zoo, train_check
from ember.benchmarks.models import build

from conftest import check_fallbacks, ember_compile


@pytest.fixture(scope="module")
def cnn():
    base, (x,), _ = build("cnn", "cpu", small=True)        # conv-BN-ReLU, two residual blocks
    labels = torch.randint(0, 10, (x.shape[0],), generator=torch.Generator().manual_seed(1))
    return base, x, labels


def _step(cnn, dtype=torch.float32, bf16=True, target=None, channels_last=False):
    base, x, labels = cnn
    model, x = copy.deepcopy(base).to(dtype).train(), x.to(dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    fwd = ember_compile(model, target) if target else model
    before = train_check.snapshot(model)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = fwd(x)
        loss = F.cross_entropy(out.to(torch.promote_types(out.dtype, torch.float32)), labels)
    loss.backward()
    return train_check.capture(model, before, loss, out)


@pytest.fixture(scope="module")
def steps(cnn):
    """eager bf16, float64, and another correct bf16 step (eager, channels-last)."""
    return (_step(cnn), _step(cnn, torch.float64, bf16=False), _step(cnn, channels_last=True))


def test_ember_bf16_step_passes(cnn, steps, target):
    eager, ref64, _ = steps
    got = _step(cnn, target=target)
    check_fallbacks()
    res = train_check.compare(got, eager, ref64, tol=1e-2)
    assert res["ok"], [r for r in res["rows"] if not r["ok"]]
    # every gradient, BatchNorm's batch mean and variance and counter, the loss and the output
    names = {r["name"].split(":")[0] for r in res["rows"]}
    assert names == {"loss", "out", "grad", "bn-mean", "bn-var", "int"}, names
    assert res["n"] == 2 + 20 + 6 * 3


def _perturbed(got, name, fn):
    got = dict(got)
    got[name] = fn(got[name])
    return got


@pytest.mark.parametrize("name,fn", [
    ("grad:stem.0.weight", lambda g: 1.2 * g),          # eager's own error here: 0.1 of fp64's
    ("grad:fc.weight", lambda g: 1.02 * g),
    ("grad:fc.bias", lambda g: torch.where(torch.arange(g.numel()) == 0, float("nan"), g)),
    ("grad:block2.0.weight", lambda g: None),
    ("bn-var:block1.4", torch.ones_like),               # running_var left as it was (1)
    ("bn-mean:down.1", lambda m: 2 * m),                # momentum 0.2 instead of 0.1
    ("bn-mean:stem.1", lambda m: m + 0.05),             # 9% of the channel's deviation (0.56)
    ("bn-var:block2.4", lambda v: v * 0.98),
    ("loss", lambda v: v * 1.02),
    ("int:block2.1.num_batches_tracked", lambda n: n - 1),
])
def test_check_fails_on_a_wrong_step(steps, name, fn):
    eager, ref64, other = steps
    assert train_check.compare(other, eager, ref64, tol=1e-2)["ok"]     # correct: passes
    res = train_check.compare(_perturbed(other, name, fn), eager, ref64, tol=1e-2)
    assert not res["ok"] and res["failed"] == [name], res["failed"]


def test_zero_in_exact_arithmetic_is_not_an_error(steps):
    """The batch mean after a convolution of zero-mean inputs is ~1e-17 in float64; compared
    relatively it was the 7.9e3 of mobilenet's old row. In units of the channel's deviation it
    is as close as any other statistic."""
    eager, ref64, other = steps
    for name in ("bn-mean:block1.4", "bn-mean:block2.4"):
        assert train_check._err(eager[name], ref64[name], train_check._scale(name, ref64)) < 1e-2


def _opt_record(lr=1e-4, weight_decay=1e-2):
    torch.manual_seed(0)
    params = [torch.randn(64, 32), torch.ones(32), torch.zeros(32)]
    grads = [torch.randn_like(p) * 1e-2 for p in params]
    ps = [p.clone().requires_grad_(True) for p in params]
    for p, g in zip(ps, grads):
        p.grad = g.clone()
    torch.optim.AdamW(ps, lr=lr, weight_decay=weight_decay).step()
    record = {"params": params, "grads": grads, "after": [p.detach() for p in ps]}
    opt = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=1e-4, weight_decay=1e-2)
    return record, opt


def test_optimizer_check():
    rel, over = model_zoo._opt_err(*_opt_record())
    assert rel == 0 and over == 0
    assert model_zoo._opt_err(*_opt_record(lr=1.01e-4))[1] > 1
    assert model_zoo._opt_err(*_opt_record(weight_decay=0.0))[1] > 1


def test_chaotic_quantities_are_unverified_not_passed(steps):
    """A quantity whose eager bf16 value is >= 0.5 from float64's cannot be checked in bf16: it
    is counted as unverified (not failed) when within 5x eager's error, and fails beyond."""
    eager, ref64, other = steps
    name = "grad:block1.0.weight"
    noisy = dict(ref64)         # make eager's own error on one gradient 0.8
    noisy[name] = eager[name] + 0.8 * eager[name].norm() * torch.nn.functional.normalize(
        torch.randn(eager[name].shape, generator=torch.Generator().manual_seed(3), dtype=
                    torch.float64).flatten(), dim=0).reshape(eager[name].shape)
    wrong = _perturbed(other, name, lambda g: 1.3 * g)
    res = train_check.compare(wrong, eager, noisy, tol=1e-2)
    assert res["ok"] and res["unverified"] == 1
    res = train_check.compare(_perturbed(other, name, lambda g: 10 * g), eager, noisy, tol=1e-2)
    assert not res["ok"] and res["failed"] == [name]


def test_no_gradient_equals_a_zero_gradient():
    """Eager leaves the gradient of a parameter behind an unused output None, a compiled step
    (AOTAutograd, any backend) gives zeros: the same value. A nonzero one is not."""
    z = torch.zeros(3, dtype=torch.float64)
    assert train_check._err(z, None) == 0 and train_check._err(None, z) == 0
    assert train_check._err(z + 1, None) == float("inf")


def test_eager_spread_over_perturbed_steps(steps):
    """One eager sample can miss a ReLU mask that any other rounding flips: its distance from
    float64 is the largest over eager and the `others` (eager steps with the parameters moved
    by an ulp). A step as far off as one of those passes; one further off still fails."""
    eager, ref64, other = steps
    name = "grad:fc.weight"
    flipped = _perturbed(other, name, lambda g: 1.05 * g)     # as a flipped mask might
    assert not train_check.compare(flipped, eager, ref64, tol=1e-2)["ok"]
    assert train_check.compare(flipped, eager, ref64, tol=1e-2, others=[flipped])["ok"]
    worse = _perturbed(other, name, lambda g: 1.2 * g)
    assert not train_check.compare(worse, eager, ref64, tol=1e-2, others=[flipped])["ok"]
