"""Dynamic shapes (issue 8, item 4): `torch.compile(dynamic=True)` and Dynamo's automatic dynamic
give one compiled graph with symbolic sizes (frontend/symbolic.py); three sizes in a row compile
once (Dynamo's counters and ember's reports), match eager, and run nothing eagerly. What ember
cannot compile symbolically compiles per input shape, with one warning, never a wrong answer."""
import warnings

import pytest
import torch
import torch.nn as nn
from torch._dynamo.utils import counters

import ember

from conftest import check_fallbacks, clear_reports


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _run(fn, target, make, sizes=(3, 5, 9), dynamic=True, train=False, tol=1e-4):
    """Compiles `fn`, calls it on `make(n)` for each n, checks against eager (outputs, and input
    and parameter gradients with `train`); returns the compile reports."""
    counters.clear()
    clear_reports()
    cf = torch.compile(fn, backend="ember", options={"target": target}, dynamic=dynamic)
    params = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    for n in sizes:
        args = make(n)
        if not train:
            with torch.no_grad():
                out, ref = cf(*args), fn(*args)
            assert out.shape == ref.shape and rel_err(out, ref) < tol, n
            continue
        grads = []
        for f in (cf, fn):
            xs = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
            for p in params:
                p.grad = None
            out = f(*xs)
            (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
            grads.append([out] + [x.grad for x in xs if x.grad is not None]
                         + [p.grad.clone() for p in params])
        for got, want in zip(*grads):
            assert got.shape == want.shape and rel_err(got, want) < tol, n
    return list(ember.last_reports())


def _one_symbolic_compile(reports, graphs=1):
    assert counters["stats"]["unique_graphs"] == graphs
    symbolic = [r for r in reports if r.get("symbolic")]
    assert symbolic and len(reports) == len(symbolic), [
        (r["graph_id"], r.get("symbolic"), r["input_shapes"]) for r in reports]
    assert any(isinstance(d, str) for r in symbolic for s in r["input_shapes"] for d in s)
    check_fallbacks()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 16), nn.LayerNorm(16))

    def forward(self, x):
        return torch.softmax(self.net(x), -1)


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_mlp_dynamic_batch(target, train):
    torch.manual_seed(0)
    reports = _run(MLP(), target, lambda n: (torch.randn(n, 8),), train=train, tol=1e-3)
    _one_symbolic_compile(reports)
    # matmuls are library calls taking the run-time sizes; the rest is fused kernels
    fwd = reports[0]
    assert fwd["num_externs"] >= 2 and fwd["num_kernels"] >= 1


def test_automatic_dynamic(target):
    """dynamic=None: the first size compiles static, the second recompiles with symbols, the
    third compiles nothing."""
    torch.manual_seed(0)
    counters.clear()
    clear_reports()
    m = MLP()
    cf = torch.compile(m, backend="ember", options={"target": target})
    seen = []
    with torch.no_grad():
        for n in (3, 5, 9):
            x = torch.randn(n, 8)
            assert rel_err(cf(x), m(x)) < 1e-3
            seen.append((counters["stats"]["unique_graphs"], len(ember.last_reports())))
    assert seen == [(1, 1), (2, 2), (2, 2)]
    assert [bool(r.get("symbolic")) for r in ember.last_reports()] == [False, True]
    check_fallbacks()


@pytest.mark.parametrize("case", ["pointwise_reduce", "mean_all", "view_minus_one", "bmm",
                                  "two_symbols", "output_view"])
def test_pointwise_reduction_views(target, case):
    torch.manual_seed(0)
    fns = {
        # a reduction over a dynamic dim, a broadcast of its result
        "pointwise_reduce": (lambda x, b: torch.tanh(x * 2 + b).sum(0) / x.amax(),
                             lambda n: (torch.randn(n, 16), torch.randn(16))),
        # mean divides by a symbolic count: a scalar kernel argument
        "mean_all": (lambda x: x - x.mean(), lambda n: (torch.randn(n, 7),)),
        # -1 inferred from symbolic sizes: a host reshape with sizes computed at run time
        "view_minus_one": (lambda x: (x.reshape(-1, 4) * 2).sum(1),
                           lambda n: (torch.randn(n, 8),)),
        "bmm": (lambda a, b: torch.relu(a @ b) + 1,
                lambda n: (torch.randn(2, n, 8), torch.randn(2, 8, n))),
        "two_symbols": (lambda x: torch.softmax(x, -1).transpose(0, 1).contiguous() * 3,
                        lambda n: (torch.randn(n, n + 2),)),
        # an output that is a view of a computed value, its sizes symbolic: rebuilt per call
        "output_view": (lambda x: (x * 2).unsqueeze(0).expand(3, -1, -1),
                        lambda n: (torch.randn(n, 4),)),
    }
    fn, make = fns[case]
    _one_symbolic_compile(_run(fn, target, make))


def test_transformer_encoder_training(target):
    """A BERT-style encoder block from torch.nn, dynamic batch and sequence length, forward and
    backward: two symbolic graphs, compiled once for three shapes."""
    torch.manual_seed(0)
    enc = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    reports = _run(enc, target, lambda n: (torch.randn(n, n + 1, 16),), sizes=(2, 3, 4),
                   train=True, tol=1e-3)
    _one_symbolic_compile(reports)
    assert len(reports) == 2     # forward and backward, once each


@pytest.mark.targets("cpu")
def test_no_symbolic_compile_falls_back_per_shape(target, monkeypatch):
    """What the symbolic compile cannot do compiles each shape, with one warning, correctly."""
    from ember.frontend import symbolic

    def refuse(*a, **k):
        raise symbolic.NotSymbolic("test")
    monkeypatch.setattr(symbolic, "_compile", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reports = _run(lambda x: torch.tanh(x) * 2, target, lambda n: (torch.randn(n, 4),))
    assert [r.get("symbolic", False) for r in reports] == [False] * 3
    msgs = [str(w.message) for w in caught if "compiled for each input shape" in str(w.message)]
    assert len(msgs) == 1
    check_fallbacks()


@pytest.mark.targets("cpu")
def test_bert_training_dynamic_batch_and_sequence(target):
    """transformers' BertModel (a small config), dynamic batch and sequence length, forward and
    backward: one symbolic forward and one symbolic backward for three shapes."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    try:
        from common import import_torchvision
        import_torchvision()        # transformers imports it; its extension may not load here
    except Exception:
        pass
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=64, vocab_size=100,
                                  max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    model = transformers.BertModel(cfg)

    class LastHidden(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = model

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    m = LastHidden()
    counters.clear()
    clear_reports()
    cm = torch.compile(m, backend="ember", options={"target": target}, dynamic=True)
    for b, t in ((2, 8), (3, 11), (4, 5)):
        ids = torch.randint(0, 100, (b, t))
        grads = []
        for f in (cm, m):
            m.zero_grad()
            out = f(ids)
            (out * torch.sin(torch.arange(out.numel()).view(out.shape).float())).sum().backward()
            # every gradient eager computes, as one vector (a key bias's is ~1e-10: noise)
            g = torch.cat([p.grad.flatten() for n, p in sorted(model.named_parameters())
                           if not n.startswith("pooler")])
            grads.append((out, g))
        assert rel_err(grads[0][0], grads[1][0]) < 1e-4 and rel_err(grads[0][1], grads[1][1]) < 1e-3
    _one_symbolic_compile(list(ember.last_reports()))
