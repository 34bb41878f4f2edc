"""The host path of a compiled inference graph's calls (frontend/backend.py).

AOTAutograd wraps every graph in runtime wrappers (input mutations, aliased outputs, effect
tokens, autocast, grad mode). Where its metadata says they have nothing to do, calls after the
first go to ember's graph directly, with grad mode off as the wrappers would set it; every
other graph keeps them, and both give eager's results and eager's aliasing."""
import pytest
import torch

from test_fallback import _compile_spied, _returned_callables


def _calls(monkeypatch, fn, *args, calls=3):
    """(the compiled fn's outputs on each call, eager's on copies of the arguments, the
    callable Dynamo calls for the graph after the calls)."""
    seen = _returned_callables(monkeypatch)
    cf = _compile_spied(fn)
    outs = [cf(*args) for _ in range(calls)]
    (_, _, run), = seen
    return outs, fn(*[a.clone() for a in args]), run.ember_state["fn"]


def _spy_graph_calls(monkeypatch):
    """How often ember's graphs are called, and with which grad mode."""
    from ember.frontend.compile import EmberGraph
    modes, real = [], EmberGraph.__call__

    def spy(self, *args):
        modes.append(torch.is_grad_enabled())
        return real(self, *args)
    monkeypatch.setattr(EmberGraph, "__call__", spy)
    return modes


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad_enabled"])
def test_plain_inference_graph_skips_aot_wrappers(grad, monkeypatch):
    # no input requires grad: an inference graph, whose wrappers only turn grad mode off
    modes = _spy_graph_calls(monkeypatch)
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    with torch.set_grad_enabled(grad):
        outs, ref, call = _calls(monkeypatch, lambda x, w: (torch.tanh(x @ w) * 2, x.sum(1)),
                                 x, w)
        assert torch.is_grad_enabled() == grad      # restored after each call
    assert call.__name__ == "direct", call
    for out in outs:
        for o, r in zip(out, ref):
            torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-6)
            assert not o.requires_grad
    assert modes == [False] * 3     # the graph runs with grad off, as under the wrappers
    from ember import last_reports
    assert [r["status"] for r in last_reports()] == ["compiled"]    # no eager fallback


def _mutates(x):
    x.add_(1)
    return x * 2


def _returns_view(x):
    return x.view(-1)[:3], (x + 1).t()


def _returns_input(x):
    return x, x.sin()


def _two_views_of_one(x):
    y = x.cos()
    return y, y.view(-1)


@pytest.mark.parametrize("fn,direct", [(_mutates, False), (_returns_view, False),
                                       (_returns_input, True), (_two_views_of_one, True)],
                         ids=["mutation", "view_of_input", "input", "view_of_output"])
def test_aliasing_and_mutation_as_eager(fn, direct, monkeypatch):
    # A mutated input or an output that is a view of an input: the wrappers write the mutation
    # back and rebuild the view, so calls keep going through them. An input returned as it
    # is (Dynamo returns it itself) and a view of another output (no aliasing to rebuild
    # without autograd: AOTAutograd's metadata calls it no alias) take the direct path.
    x = torch.randn(4, 6)
    xc = x.clone()
    with torch.no_grad():
        outs, ref, call = _calls(monkeypatch, fn, x, calls=2)
        fn(xc)
        fn(xc)      # eager after the same two calls
    assert (call.__name__ == "direct") == direct, call
    torch.testing.assert_close(x, xc, rtol=0, atol=0)    # mutated as often as eager's
    got, want = outs[-1], fn(xc)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for o, r in zip(got, want):
        assert o.shape == r.shape and o.stride() == r.stride()
        if fn is not _mutates:
            torch.testing.assert_close(o, r, rtol=1e-6, atol=1e-6)
    if fn is _returns_view:
        assert outs[-1][0]._base is x or outs[-1][0].data_ptr() == x.data_ptr()
        outs[-1][0].fill_(7.0)      # a view of the input: the write shows in x
        assert (x.view(-1)[:3] == 7.0).all()
    if fn is _returns_input:
        assert outs[-1][0] is x
    if fn is _two_views_of_one:
        assert outs[-1][1].data_ptr() == outs[-1][0].data_ptr()


def test_autocast_graph_keeps_wrappers(monkeypatch):
    # compiled under autocast: the wrappers turn autocast off around ember's program
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        outs, ref, call = _calls(monkeypatch, lambda x, w: torch.relu(x @ w), x, w)
    assert call.__name__ != "direct", call
    torch.testing.assert_close(outs[-1], ref, rtol=0, atol=0)


def test_module_inference_skips_wrappers(monkeypatch):
    # a module's parameters and buffers are Dynamo's inputs: the direct path applies, and
    # the outputs are eager's
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32),
                                torch.nn.GELU(), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        outs, ref, call = _calls(monkeypatch, model, x)
    assert call.__name__ == "direct", call
    torch.testing.assert_close(outs[-1], ref, rtol=1e-5, atol=1e-6)
    from ember import last_reports
    assert not any(r.get("eager_fallback_ops") for r in last_reports())
