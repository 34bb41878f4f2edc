"""Zero-size tensors never reach torch-mlir (issue 8, item 7).

torch-mlir's lowering divides by dimension sizes when it infers reshapes (`repeat(0)`,
`view(0, 3, 0)`): a zero size kills the process with SIGFPE. A tensor without elements needs no
computation, though, only its shape, dtype and strides, and a value computed from tensors
without elements depends on their shapes alone. `fold_zero_size` therefore rewrites an ATen
graph (static shapes) so that no compute node touches a zero-size tensor:

* a node whose result has no elements becomes `empty_strided` with the result's size, stride,
  dtype and device (the host makes it: no kernel launch);
* `cat` drops its operands without elements (they contribute nothing);
* an `index_put` whose indices have no elements is a copy of its input;
* a node reading integer indices with elements next to a tensor without elements stays (eager's
  kernel checks the indices and may raise; partition makes it a library call; not an `index`
  with no element to read, whose indices eager cannot refuse), and so does a
  tensor folded from what reads it, as `new_empty_strided` of it (else the check is dead code);
  decompositions leave such calls whole (`keep_indexing_whole`), so the op is eager's own;
* a node whose tensor operands all have no elements but whose result has some (a reduction over
  an empty dim: sum 0, prod 1, mean nan; a matmul with K = 0) is evaluated now on empty tensors;
  a result that is one value repeated becomes `full` (eager's own arithmetic decides the value,
  and an op that raises, amax of an empty dim, is left for eager to raise).

What is left (a compute node reading a tensor without elements next to one with elements) is
refused by `importer.import_fx` before torch-mlir sees it, so the graph falls back cleanly.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .complex_values import AFTER_RAISING, COMPLEX_LIBRARY_OPS

aten = torch.ops.aten


def is_empty(v) -> bool:
    return isinstance(v, torch.Tensor) and v.numel() == 0


def touches_empty(node: fx.Node) -> bool:
    """A compute node that reads or makes a tensor without elements (what torch-mlir may crash
    on). `empty_strided` and unused placeholders are fine."""
    if node.op != "call_function" or node.target is aten.empty_strided.default:
        return False
    if is_empty(node.meta.get("val")):
        return True
    return any(is_empty(n.meta.get("val")) for n in node.all_input_nodes)


def _dense_stride(shape) -> list[int]:
    """Row-major strides as torch-mlir computes them, each the product of the later sizes
    ([1, 1, 0]: [0, 0, 1]). Its `empty_strided` lowering takes no others: torch's own, which
    count a size 0 as 1 ([1, 1, 1]), were refused ("failed to legalize operation
    'torch.constant.int'", the dtype left over: fuzz seed 46 index 1091, a graph fell back)."""
    stride, n = [], 1
    for size in reversed(list(shape)):
        stride.append(n)
        n *= size
    return stride[::-1]


def _contiguous(val: torch.Tensor) -> bool:
    return list(val.stride()) == _dense_stride(val.shape)


def _empty_like_val(graph: fx.Graph, val: torch.Tensor, dense: bool = False,
                    after: fx.Node | None = None) -> fx.Node:
    """`empty_strided` with `val`'s size, dtype, device and strides (`dense`: row-major ones,
    for a tensor without elements that only the program reads: its strides address nothing).
    `after`: a check that must run (`fold_zero_size`'s `checks`): `new_empty_strided` of it
    instead, the same tensor made by a call that reads the check's result, which keeps it."""
    stride = _dense_stride(val.shape) if dense else list(val.stride())
    kwargs = {"dtype": val.dtype, "device": val.device}
    if after is not None:
        # (its device is the check's: a device argument does not survive a library call)
        node = graph.call_function(aten.new_empty_strided.default,
                                   (after, list(val.shape), stride), {"dtype": val.dtype})
    else:
        node = graph.call_function(aten.empty_strided.default, (list(val.shape), stride), kwargs)
    if dense:
        mode = getattr(val, "fake_mode", None)
        if mode is not None:
            with mode:
                val = torch.empty_strided(val.shape, stride, dtype=val.dtype, device=val.device)
        else:
            val = torch.empty_strided(val.shape, stride, dtype=val.dtype, device="meta")
    node.meta["val"] = val
    return node


def _uniform_value(t: torch.Tensor):
    """The one value every element of `t` holds, or None."""
    flat = t.reshape(-1)
    first = flat[0]
    same = (flat == first) | (torch.isnan(flat) & torch.isnan(first)) if t.is_floating_point() \
        else flat == first
    return first.item() if bool(same.all()) else None


def _evaluate(node: fx.Node):
    """Runs `node` on real empty CPU tensors shaped like its operands; None if it raises."""
    def real(n: fx.Node):
        v = n.meta["val"]
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype)
    args = fx.node.map_arg(node.args, real)
    kwargs = {k: v for k, v in fx.node.map_arg(node.kwargs, real).items() if k != "device"}
    try:
        with torch.no_grad():
            return node.target(*args, **kwargs)
    except Exception:   # eager raises here too (amax of an empty dim): eager must run it
        return None


def _fold_full(graph: fx.Graph, node: fx.Node, result, val) -> fx.Node | None:
    if not isinstance(result, torch.Tensor) or not isinstance(val, torch.Tensor):
        return None
    if tuple(result.shape) != tuple(val.shape) or result.dtype != val.dtype:
        return None
    if result.numel() == 0:     # (an output of a tuple without elements: it folds on its own)
        return None
    value = _uniform_value(result)
    if value is None:
        return None
    with graph.inserting_before(node):
        full = graph.call_function(aten.full.default, (list(val.shape), value),
                                   {"dtype": val.dtype, "device": val.device})
    full.meta["val"] = val
    return full


def _reads_indices(node: fx.Node) -> bool:
    """An operand of integer indices with elements (a scatter into an empty tensor): eager checks
    them and may raise, so the node must run (as a library call) rather than fold away."""
    return any(isinstance(v := n.meta.get("val"), torch.Tensor) and v.numel() > 0
               and v.dtype in (torch.int64, torch.int32) for n in node.all_input_nodes)


_INDEXING = (aten.index.Tensor, aten._unsafe_index.Tensor)


def _index_reads_nothing(node: fx.Node) -> bool:
    """An `index` (`x[i, j]`) that eager cannot make raise: its result has no elements, and
    eager checks an index only as it reads the element it selects (`zeros(2, 0)[tensor([9]),
    :]` is a [1, 0] tensor, the 9 never read), besides refusing an index with elements into a
    dim of size 0 ("index is out of bounds for dimension with size 0": `zeros(0, 0, 3)[tensor(
    [-1, 0])]` raises, fuzz seed 46 index 1471). Integer indices only (a mask covers dims of its
    own)."""
    if node.target not in _INDEXING or not is_empty(node.meta.get("val")) or \
            len(node.args) < 2 or not isinstance(node.args[0], fx.Node):
        return False
    src = node.args[0].meta.get("val")
    if not isinstance(src, torch.Tensor):
        return False
    for size, index in zip(src.shape, node.args[1]):
        if index is None:
            continue
        v = index.meta.get("val") if isinstance(index, fx.Node) else None
        if not isinstance(v, torch.Tensor) or v.dtype not in (torch.int64, torch.int32):
            return False
        n = v.numel()       # (a symbolic size is not compared: that would guard on it)
        if type(size) is not int or (size == 0 and (type(n) is not int or n > 0)):
            return False
    return True


def _checks_indices(node: fx.Node) -> bool:
    """Whether eager's kernel of `node` may raise on the values of integer indices it reads
    (which then must run): an op with an index argument (reads_index_argument) reading
    indices with elements, unless it is an `index` that reads none (_index_reads_nothing).
    Integer operands of other ops (a `where` of an empty float tensor and an int64 one: fuzz
    seed 45 index 246) are values, checked by nobody."""
    return (reads_index_argument(node.target) and _reads_indices(node)
            and not _index_reads_nothing(node))


def _static_empty(v) -> bool:
    """A tensor with a static size 0 (a symbolic size is not compared: that would guard on it)."""
    return isinstance(v, torch.Tensor) and any(type(d) is int and d == 0 for d in v.shape)


def _static_indices(v) -> bool:
    """An integer tensor with elements, all of its sizes static."""
    return (isinstance(v, torch.Tensor) and v.dtype in (torch.int64, torch.int32)
            and all(type(d) is int and d > 0 for d in v.shape))


def indexes_empty(args, kwargs) -> bool:
    """Whether a call reads integer indices with elements next to a tensor without elements
    (what `_reads_indices` keeps in the graph): `index_add` into a [0, 5] tensor."""
    from torch.utils._pytree import tree_leaves
    leaves = tree_leaves((args, kwargs))
    return any(_static_empty(v) for v in leaves) and any(_static_indices(v) for v in leaves)


def reads_index_argument(op) -> bool:
    """An ATen op with an `index` or `indices` argument (gather, scatter, index_put, index_add,
    embedding, take, ...): the ops whose kernels check integer indices."""
    return (isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"
            and any(a.name in ("index", "indices") for a in op._schema.arguments))


def keep_indexing_whole(op, decomposition):
    """`decomposition` of `op`, except for a call that reads indices with elements next to a
    tensor without elements: the op stays whole (NotImplemented), so that fold_zero_size keeps
    it (`_reads_indices`) and it runs as eager's own kernel (partition: a library call), which
    decides whether the indices raise. A decomposition checks them otherwise than the op's
    kernel: `index_add` into a [0, 5] tensor returns in eager (its kernel skips an empty self
    of 2+ dims) where its decomposition's `index_put` raises; a [0] tensor raises in eager,
    where the GPU's one-hot `index_put` (scatter_decomp._index_put_dense) folded to nothing.
    Graphs whose tensors all have elements decompose as before."""
    if not reads_index_argument(op):
        return decomposition    # (it reads no indices: no call is judged)

    def kept(*args, **kwargs):
        if indexes_empty(args, kwargs):
            return NotImplemented
        return decomposition(*args, **kwargs)
    kept.__wrapped__ = decomposition
    kept.__name__ = getattr(decomposition, "__name__", "decomposition")
    return kept


_INDEX_PUTS = (aten.index_put.default, aten._unsafe_index_put.default)


def _writes_nothing(node: fx.Node) -> bool:
    """An index_put whose indices select no element (an index tensor without elements: the
    indices broadcast to a shape without elements), into a tensor with elements
    (`index_fill(x, 0, empty, v)`, `x[empty] = v`): its result is its input, copied. The
    shapes were checked when the graph was traced; there is no index to check."""
    indices = node.args[1] if len(node.args) > 1 else ()
    self_val = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
    return (isinstance(self_val, torch.Tensor) and self_val.numel() > 0
            and isinstance(node.meta.get("val"), torch.Tensor)
            and any(isinstance(i, fx.Node) and is_empty(i.meta.get("val")) for i in indices))


def _library_raises(node: fx.Node) -> bool:
    """An FFT of an empty tensor: MKL/pocketfft raise in eager ("Inconsistent configuration
    parameters"); the node stays, as the library call it is (it never reaches torch-mlir), so
    that the compiled program raises where eager does."""
    return (str(node.target) in COMPLEX_LIBRARY_OPS and touches_empty(node)
            and _evaluate(node) is None)


def _raises(node: fx.Node, raises: set[fx.Node]) -> bool:
    """Whether eager raises on `node`, whose result has no elements: an item of a node that
    raises, or an op whose tensor operands all have no elements and which raises on them."""
    if node.target is operator.getitem:
        return node.args[0] in raises
    ins = node.all_input_nodes
    if not ins or not isinstance(node.target, torch._ops.OpOverload) \
            or not all(is_empty(n.meta.get("val")) for n in ins):
        return False
    return _evaluate(node) is None


def fold_zero_size(gm: fx.GraphModule) -> bool:
    """Rewrites `gm` in place as the module docstring says; True when anything changed."""
    graph = gm.graph
    changed = False
    raising: set[fx.Node] = set()   # library calls that raise in eager, and what reads them
    raises: set[fx.Node] = set()    # ops on empty tensors that raise in eager (left to raise)
    # Index readers next to a tensor without elements (kept: eager's kernel checks the indices
    # and may raise; ops with an index argument, not views or arithmetic of integers) and the
    # empty tensors folded from what reads them: a reader whose readers all fold away would be
    # dead code, and eager's check with it (`index_put(empty, [i], v) + 1` returned where eager
    # raises IndexError), so what is folded after one is made by `new_empty_strided` of it,
    # which keeps it alive.
    checks: set[fx.Node] = set()
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is aten.empty_strided.default:
            continue
        if any(n in raising for n in node.all_input_nodes) or _library_raises(node):
            # Folding a reader away would leave the call dead code; the readers never run (the
            # call raises first) and are library calls too, so no kernel reads an empty tensor.
            raising.add(node)
            node.meta[AFTER_RAISING] = True
            continue
        val = node.meta.get("val")
        after = next((n for n in node.all_input_nodes if n in checks), None)
        if _checks_indices(node) and touches_empty(node):
            checks.add(node)
        if is_empty(val) and not _checks_indices(node):
            if _raises(node, raises):
                # a reduction over an empty dim whose result has no elements either (`min(dim)`
                # of a (0, 2, 0) tensor): eager raises, so it stays for eager to raise (fuzz
                # seed 41 index 58 returned an empty tensor)
                raises.add(node)
                continue
            with graph.inserting_before(node):
                if not _contiguous(val) and any(u.op != "output" for u in node.users):
                    # what reads it inside the program (an index_put kept for eager's index
                    # check): dense strides, which torch-mlir imports; [0, 0] it did not
                    dense = _empty_like_val(graph, val, dense=True, after=after)
                    node.replace_all_uses_with(dense, delete_user_cb=lambda u: u.op != "output")
                    checks.update([dense] if after is not None else [])
                if node.users:      # the graph's outputs keep eager's strides
                    empty = _empty_like_val(graph, val, after=after)
                    node.replace_all_uses_with(empty)
                    checks.update([empty] if after is not None else [])
            changed = True
            continue
        if node.target in _INDEX_PUTS and _writes_nothing(node):
            with graph.inserting_before(node):
                copy = graph.call_function(aten.clone.default, (node.args[0],))
                copy.meta["val"] = val
            node.replace_all_uses_with(copy)
            changed = True
            continue
        tensor_ins = [n for n in node.all_input_nodes if isinstance(n.meta.get("val"), torch.Tensor)]
        if node.target is aten.cat.default and any(is_empty(n.meta["val"]) for n in tensor_ins):
            kept = [n for n in node.args[0] if not is_empty(n.meta.get("val")) or n in checks]
            if kept:
                node.args = (kept,) + tuple(node.args[1:])
                changed = True
            continue
        if not tensor_ins or len(tensor_ins) != len(node.all_input_nodes):
            continue
        if not all(is_empty(n.meta["val"]) for n in tensor_ins):
            continue
        if not isinstance(node.target, torch._ops.OpOverload) or after is not None:
            continue    # (after a check: it stays, as eager's kernel, and keeps the check)
        result = _evaluate(node)
        if result is None:
            raises.add(node)
            continue
        if isinstance(val, (tuple, list)):
            for user in list(node.users):
                if user.target is operator.getitem and isinstance(result, (tuple, list)):
                    i = user.args[1]
                    full = _fold_full(graph, user, result[i], user.meta.get("val"))
                    if full is not None:
                        user.replace_all_uses_with(full)
                        changed = True
        else:
            full = _fold_full(graph, node, result, val)
            if full is not None:
                node.replace_all_uses_with(full)
                changed = True
    if changed:
        graph.eliminate_dead_code()
        gm.recompile()
    return changed
