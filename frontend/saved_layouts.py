"""A channels-last training step: the forward hands its saved activations to the backward as
channels-last tensors (issue 12).

ember-channels-last computes a convolution network's activations as NHWC buffers. A training
forward returns the activations AOTAutograd saves for the backward; returned in eager's layout
(NCHW for an NCHW model) each would be transposed by a copy kernel, and the backward, reading
NCHW, would hand NCHW tensors to cuDNN, which transforms them around every convolution_backward.
Inductor's layout optimisation returns them channels-last instead; so does ember:

* `lay_out_saved` (forward): the saved outputs that are 4-d activations computed from a
  convolution (not graph inputs, not views, not also a user-visible output) get channels-last
  values in the graph (`meta['val']`), so output_layouts returns them as the NHWC buffer itself
  (a permute of the NCHW value, which ember-channels-last folds away); their strides are
  reported to AOTAutograd (`TracingContext.output_strides`, as Inductor reports its own), which
  gives the backward graph's placeholders those strides.
* `take_input_strides` (backward): the placeholders' values take the strides of the example
  inputs AOTAutograd passes (the forward's real layouts), so the backward is compiled for
  channels-last saved activations (output_layouts.permute_inputs: read as NHWC buffers, no
  copy). A saved tensor that comes in another layout (the forward ran eagerly) is copied by the
  runtime, never misread.

Only for a graph that ember-channels-last lays out with its statistics (`channels_last=True`,
or "auto" on a GPU:
frontend/options.channels_last_training; at least two 2-d convolutions whose layout pays off:
the pass's own test, on the FX graph).
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .options import (CompileOptions, channels_last_f32, channels_last_on, channels_last_training,
                      resolve_target)

aten = torch.ops.aten
_CONV = aten.convolution.default
CHOSEN = "ember_saved_channels_last"     # meta key: the node's layout is chosen here


def _conv_geometry(node: fx.Node, f32: bool = True):
    """(weight shape, result shape, groups) of a 2-d convolution node with static shapes that
    is not transposed (nor f32, unless `f32`), else None."""
    if node.op != "call_function" or node.target is not _CONV:
        return None
    w, out = node.args[1].meta.get("val"), node.meta.get("val")
    transposed = node.args[6] if len(node.args) > 6 else False
    if not isinstance(w, torch.Tensor) or not isinstance(out, torch.Tensor) or transposed:
        return None
    if not f32 and out.dtype == torch.float32:
        return None
    if w.dim() != 4 or out.dim() != 4:
        return None
    shapes = (tuple(w.shape), tuple(out.shape))
    if not all(isinstance(s, int) for shape in shapes for s in shape):
        return None
    return (*shapes, int(node.args[8]) if len(node.args) > 8 else 1)


def conv_network(gm: fx.GraphModule, f32: bool = True) -> bool:
    """Whether ember-channels-last lays this graph out: at least two eligible convolutions
    whose weighted flops do not grow channels-last (passes/ember_channels_last.pays_off);
    f32 ones only with `f32` (the pass's option of that name)."""
    from ..passes.ember_channels_last import pays_off
    geometries = [g for n in gm.graph.nodes if (g := _conv_geometry(n, f32)) is not None]
    return len(geometries) >= 2 and pays_off(geometries)


def applies(gm: fx.GraphModule, options: CompileOptions, inputs) -> bool:
    if options.pipeline:
        return False
    devices = [t.device for t in inputs if isinstance(t, torch.Tensor)]
    target = resolve_target(options.target, devices)
    return channels_last_training(options, target) and \
        channels_last_on(options, target) and \
        conv_network(gm, channels_last_f32(options, target))


def _is_view(node: fx.Node) -> bool:
    target = node.target
    if target is operator.getitem:
        return False
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _channels_last(val: torch.Tensor) -> torch.Tensor:
    from contextlib import nullcontext
    mode = getattr(val, "fake_mode", None)
    with mode if mode is not None else nullcontext():
        return torch.empty_strided(val.shape, _cl_strides(val.shape), dtype=val.dtype,
                                   device=val.device)


def _cl_strides(shape) -> tuple[int, ...]:
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def lay_out_saved(gm: fx.GraphModule, saved: range) -> list | None:
    """Gives the saved 4-d activations computed from a convolution channels-last values;
    returns the strides of every output (None: eager's, unchanged), or None when none changed."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    from_conv: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and (node.target is _CONV or any(
                a in from_conv for a in node.all_input_nodes)):
            from_conv.add(node)
    visible = {o for i, o in enumerate(outs) if i not in saved}
    strides: list = [None] * len(outs)
    done: dict[fx.Node, tuple] = {}
    for i in saved:
        node = outs[i]
        if not isinstance(node, fx.Node) or node.op != "call_function" or node in visible \
                or node not in from_conv or _is_view(node):
            continue
        if node in done:
            strides[i] = done[node]
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dim() != 4 or \
                not all(isinstance(s, int) for s in val.shape) or val.numel() <= 1:
            continue
        if not val.is_contiguous() or val.is_contiguous(memory_format=torch.channels_last):
            continue    # another layout already (or none to choose: C or H*W of one)
        node.meta["val"] = _channels_last(val)
        node.meta[CHOSEN] = True        # not eager's layout, on purpose (decomp_layouts)
        node.meta.pop("tensor_meta", None)
        strides[i] = done[node] = tuple(node.meta["val"].stride())
    return strides if done else None


def report_output_strides(strides: list) -> None:
    """Tells AOTAutograd the forward's output strides (it restrides the backward's example
    inputs by them), as Inductor does for its layout optimisation."""
    from torch._guards import TracingContext
    ctx = TracingContext.try_get()
    if ctx is not None and ctx.output_strides is not None and not ctx.output_strides:
        ctx.output_strides.extend(strides)


def take_input_strides(gm: fx.GraphModule, inputs) -> None:
    """The backward's placeholders take the strides of the example inputs AOTAutograd gives
    (the forward's reported layouts) where they differ from the traced ones."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        return
    for ph, t in zip(placeholders, inputs):
        val = ph.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(t, torch.Tensor) or \
                val.dim() != 4 or t.shape != val.shape:
            continue
        if not all(isinstance(s, int) for s in (*t.stride(), *val.stride())) or \
                tuple(t.stride()) == tuple(val.stride()):
            continue
        if tuple(t.stride()) == _cl_strides(t.shape) and val.is_contiguous():
            ph.meta["val"] = _channels_last(val)
            ph.meta.pop("tensor_meta", None)
