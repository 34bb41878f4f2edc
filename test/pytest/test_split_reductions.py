"""ember-split-reductions on the GPU path: long reductions with few results (bias gradients,
rows of 64k, whole-tensor sums) split into partial reductions and a final one; results match
eager (sum, mean, amax, bf16 sums that keep f32 partials), forward and backward, nothing runs
eagerly, and the report shows the split (one more reduction kernel than unsplit)."""
import pytest
import torch

from conftest import assert_close, check_fallbacks, ember_compile

import ember


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _sums(report) -> int:
    """Kernels of the report that reduce (the split adds one)."""
    return sum(1 for g in report["fused_groups"] if any(n in ("sum", "amax", "mean", "max")
                                                      for n in g))


CASES = {
    # name: (fn, args, reduction kernels when split)
    "column_sum_of_product": (lambda x, y: (x * y + 1).sum(0), (_randn(4096, 64), _randn(4096, 64, seed=1)), 2),
    "column_sum_and_product": (lambda x, y: ((x * y).sum(0), x * y), (_randn(4096, 64), _randn(4096, 64, seed=1)), 2),
    # amax imports as a max-with-index generic (two results): not split (yet), still exact
    "column_amax": (lambda x: x.amax(0), (_randn(4096, 64),), 1),
    "few_long_rows": (lambda x: x.sum(-1), (_randn(8, 65536),), 2),
    "whole_tensor": (lambda x: x.sum(), (_randn(1024, 1024),), 2),
    "bf16_column_sum": (lambda x: x.sum(0), (_randn(4096, 64, dtype=torch.bfloat16),), 2),
    # 2401 = 7^4 rows (swin_t's relative positions): no power of two divides it, 7 does
    "odd_extent_column_sum": (lambda x: (x * 2).sum(0), (_randn(2401, 128),), 2),
    "mean_over_two_dims": (lambda x: x.mean((0, 1)), (_randn(16, 512, 64),), 2),
    # a channels-last batch-norm statistic: the batch split whole, then H; one final reduction
    "channels_last_channel_sum": (lambda x: x.sum((0, 1, 2)), (_randn(16, 32, 32, 64),), 2),
    "channels_last_bf16_channel_sum": (lambda x: x.sum((0, 1, 2)),
                                       (_randn(16, 32, 32, 64, dtype=torch.bfloat16),), 2),
}


@pytest.mark.targets("triton", "cuda")
@pytest.mark.parametrize("name", sorted(CASES))
def test_split_reduction_matches_eager(name, target, device):
    fn, args, kernels = CASES[name]
    args = [a.to(device) for a in args]
    out = ember_compile(fn, target)(*args)
    assert_close(out, fn(*args))
    check_fallbacks()
    (report,) = ember.last_reports()
    assert _sums(report) == kernels, report["fused_groups"]


@pytest.mark.targets("triton", "cuda")
def test_bias_gradient_split_forward_and_backward(target, device):
    """A linear layer's backward: the bias gradient is a column sum over every token."""
    lin = torch.nn.Linear(64, 32).to(device)
    x = _randn(8192, 64).to(device)
    ref_lin = torch.nn.Linear(64, 32).to(device)
    ref_lin.load_state_dict(lin.state_dict())
    f = ember_compile(lambda t: torch.nn.functional.gelu(lin(t)).square().mean(), target)
    f(x).backward()
    torch.nn.functional.gelu(ref_lin(x)).square().mean().backward()
    assert_close(lin.bias.grad, ref_lin.bias.grad)
    assert_close(lin.weight.grad, ref_lin.weight.grad)
    check_fallbacks()
    backward = [r for r in ember.last_reports() if "backward" in r["graph_id"]]
    assert backward and _sums(backward[-1]) >= 2, [r["fused_groups"] for r in backward]


def _gelu_backward_and_bias_gradient(g, h, w):
    """A GELU's backward (a pointwise product over every token) that the next matmul reads
    and whose column sum is the previous layer's bias gradient (GPT-2's MLP backward)."""
    d = g * torch.sigmoid(1.702 * h)
    return d @ w, d.sum(0)


@pytest.mark.targets("triton", "cuda")
def test_split_column_sum_computes_its_producer_that_a_matmul_reads(target, device):
    """The product is computed by the kernel of the split sum's partials, which stores it (in
    the partials' [S, R/S, C] indexing; the matmul reads it through a collapse_shape view):
    2 kernels, the partials and the total. Before, 3: the product was a kernel of its own,
    since a result of another shape than the partials' outer space (fusion_legality.
    expanded_results, ember_fuse's retry of a producer refused by a view)."""
    args = [_randn(1024, 256).to(device), _randn(1024, 256, seed=1).to(device),
            _randn(256, 32, seed=2).to(device)]
    out = ember_compile(_gelu_backward_and_bias_gradient, target)(*args)
    assert_close(out, _gelu_backward_and_bias_gradient(*args), matmul=True)
    check_fallbacks()
    (report,) = ember.last_reports()
    assert report["num_kernels"] == 2, report["fused_groups"]
    assert _sums(report) == 2, report["fused_groups"]


@pytest.mark.targets("cpu")
def test_cpu_target_does_not_split(target):
    """The C++ path splits rows across threads in its code generator: one reduction kernel."""
    x = _randn(4096, 64)
    out = ember_compile(lambda t: t.sum(0), target)(x)
    assert_close(out, x.sum(0))
    (report,) = ember.last_reports()
    assert _sums(report) == 1, report["fused_groups"]


@pytest.mark.targets("triton")
def test_a_graph_the_split_breaks_compiles_unsplit(target, monkeypatch):
    """If the split leaves a graph the lowering refuses, it compiles unsplit (no eager run)
    and the report says why."""
    from ember.passes import ember_split_reductions as mod

    def broken(self, module):
        raise mod.PassError("ember-split-reductions: injected failure")
    monkeypatch.setattr(mod.EmberSplitReductions, "run", broken)
    x = _randn(4096, 64)
    with pytest.warns(UserWarning, match="ember: ember-split-reductions left this graph"):
        out = ember_compile(lambda t: t.sum(0), target)(x)
    assert_close(out, x.sum(0))
    check_fallbacks(split_off=True)
    (report,) = ember.last_reports()
    assert "injected failure" in report["split_reductions_off"]
    assert _sums(report) == 1, report["fused_groups"]


@pytest.mark.targets("triton")
@pytest.mark.filterwarnings("ignore:ember. ember-split-reductions left this graph:UserWarning")
def test_a_warm_start_remembers_that_the_split_failed(target, monkeypatch, tmp_path):
    """The failing split's verdict is kept in the program cache: a warm start (a fresh Dynamo,
    the same cache) runs no pass of the split pipeline again and takes the unsplit program
    from the cache, with the same report; the cold compile's failed attempt is timed as
    `split_retry`."""
    from ember.frontend import compile_module
    from ember.passes import ember_split_reductions as mod
    runs, compiles = [], []
    real = compile_module._compile_module

    def broken(self, module):
        runs.append(1)
        raise mod.PassError("ember-split-reductions: injected failure")

    def counted(*args, **kwargs):
        compiles.append(args[1])
        return real(*args, **kwargs)
    monkeypatch.setattr(mod.EmberSplitReductions, "run", broken)
    monkeypatch.setattr(compile_module, "_compile_module", counted)
    x = _randn(4096, 64)
    options = {"target": target, "cache_dir": str(tmp_path), "program_cache": True}
    reports = []
    for _ in range(2):
        torch._dynamo.reset()
        ember.clear_reports()
        out = torch.compile(lambda t: t.sum(0), backend="ember", options=options)(x)
        assert_close(out, x.sum(0))
        (report,) = ember.last_reports()
        reports.append(report)
    cold, warm = reports
    assert len(runs) == 1 and len(compiles) == 2, (runs, compiles)
    assert "ember-split-reductions" in compiles[0] and "ember-split-reductions" not in compiles[1]
    assert cold["program_cache"] == "miss" and warm["program_cache"] == "hit"
    assert warm["split_reductions_off"] == cold["split_reductions_off"]
    assert "injected failure" in warm["split_reductions_off"]
    assert cold["stage_seconds"]["split_retry"] > 0
    assert "ember-fuse" in cold["stage_seconds"] and "ember-fuse" not in warm["stage_seconds"]
