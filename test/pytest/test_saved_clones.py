"""frontend/saved_clones.py on traced graphs (no compile): which contiguous clones of a
transposed tensor are rewritten to be written in the tensor's own order."""
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from ember.frontend.saved_clones import keep_clone_layouts

aten = torch.ops.aten


def _trace(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def _clones(gm):
    return [n for n in gm.graph.nodes if n.target is aten.clone.default]


def test_saved_transposed_view_becomes_contiguous():
    """bmm's operand view(clone(k^T)), saved transposed back (what AOTAutograd saves for the
    backward): the clone reads k in its order, the saved view comes out contiguous."""
    def fn(k):
        kt = k.transpose(-2, -1).clone(memory_format=torch.contiguous_format)
        v = kt.view(8, 32, 49)
        return v.sum(), v.permute(0, 2, 1)

    gm = _trace(fn, torch.randn(4, 2, 49, 32))
    strides = keep_clone_layouts(gm, range(1, 2))
    assert strides == [None, (1568, 32, 1)]
    (clone,) = _clones(gm)
    assert clone.args[0].target is aten.permute.default      # transposed back: k's order
    assert clone.meta["val"].is_contiguous()
    k = torch.randn(4, 2, 49, 32)
    out, saved = gm(k)
    assert torch.equal(saved, fn(k)[1]) and saved.is_contiguous()


def test_clone_saved_itself_or_visible_left_alone():
    """A clone saved as it is would reach the backward strided (and be copied there); one a
    user-visible output views keeps eager's layout: neither is rewritten."""
    def saved_itself(k):
        kt = k.transpose(-2, -1).clone(memory_format=torch.contiguous_format)
        return kt.sum(), kt

    def visible(k):
        kt = k.transpose(-2, -1).clone(memory_format=torch.contiguous_format)
        return kt.view(8, 32, 49), kt.view(8, 32, 49).permute(0, 2, 1)

    for fn, saved in ((saved_itself, range(1, 2)), (visible, range(1, 2))):
        gm = _trace(fn, torch.randn(4, 2, 49, 32))
        assert keep_clone_layouts(gm, saved) is None
        assert [c.args[0].target for c in _clones(gm)] == [aten.transpose.int]
