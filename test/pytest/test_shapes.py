"""Shapes and layouts that must never crash or differ from eager: zero-size and 0-dim tensors,
empty reductions, broadcast-to-zero, huge sizes, int8 casts (issue 8 item 7), output aliasing
and strides (issue 9 item 1), and the transformer training step's view error (issue 8 item 3).

The shape sweep runs in a CHILD process per target (one process runs the cases in order and
prints one line per finished case; if it dies, the case it was running is reported as a crash
and a new child carries on with the next one), so a SIGFPE/SIGSEGV in native code is caught and
named instead of killing pytest.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_close, check_fallbacks, ember_compile

NAN = float("nan")


# ---------------------------------------------------------------------------------------------
# The sweep: name -> (fn, inputs, targets). Inputs are built in the child (deterministic).

def _huge(x):
    # 2^31 + 2^16 elements through a broadcast (no memory): 64-bit index math in the kernel
    # (int64, exact: a float32 sum this long is a question of summation order, not indexing).
    return x.expand(32769, 65536).sum()


CASES = {
    # zero-size tensors (issue 8: SIGFPE, exit 136, on both targets)
    "repeat_0": (lambda x: x.repeat(0), lambda: [torch.zeros(0)]),
    "view_0x3x0_add": (lambda x: x.view(0, 3, 0) + 1, lambda: [torch.zeros(0)]),
    "add_empty_2d": (lambda x: x * 2 + 1, lambda: [torch.zeros(0, 3)]),
    "broadcast_to_zero": (lambda x, y: x + y, lambda: [torch.ones(0, 1), torch.ones(1, 4)]),
    "expand_to_zero": (lambda x: x.expand(0, 3) * 2, lambda: [torch.ones(1, 3)]),
    "slice_empty": (lambda x: x[2:2] + 1, lambda: [torch.arange(6.).view(3, 2)]),
    "cat_with_empty": (lambda x, y: torch.cat([x, y]) * 2,
                       lambda: [torch.zeros(0, 3), torch.arange(6.).view(2, 3)]),
    "softmax_empty_rows": (lambda x: x.softmax(-1), lambda: [torch.zeros(0, 4)]),
    "layer_norm_empty_batch": (lambda x: F.layer_norm(x, (8,)), lambda: [torch.zeros(0, 8)]),
    "linear_empty_batch": (lambda x, w: F.linear(x, w).relu(),
                           lambda: [torch.zeros(0, 4), torch.randn(3, 4)]),
    "mm_k_zero": (lambda a, b: a @ b + 1, lambda: [torch.zeros(3, 0), torch.zeros(0, 4)]),
    "index_select_empty": (lambda x, i: x.index_select(0, i) * 2,
                           lambda: [torch.randn(4, 3), torch.zeros(0, dtype=torch.long)]),
    "empty_int": (lambda x: x * 3 + 1, lambda: [torch.zeros(0, 2, dtype=torch.int32)]),
    "addmm_k_zero_bias": (lambda b, x, w: torch.addmm(b, x, w) * 2,
                          lambda: [torch.arange(4.), torch.zeros(3, 0), torch.zeros(0, 4)]),
    "add_sum_of_empty": (lambda x, y: x + y.sum(0), lambda: [torch.arange(4.), torch.zeros(0, 4)]),
    # empty reductions: eager gives 0 / 1 / nan, or raises
    "sum_empty_dim": (lambda x: x.sum(1) + 1, lambda: [torch.zeros(3, 0)]),
    "sum_all_empty": (lambda x: x.sum(), lambda: [torch.zeros(0)]),
    "prod_empty_dim": (lambda x: x.prod(1), lambda: [torch.zeros(3, 0)]),
    "mean_empty_dim": (lambda x: x.mean(1), lambda: [torch.zeros(3, 0)]),
    "amax_empty_dim": (lambda x: x.amax(1), lambda: [torch.zeros(3, 0)]),
    "argmax_empty_dim": (lambda x: x.argmax(1), lambda: [torch.zeros(3, 0)]),
    "sum_nonempty_of_empty_batch": (lambda x: x.sum(0) * 2, lambda: [torch.zeros(0, 5)]),
    # shapes that eager's kernels refuse and the meta functions accept (eager_rejects probes ops
    # on empty tensors at their exact shapes): a folded empty result was returned instead of
    # eager's error (op_db zero-size sweep, 2026-11-27)
    "batch_norm_empty_input": (lambda x, w: torch.native_batch_norm(x, w, w, w, w, True, 0.5, 0.6)[1],
                               lambda: [torch.zeros(0, 5, 5), torch.ones(5)]),
    "softmax_backward_empty_vs_one": (
        lambda g, o: torch.ops.aten._softmax_backward_data(g, o, 0, torch.float32) + 1,
        lambda: [torch.zeros(0), torch.ones(1)]),
    "diagonal_scatter_into_empty": (lambda x, s: torch.diagonal_scatter(x, s) * 2,
                                    lambda: [torch.zeros(0, 10), torch.ones(10)]),
    "mask_of_empty_tensor": (lambda x, m, v: torch.index_put(x, (m,), v) + 1,
                             lambda: [torch.zeros(0, 5), torch.ones(5, dtype=torch.bool),
                                      torch.ones(5)]),
    # upsampling decomposes at its Autograd key, before any decomposition table: judged on
    # Dynamo's graph (eager_rejects.dynamo_rejection)
    "interpolate_no_channels": (lambda x: F.interpolate(x, size=3, mode="linear") * 2,
                                lambda: [torch.ones(2, 0, 4)]),
    "interpolate_empty_width": (lambda x: F.interpolate(x, size=3, mode="nearest") * 2,
                                lambda: [torch.ones(2, 3, 0)]),
    "select_scatter_empty_dim": (lambda x, s: torch.select_scatter(x, s, 1, 2) + 1,
                                 lambda: [torch.zeros(5, 0, 5), torch.ones(5, 5)]),
    # an empty batch: the nearest index into the input stays (eager validates indices) as
    # eager's kernel inside the program (partition.is_library_node), not a fallback
    "interpolate_nearest_empty_batch": (lambda x: F.interpolate(x, size=3, mode="nearest"),
                                        lambda: [torch.ones(0, 3, 4)]),
    # 0-dim tensors
    "zero_dim_add": (lambda x: x * 2 + 1, lambda: [torch.tensor(3.0)]),
    "zero_dim_bcast": (lambda x, y: x * y, lambda: [torch.tensor(2.0), torch.arange(4.)]),
    "zero_dim_sum": (lambda x: x.sum() + x.exp(), lambda: [torch.tensor(0.5)]),
    "zero_dim_int": (lambda x: x * 7, lambda: [torch.tensor(3, dtype=torch.int64)]),
    "reduce_to_zero_dim": (lambda x: x.amax() - x.mean(), lambda: [torch.arange(12.).view(3, 4)]),
    "size_one_dims": (lambda x: (x * 2).sum(1, keepdim=True), lambda: [torch.ones(1, 1, 1)]),
    # reductions of 0-dim tensors (frontend/rank_zero.py: softmax hung torch-mlir's lowering)
    "zero_dim_softmax": (lambda x: x.softmax(0) + x.log_softmax(-1), lambda: [torch.tensor(0.3)]),
    "zero_dim_reductions": (lambda x: x.amax(0) + x.amin() + x.logsumexp(0),
                            lambda: [torch.tensor(0.7)]),
    "zero_dim_argmax_prod": (lambda x: x.argmax() + x.argmin(0) + x.prod(0),
                             lambda: [torch.tensor(0.7)]),
    # op_db's 0-dim samples (fb17): flip of a 0-dim tensor (rank_zero), index_fill with an
    # empty index (zero_size: a copy), a 0-dim tensor as narrow's start or tensor_split's
    # sections (tensor_scalars: its value, guarded by Dynamo)
    "zero_dim_flip": (lambda x: torch.flip(x, [0]) * 2, lambda: [torch.tensor(1.5)]),
    "zero_dim_index_fill_empty": (lambda x, i: x.index_fill(0, i, -8.5) + 1,
                                  lambda: [torch.tensor(1.5), torch.zeros(0, dtype=torch.int64)]),
    "index_fill_empty_index": (lambda x, i: x.index_fill(1, i, -8.5),
                               lambda: [torch.randn(3, 4), torch.zeros(0, dtype=torch.int64)]),
    # an index_put into an empty tensor, kept for eager's index check: a library call whose
    # empty values operand (expand's [0, 0] strides) torch-mlir failed to import
    "index_fill_into_empty": (lambda x, i: x.index_fill(-1, i, -8.5),
                              lambda: [torch.zeros(0, 5), torch.arange(5)]),
    # an index with elements into a tensor without elements (zero18): the op is kept whole
    # (zero_size.keep_indexing_whole), eager's kernel as a library call decides. index_add
    # into [0, 5] returns (eager's kernel skips an empty self of 2+ dims; its decomposition's
    # index_put raised on the CPU target); into [0] it raises, as index_put does (the GPU's
    # one-hot index_put folded to nothing under target "triton": no error)
    "index_add_into_empty": (lambda x, i, s: x.index_add(0, i, s),
                             lambda: [torch.zeros(0, 5), torch.tensor([0]), torch.ones(1, 5)]),
    "index_add_into_empty_1d": (lambda x, i, s: x.index_add(0, i, s),
                                lambda: [torch.zeros(0), torch.tensor([0]), torch.ones(1)]),
    "index_add_into_empty_alpha": (lambda x, i, s: x.index_add(0, i, s, alpha=2) * 3,
                                   lambda: [torch.zeros(0, 2, 3), torch.tensor([1, 0]),
                                            torch.ones(2, 2, 3)]),
    "index_add_into_empty_wrong_source": (lambda x, i, s: x.index_add(-1, i, s),
                                          lambda: [torch.zeros(0, 5), torch.arange(5),
                                                   torch.ones(1, 5)]),
    "index_put_accumulate_into_empty": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                                        lambda: [torch.zeros(0, 5), torch.tensor([0]),
                                                 torch.ones(1, 5)]),
    "index_put_into_empty": (lambda x, i, v: x.index_put((i,), v) + 1,
                             lambda: [torch.zeros(0, 5), torch.tensor([0, 0]), torch.ones(5)]),
    "index_copy_into_empty": (lambda x, i, s: x.index_copy(0, i, s),
                              lambda: [torch.zeros(0, 5), torch.tensor([0]), torch.ones(1, 5)]),
    "scatter_add_into_empty": (lambda x, i, s: x.scatter_add(0, i, s),
                               lambda: [torch.zeros(0, 5), torch.zeros(1, 5, dtype=torch.long),
                                        torch.ones(1, 5)]),
    "index_reduce_into_empty": (lambda x, i, s: x.index_reduce(0, i, s, "prod"),
                                lambda: [torch.zeros(0, 5), torch.tensor([0]), torch.ones(1, 5)]),
    # index_select of a 0-dim source (zero18): torch-mlir folded it to the source, so an index
    # out of range returned it (eager IndexError); eager_semantics._index_select_one
    "zero_dim_index_select": (lambda x, i: torch.index_select(x, -1, i) * 2,
                              lambda: [torch.tensor(1.5), torch.tensor([0])]),
    "zero_dim_index_select_out_of_range": (lambda x, i: torch.index_select(x, -1, i),
                                           lambda: [torch.tensor(1.5), torch.tensor(-1)]),
    "narrow_tensor_start": (lambda x, s: torch.narrow(x, 1, s, 2) * 2,
                            lambda: [torch.randn(3, 5, 4), torch.tensor(2)]),
    "narrow_tensor_start_empty": (lambda x, s: torch.narrow(x, 1, s, 2),
                                  lambda: [torch.randn(0, 5, 5), torch.tensor(-3)]),
    "tensor_split_tensor_sections": (lambda x, s: torch.tensor_split(x, s, 1)[2] + 1,
                                     lambda: [torch.randn(2, 7), torch.tensor(3)]),
    # two 0-dim operands of a binary math function with no `tl` spelling (the interpreter's
    # NumPy atan2 returned a block for scalars: 'Cannot splat a block tensor', a fallback)
    "zero_dim_atan2": (lambda x, y: torch.atan2(x, y) + 1,
                       lambda: [torch.tensor(0.3), torch.tensor(-1.2)]),
    "argmax_all_dims": (lambda x: x.argmax() * 2 + x.t().argmin(),
                        lambda: [torch.tensor([[1., 5., 2.], [7., 0., 3.]])]),
    # int8 casts (issue 9: SIGSEGV inside the FX import)
    "to_int8_mul": (lambda x: x.to(torch.int8) * 2, lambda: [torch.tensor([200.0, -3.0, 7.0])]),
    "int8_add_scalar": (lambda x: x + 5, lambda: [torch.tensor([120, -7], dtype=torch.int8)]),
    "int8_remainder_scalar": (lambda x: x.to(torch.int8) % 3, lambda: [torch.tensor([200.0, -7.0])]),
    "int8_mul_wrapping_scalar": (lambda x: x.to(torch.int8) * 300 - 2,
                                 lambda: [torch.tensor([100.0, 3.0, -7.0])]),
    # huge: more than 2^31 elements through a broadcast
    "huge_broadcast_sum": (_huge, lambda: [torch.ones(1, 1, dtype=torch.int64)]),
    # an integer operand with elements beside an empty one is a value, not an index to check
    # (zero_size._checks_indices; fuzz seed 45 index 246 fell back)
    "where_empty_with_int": (lambda x, i: torch.where(x > 0, x, i),
                             lambda: [torch.zeros(4, 2, 0), torch.tensor([3, 2]).reshape(1, 2, 1)]),
    # grid_sample without channels: its decomposition's `index` of the empty input by
    # in-range indices with elements has no elements (the op-db zero sweep's fallback)
    "grid_sample_no_channels": (lambda x, g: torch.nn.functional.grid_sample(
        x, g, align_corners=False), lambda: [torch.randn(2, 0, 5, 5), torch.rand(2, 5, 5, 2) * 2 - 1]),
    # an index past its dim selecting no element: eager reads, so checks, none ([1, 0])
    "index_out_of_range_selecting_nothing": (lambda x, i: x[i, :] + 1,
                                             lambda: [torch.zeros(2, 0), torch.tensor([9])]),
    # ... but an index with elements into a dim of size 0 raises in eager, whatever it selects
    # (fuzz seed 46 index 1471: the result [2, 0, 3] came back)
    "index_into_empty_dim": (lambda x, i: torch.log(x)[i],
                             lambda: [torch.zeros(0, 0, 3), torch.tensor([-1, 0])]),
    # eager's pixel_unshuffle of an empty batch is a clone of it ([0, 1, 6, 6]) where the meta
    # function says [0, 9, 2, 2] (eager_rejects._other_shapes: the graph runs eagerly)
    "pixel_unshuffle_empty_batch": (lambda x: torch.nn.functional.pixel_unshuffle(x, 3) * 2,
                                    lambda: [torch.zeros(0, 1, 6, 6)]),
}
# Cases ember compiles (or makes on the host without a kernel): no eager fallback allowed.
EXPECT_COMPILED = {
    "repeat_0", "view_0x3x0_add", "add_empty_2d", "broadcast_to_zero", "expand_to_zero",
    "slice_empty", "cat_with_empty", "softmax_empty_rows", "layer_norm_empty_batch",
    "linear_empty_batch", "mm_k_zero", "index_select_empty", "empty_int", "sum_empty_dim",
    "sum_all_empty", "prod_empty_dim", "add_sum_of_empty", "mean_empty_dim", "sum_nonempty_of_empty_batch",
    "zero_dim_add", "zero_dim_bcast", "zero_dim_sum", "zero_dim_int", "reduce_to_zero_dim",
    "size_one_dims", "zero_dim_softmax", "zero_dim_reductions", "zero_dim_argmax_prod",
    "argmax_all_dims", "interpolate_nearest_empty_batch", "zero_dim_flip",
    "zero_dim_index_fill_empty", "index_fill_empty_index", "index_fill_into_empty",
    "narrow_tensor_start", "index_add_into_empty", "index_add_into_empty_alpha",
    "zero_dim_index_select",
    "narrow_tensor_start_empty", "tensor_split_tensor_sections", "zero_dim_atan2", "to_int8_mul", "int8_add_scalar", "int8_remainder_scalar",
    "int8_mul_wrapping_scalar", "huge_broadcast_sum", "where_empty_with_int",
    "grid_sample_no_channels", "index_out_of_range_selecting_nothing",
}
# Cases compiled on the CPU that fall back under target "triton" (its reductions of a one-element
# dim with an index or a product: ember-lower-to-triton's reduction combiners).
COMPILED_ON_CPU_ONLY = {"zero_dim_argmax_prod"}
# Cases too slow for the Triton interpreter (it runs each block in numpy).
CPU_ONLY = {"huge_broadcast_sum"}


def _outcome(fn, args, target: str) -> dict:
    """What eager and ember give for one case, compared; runs in the child."""
    import ember
    sys.path.insert(0, os.path.dirname(__file__))
    try:
        ref, ref_err = fn(*[a.clone() for a in args]), None
    except Exception as err:  # eager raises: ember must raise too
        ref, ref_err = None, type(err).__name__
    torch._dynamo.reset()
    ember.clear_reports() if hasattr(ember, "clear_reports") else None
    types: set[str] = set()
    torch._dynamo.utils.counters.clear()
    try:
        out = torch.compile(fn, backend="ember", options={"target": target})(*args)
        err = None
    except Exception as e:
        out, err = None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        # the types it is an instance of, along its chain (Dynamo re-raises under its own)
        seen, chain = 0, e
        while chain is not None and seen < 8:
            types.update(t.__name__ for t in type(chain).__mro__)
            chain, seen = chain.__cause__ or chain.__context__, seen + 1
    # whether ember ran (an error of Dynamo's own tracing, fake tensors', is every backend's)
    ran = torch._dynamo.utils.counters["aot_autograd"].get("total", 0) > 0
    res = {"eager_error": ref_err, "ember_error": err, "ember_error_types": sorted(types),
           "backend_ran": ran,
           "status": [r.get("status") for r in ember.last_reports()],
           "fallbacks": [o for r in ember.last_reports() for o in r.get("eager_fallback_ops", [])]}
    if ref_err is None and err is None:
        try:
            assert_close(out, ref)
            refs = ref if isinstance(ref, (tuple, list)) else (ref,)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for o, r in zip(outs, refs):
                if r.numel() > 1:
                    assert o.stride() == r.stride(), f"strides {o.stride()} != {r.stride()}"
            res["match"] = True
        except AssertionError as e:
            res["match"] = False
            res["why"] = str(e)
    return res


def _child(target: str, names: list[str]) -> None:
    if target != "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        fn, make = CASES[name]
        torch.manual_seed(0)
        res = _outcome(fn, make(), target)
        print(json.dumps({"done": name, **res}), flush=True)


def run_sweep(target: str, names: list[str], timeout: float = 600) -> dict[str, dict]:
    """Runs `names` in child processes; a case whose child dies is {"crash": returncode}."""
    results: dict[str, dict] = {}
    todo = list(names)
    env = dict(os.environ)
    if target != "cpu":
        env["TRITON_INTERPRET"] = "1"
    while todo:
        proc = subprocess.run([sys.executable, __file__, "--child", target, *todo],
                              capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=os.path.dirname(os.path.abspath(__file__)))
        current = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
            else:
                results[msg.pop("done")] = msg
                current = None
        if current is None and proc.returncode != 0:
            current = next(n for n in todo if n not in results)
        if current is not None:
            results[current] = {"crash": proc.returncode, "stderr": proc.stderr[-2000:]}
        todo = [n for n in todo if n not in results]
    return results


def _judge(name: str, r: dict, target: str = "cpu") -> str | None:
    """None when the case behaved like eager, else what went wrong."""
    if "crash" in r:
        return f"child process died with {r['crash']}: {r['stderr'][-600:]}"
    if r["eager_error"]:
        if not r["ember_error"]:
            return f"eager raised {r['eager_error']}, ember did not"
        if r["backend_ran"] and r["eager_error"] not in r["ember_error_types"]:
            return f"eager raised {r['eager_error']}, ember {r['ember_error']}"
        return None
    if r["ember_error"]:
        return f"ember raised {r['ember_error']}"
    if not r.get("match"):
        return r.get("why", "mismatch")
    if target != "cpu" and name in COMPILED_ON_CPU_ONLY:
        return None
    if name in EXPECT_COMPILED and (r["fallbacks"] or not r["status"] or
                                    set(r["status"]) - {"compiled", "host-only"}):
        return f"fell back to eager: {r['status']} {r['fallbacks']}"
    return None


@pytest.mark.targets("cpu", "triton")
def test_shape_sweep_never_crashes(target):
    names = [n for n in CASES if target == "cpu" or n not in CPU_ONLY]
    results = run_sweep(target, names)
    bad = {n: why for n, r in results.items() if (why := _judge(n, r, target))}
    assert not bad, "\n".join(f"{n}: {w}" for n, w in bad.items())


# ---------------------------------------------------------------------------------------------
# Output aliasing and strides as eager returns them (issue 9, item 1)

def _same_layout(out, ref, what="output"):
    """Values, dtype, shape, strides and storage offset as eager's."""
    assert_close(out, ref, what=what)
    assert out.stride() == ref.stride(), f"{what}: strides {out.stride()} != {ref.stride()}"
    assert out.storage_offset() == ref.storage_offset(), \
        f"{what}: storage offset {out.storage_offset()} != {ref.storage_offset()}"


def _shares(a, b) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_tensor_scalar_argument_is_a_guarded_int(target, device):
    # narrow(x, dim, tensor(start), n): compiled with the start's value (frontend/
    # tensor_scalars.py), the result a view of x as eager's; another start compiles again
    # (Dynamo's guard on the value), with its own right result.
    import ember
    x = torch.randn(4, 6, device=device)
    f = lambda x, s: torch.narrow(x, 1, s, 3)     # noqa: E731
    cf = ember_compile(f, target)
    for start in (2, 1, 2, -4):
        s = torch.tensor(start)
        out = cf(x, s)
        _same_layout(out, f(x, s))
        assert _shares(out, x), "narrow's result is a view of its input"
    check_fallbacks()
    graphs = [r for r in ember.last_reports()]
    assert len(graphs) == 3, [r["graph_id"] for r in graphs]    # starts 2, 1, -4


def _run(fn, args, target):
    ref = fn(*[a.clone() for a in args])
    out = ember_compile(fn, target)(*args)
    check_fallbacks()
    return out, ref


def test_outputs_that_alias_stay_views(target, device):
    """Issue 9: `y, y.t()` came back as two buffers; add_ through one must show in the other."""
    def g(x):
        y = x * 2
        return y, y.t()
    out, ref = _run(g, [torch.ones(2, 3, device=device)], target)
    for i in range(2):
        _same_layout(out[i], ref[i], f"output {i}")
    assert _shares(out[0], out[1])
    out[0].add_(1)
    ref[0].add_(1)
    assert out[1][0, 0].item() == ref[1][0, 0].item() == 3.0


def test_views_of_computed_value_keep_offsets(target, device):
    def m(x):
        y = x + 1
        return y, y.view(-1), y[1], y[:, 1:].unsqueeze(0), y.expand(4, 2, 3)
    out, ref = _run(m, [torch.arange(6., device=device).view(2, 3)], target)
    for i, (o, r) in enumerate(zip(out, ref)):
        _same_layout(o, r, f"output {i}")
        assert _shares(o, out[0]), f"output {i} is not a view of output 0"


def test_split_results_stay_views_of_one_buffer(target, device):
    """q, k, v split from one product and viewed per head (a training forward saves them for
    the backward): views of the one buffer with eager's strides and offsets, not each copied
    into eager's strides (three strided copies per attention layer)."""
    def f(x, w):
        q, k, v = (x @ w).split(4, dim=-1)
        return q.view(2, 3, 2, 2).transpose(1, 2), k, v, (x @ w).unbind(1)[2]
    out, ref = _run(f, [torch.randn(2, 3, 8, device=device), torch.randn(8, 12, device=device)],
                    target)
    for i, (o, r) in enumerate(zip(out, ref)):
        _same_layout(o, r, f"output {i}")
        torch.testing.assert_close(o, r)
    assert _shares(out[0], out[1]) and _shares(out[0], out[2])
    out[1].add_(1)      # k's memory is q's buffer's, as in eager
    ref[1].add_(1)
    torch.testing.assert_close(out[1], ref[1])


def test_transposed_results_have_eager_strides(target, device):
    def f(x):
        return (x * 2).t(), (x + 1).t().contiguous(), x.t(), (x - 1).permute(1, 0)[1:]
    x = torch.arange(12., device=device).view(3, 4)
    out, ref = _run(f, [x], target)
    for i, (o, r) in enumerate(zip(out, ref)):
        _same_layout(o, r, f"output {i}")
    assert _shares(out[2], x)


def test_permuted_inputs_give_permuted_outputs_without_a_copy(target, device):
    """A pointwise op keeps a permuted or channels-last input's layout in eager; ember writes
    that layout in the kernel itself (one kernel, no restriding copy)."""
    for x in (torch.randn(2, 3, 4, 5, device=device).to(memory_format=torch.channels_last),
              torch.randn(2, 5, 3, 4, device=device).permute(0, 2, 3, 1)):
        out, ref = _run(lambda t: t * 2 + 1, [x], target)
        _same_layout(out, ref)
        import ember
        assert [r["num_kernels"] for r in ember.last_reports()] == [1]


def test_gapped_layout_is_restrided(target, device):
    def f(x):
        return torch.empty_strided((2, 3), (1, 4), device=x.device).copy_(x * 2)
    out, ref = _run(f, [torch.randn(2, 3, device=device)], target)
    _same_layout(out, ref)


def test_view_after_graph_break_on_transposed_result(target, device):
    """Issue 8, BERT training: a result whose eager layout is transposed (here: pointwise on a
    `.view(B,S,H,D).transpose(1,2)` input) came back contiguous, and the next graph's
    `.transpose(1, 2).view(...)` raised "view size is not compatible with input tensor's size
    and stride"."""
    def f(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y.transpose(1, 2).view(2, 16, 32) + 1
    x = torch.randn(2, 16, 4, 8, device=device).transpose(1, 2)
    out, ref = _run(f, [x], target)
    assert_close(out, ref)


class _Attention(torch.nn.Module):
    """BERT's self-attention view/transpose patterns, with a graph break inside (as a model's
    unsupported Python causes) so that transposed activations cross graph boundaries."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.h, self.q, self.k, self.v = heads, *(torch.nn.Linear(d, d) for _ in range(3))
        self.o, self.ln = torch.nn.Linear(d, d), torch.nn.LayerNorm(d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (m(x).view(b, s, self.h, d // self.h).transpose(1, 2)
                   for m in (self.q, self.k, self.v))
        q = q * 0.5
        torch._dynamo.graph_break()
        a = F.scaled_dot_product_attention(q, k, v)
        gate = v * torch.sigmoid(q)     # eager: laid out (b, s, h, d // h), as q and v are
        torch._dynamo.graph_break()
        a = a.transpose(1, 2).contiguous().view(b, s, d) + gate.transpose(1, 2).view(b, s, d)
        return self.ln(x + self.o(a))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_training_step_with_transposed_views(target, device, dtype):
    torch.manual_seed(0)
    ref_m = torch.nn.Sequential(_Attention(), _Attention()).to(device, dtype)
    m = torch.nn.Sequential(_Attention(), _Attention()).to(device, dtype)
    m.load_state_dict(ref_m.state_dict())
    x = torch.randn(2, 8, 32, device=device, dtype=dtype)
    w = torch.randn(2, 8, 32, device=device)    # a loss that LayerNorm does not make constant
    cm = ember_compile(m, target)
    results = []
    for model, fn in ((ref_m, ref_m), (m, cm)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        out = fn(x)
        (out.float() * w).sum().backward()
        opt.step()
        results.append((out.detach(), [p.detach().clone() for p in model.parameters()]))
    check_fallbacks()
    assert_close(results[1][0], results[0][0])
    assert_close(results[1][1], results[0][1], what="updated parameters")


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--child":
    _child(sys.argv[2], sys.argv[3:])
elif __name__ == "__main__":
    tgt = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    picked = sys.argv[2:] or list(CASES)
    for n, r in run_sweep(tgt, picked).items():
        print(f"{n:32s} {_judge(n, r) or 'ok'} {r.get('status', '')}")
