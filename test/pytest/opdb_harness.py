"""Operator conformance: PyTorch's OpInfo database through `torch.compile` against eager.

Shared by the CI shard (test/pytest/test_opdb.py) and the full sweep (benchmarks/opdb_sweep.py).
One *case* is (backend, op name, variant, dtype, mode) with mode `fwd`, `bwd` or `zero` (the
zero-size / 0-dim / broadcast-to-zero inputs derived from the op's samples). `run_case` runs in a
child process (opdb_pool.py): a case that kills its process is recorded as a crash there.

Statuses, worst first (a case takes the worst over its samples):
  crash     the child process died from a signal (parent side, opdb_pool.py)
  timeout   the case ran past its time limit (parent side)
  mismatch  values / dtype / shape / NaN positions differ from eager beyond tolerance
  error     eager raised and the compiled function did not, the other way round, or another type
  fallback  results match, but ember's reports show eager_fallback_ops or status eager/partitioned
            (not when eager and the backend both raised the same error: that is a pass)
  pass      results match (`graphs` says how many graphs the backend compiled; 0: Dynamo ran the
            op eagerly itself, the same for every backend)
  skip      the op has no sample for this dtype/mode
"""
from __future__ import annotations

import math
import re
import time
import traceback
import warnings

STATUSES = ("crash", "timeout", "mismatch", "error", "fallback", "pass", "skip")
_RANK = {s: i for i, s in enumerate(STATUSES)}
DTYPES = ("float32", "bfloat16")
# ||out - ref|| <= rtol * ||ref|| + atol * sqrt(n) over the finite elements (torch.testing's
# defaults are elementwise; a relative norm, as in docs/design.md, is loosened to 1e-4 for
# fp32 so that reassociated reductions pass; bf16 1e-2). Outputs in float64 take the fp32 bound.
TOLERANCE = {"float32": (1e-4, 1e-5), "float64": (1e-4, 1e-5),
             "bfloat16": (1e-2, 1e-3), "float16": (1e-2, 1e-3)}

# Ops whose values are random or uninitialised: only dtype and shape are compared (Inductor's
# OpInfo test does the same).
_RANDOM_OPS = re.compile(
    r"^(bernoulli|cauchy|exponential|geometric|log_normal|normal|uniform|multinomial|"
    r"rand\w*|randint\w*|randn\w*|empty\w*|new_empty\w*|resize_|resize_as_|"
    r"nn\.functional\.(\w*dropout\w*|rrelu|multi_head_attention_forward|"
    r"fractional_max_pool\dd)|"
    r"torch\.ops\.aten\._(efficient|flash)_attention_forward|svd_lowrank|pca_lowrank)$")

# Zero-size variants that kill eager torch itself (a bug in torch, not in any backend): they are
# not run, since the reference result is what crashes.
_EAGER_CRASHES = {
    ("_chunk_cat", "0-dim"): "torch._chunk_cat of 0-dim tensors: SIGSEGV in eager",
    ("_segment_reduce", "first0"): "torch._segment_reduce of empty data with offsets [0..4]: "
                                   "SIGSEGV in eager (reads past the data)",
}

_OPS = None


def op_table():
    """(name, variant) -> OpInfo. Imported lazily: op_db takes ~10 s to import."""
    global _OPS
    if _OPS is None:
        from torch.testing._internal.common_methods_invocations import op_db
        _OPS = {(op.name, op.variant_test_name): op for op in op_db}
    return _OPS


def case_id(case: dict) -> str:
    variant = f".{case['variant']}" if case["variant"] else ""
    return f"{case['op']}{variant}-{case['dtype']}-{case['mode']}"


def worst(a: str, b: str) -> str:
    return a if _RANK[a] <= _RANK[b] else b


# ---------------------------------------------------------------------------------------------
# Comparison

def _tensor_diff(out, ref, what: str) -> str | None:
    import torch
    if not isinstance(out, torch.Tensor):
        return f"{what}: got {type(out).__name__}, eager gave a tensor"
    if out.dtype != ref.dtype:
        return f"{what}: dtype {out.dtype} != eager {ref.dtype}"
    if out.shape != ref.shape:
        return f"{what}: shape {tuple(out.shape)} != eager {tuple(ref.shape)}"
    out, ref = out.detach().cpu(), ref.detach().cpu()
    if out.is_complex():
        out, ref = torch.view_as_real(out.resolve_conj()), torch.view_as_real(ref.resolve_conj())
    if out.layout != torch.strided or ref.layout != torch.strided:
        out, ref = out.to_dense(), ref.to_dense()
    if not out.is_floating_point():
        bad = (out != ref).sum().item()
        return f"{what}: {bad} of {ref.numel()} {ref.dtype} elements differ" if bad else None
    o, r = out.double(), ref.double()
    if not torch.equal(torch.isnan(o), torch.isnan(r)):
        return (f"{what}: NaN positions differ ({int(torch.isnan(o).sum())} NaN vs eager "
                f"{int(torch.isnan(r).sum())})")
    inf = torch.isinf(r) | torch.isinf(o)
    if not torch.equal(o[inf], r[inf]):
        return f"{what}: infinities differ"
    finite = ~(inf | torch.isnan(r))
    o, r = o[finite], r[finite]
    rtol, atol = TOLERANCE.get(str(ref.dtype).replace("torch.", ""), (1e-4, 1e-5))
    err, den = torch.linalg.vector_norm(o - r).item(), torch.linalg.vector_norm(r).item()
    if err > rtol * den + atol * math.sqrt(max(r.numel(), 1)):
        rel = err / den if den else err
        return f"{what}: relative error {rel:.2e} > {rtol:.0e} ({ref.dtype}, {r.numel()} elems)"
    return None


def diff(out, ref, what: str = "out", values: bool = True) -> str | None:
    """None when `out` matches eager's `ref` (nested tuples/lists/dicts of tensors and
    scalars); else a one-line description of the first difference."""
    import torch
    if isinstance(ref, torch.Tensor):
        if not values:
            if not isinstance(out, torch.Tensor):
                return f"{what}: got {type(out).__name__}, eager gave a tensor"
            if (out.dtype, out.shape) != (ref.dtype, ref.shape):
                return f"{what}: {out.dtype}{tuple(out.shape)} != eager {ref.dtype}{tuple(ref.shape)}"
            return None
        return _tensor_diff(out, ref, what)
    if isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            return f"{what}: structure {type(out).__name__} != eager {type(ref).__name__}[{len(ref)}]"
        for i, (o, r) in enumerate(zip(out, ref)):
            d = diff(o, r, f"{what}[{i}]", values)
            if d:
                return d
        return None
    if isinstance(ref, dict):
        if not isinstance(out, dict) or out.keys() != ref.keys():
            return f"{what}: dict keys differ"
        for k in ref:
            d = diff(out[k], ref[k], f"{what}[{k!r}]", values)
            if d:
                return d
        return None
    if isinstance(ref, float) and isinstance(out, float) and math.isnan(ref) and math.isnan(out):
        return None
    if values and out != ref:
        return f"{what}: {out!r} != eager {ref!r}"
    return None


# ---------------------------------------------------------------------------------------------
# Samples

def _clone(tree, requires_grad: bool):
    """Fresh leaves, so eager and compiled runs never share (or mutate) each other's inputs."""
    import torch
    from torch.utils._pytree import tree_map

    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        c = t.detach().clone()
        if requires_grad and t.requires_grad:
            c.requires_grad_(True)
        return c
    return tree_map(one, tree)


def samples(op, dtype_name: str, mode: str, limit: int) -> list:
    """The first `limit` samples (seeded, so every backend sees the same inputs) as
    (args tuple, kwargs dict, description)."""
    import torch
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    grad = mode == "bwd"
    out = []
    more = []   # zero mode: samples with a tensor of 1+ dims, where the first are all 0-dim
    for i, s in enumerate(op.sample_inputs("cpu", dtype, requires_grad=grad)):
        sample = ((s.input, *s.args), dict(s.kwargs), _describe(s.input, s.args, s.kwargs))
        if len(out) < limit:
            out.append(sample)
        elif mode != "zero" or any(_has_dims(a) for a, _, _ in out) or i >= _SCAN_SAMPLES:
            break
        elif _has_dims(sample[0]):
            more.append(sample)
            if len(more) >= limit:
                break
    if mode == "zero":
        out += more
        out = [z for a, k, _ in out for z in zero_size_variants(a, k)
               if (op.name, z[2].split(":")[0]) not in _EAGER_CRASHES]
    return out


# Zero mode: how far to look for samples whose tensors have dims when the first `limit` are
# all 0-dim (reductions, casts, `sum`, `mean`, `all`: their first samples are scalars).
_SCAN_SAMPLES = 30


def _has_dims(tree) -> bool:
    import torch
    from torch.utils._pytree import tree_leaves
    return any(isinstance(t, torch.Tensor) and t.dim() >= 1 for t in tree_leaves(tree))


def _describe(*trees) -> str:
    import torch
    from torch.utils._pytree import tree_leaves

    def one(x):
        if isinstance(x, torch.Tensor):
            return f"{str(x.dtype).replace('torch.', '')}{list(x.shape)}"
        text = repr(x)
        return text if len(text) <= 24 else text[:21] + "..."
    return ", ".join(one(x) for x in tree_leaves(trees))[:200]


def zero_size_variants(args: tuple, kwargs: dict) -> list:
    """Zero-size, 0-dim and broadcast-to-zero versions of one sample (issue 8: no input shape
    may crash the process). Each tensor is narrowed, never regenerated, so dtypes and index
    ranges stay valid; a variant the op rejects must then raise in eager and compiled alike.
    `first` is the first tensor with a dim (an op whose first operand is a 0-dim tensor, `where`'s
    condition scalar, `lerp`'s weight, gets its zero-size cases from the next one)."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map
    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    if not tensors:
        return []
    first = next((t for t in tensors if t.dim() >= 1), tensors[0])

    def narrowed(fn):
        return tree_map(lambda t: fn(t).detach().clone() if isinstance(t, torch.Tensor) else t,
                        (args, kwargs))
    variants = []
    if first.dim() >= 1:
        # every tensor's leading (resp. last) dim -> 0: empty elementwise ops, empty reductions
        variants.append(("dim0=0", lambda t: t[:0] if t.dim() >= 1 else t))
        if first.dim() >= 2:
            variants.append(("last=0", lambda t: t[..., :0] if t.dim() >= 1 else t))
        if first.dim() >= 3:
            # dim 1 of every tensor of 3+ dims -> 0: no channels (a convolution's input and
            # weight together, pools, norms over channels), an empty middle dim of a view
            variants.append(("dim1=0", lambda t: t[:, :0] if t.dim() >= 3 else t))
        # only the first tensor empty: matmuls (0 x k @ k x n), gathers from an empty source
        variants.append(("first0", lambda t: t[:0] if t is first else t))
        # the first tensor empty, the others keep one row: they broadcast to zero rows
        variants.append(("bcast0", lambda t: t[:0] if t is first else
                         (t[:1] if t.dim() == first.dim() and t.dim() >= 1 else t)))
    else:
        # only 0-dim tensors: each becomes a 1-d tensor without elements
        variants.append(("grow0", lambda t: t.reshape(1)[:0] if t.dim() == 0 else t))
    # 0-dim tensors: one element each (a scalar tensor)
    variants.append(("0-dim", lambda t: t.reshape(-1)[0] if t.numel() >= 1 else t))
    out = []
    for label, fn in variants:
        a, k = narrowed(fn)
        out.append((a, k, f"{label}: {_describe(a, k)}"))
    return out


def has_empty(tree) -> bool:
    import torch
    from torch.utils._pytree import tree_leaves
    return any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in tree_leaves(tree))


# ---------------------------------------------------------------------------------------------
# One case (runs in the child process)

def _compile(fn, backend: str, target: str = "cpu"):
    """ember on `target` ("cpu": the C++ program; "triton": the GPU program, which on CPU tensors
    runs under TRITON_INTERPRET=1, set by the sweep before its workers start)."""
    import torch
    if backend == "ember":
        return torch.compile(fn, backend="ember", options={"target": target})
    return torch.compile(fn, backend=backend)


def _call(fn, args, kwargs):
    """(result, None) or (None, exception)."""
    try:
        return fn(*args, **kwargs), None
    except Exception as e:  # noqa: BLE001 - any error is a result to compare
        return None, e


def _backward(fn, args, kwargs):
    """Forward then grads of every input leaf that requires grad, for a fixed seeded upstream
    gradient on every differentiable output; (grads, None) or (None, exception); grads None
    when no output is differentiable."""
    import torch
    from torch.utils._pytree import tree_leaves
    try:
        out = fn(*args, **kwargs)
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
        leaves = [t for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs or not leaves:
            return None, None
        g = torch.Generator().manual_seed(1)
        gouts = [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs]
        grads = torch.autograd.grad(outs, leaves, gouts, allow_unused=True)
        # A grad eager leaves unset is a zero gradient; compiled graphs may return zeros.
        return [torch.zeros_like(x) if gr is None else gr for gr, x in zip(grads, leaves)], None
    except Exception as e:  # noqa: BLE001
        return None, e


def _same_error(compiled_err: BaseException, eager_err: BaseException) -> bool:
    """Dynamo re-raises errors found while tracing under its own types; the eager error's
    type anywhere in the chain counts as the same error."""
    seen, e = 0, compiled_err
    while e is not None and seen < 8:
        if isinstance(e, type(eager_err)):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _one_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    # Dynamo's wrapper puts the real message after a generic first line.
    for ln in lines[:6]:
        if "Error" in ln or "error" in ln:
            text = ln
            break
    return f"{type(e).__name__}: {text.strip()}"[:240]


def _ember_fallbacks() -> tuple[list, str]:
    import ember
    ops, why = [], ""
    for r in ember.last_reports():
        fb = list(r.get("eager_fallback_ops") or [])
        if fb or r.get("status") in ("eager", "partitioned"):
            ops.extend(fb or [r.get("status")])
            why = why or f"{r.get('status')}: {r.get('error', '')}"
    return ops, why[:300]


def run_sample(case: dict, fn, args, kwargs, accepted: list | None = None
               ) -> tuple[str, str, int, list]:
    """(status, reason, graphs compiled, fallback ops) for one sample; appends to `accepted`
    whether eager ran the sample without raising."""
    import torch
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    if case["backend"] == "ember":
        import ember
        ember.clear_reports()
    values = _RANDOM_OPS.match(case["op"]) is None
    grad = case["mode"] == "bwd"
    runner = _backward if grad else _call
    torch.manual_seed(2)
    ref, ref_err = runner(fn, *_clone((args, kwargs), grad))
    if accepted is not None:
        accepted.append(ref_err is None)
    if grad and ref is None and ref_err is None:
        return "skip", "no differentiable output", 0, []
    compiled = _compile(fn, case["backend"], case.get("target", "cpu"))
    torch.manual_seed(2)
    out, err = runner(compiled, *_clone((args, kwargs), grad))
    graphs = int(torch._dynamo.utils.counters["stats"].get("unique_graphs", 0))
    fb_ops, why = _ember_fallbacks() if case["backend"] == "ember" else ([], "")
    if ref_err is not None or err is not None:
        if ref_err is None:
            return "error", f"eager ok, compiled raised {_one_line(err)}", graphs, fb_ops
        if err is None:
            return "error", f"eager raised {_one_line(ref_err)}, compiled did not", graphs, fb_ops
        # Another exception type counts against the backend only if the backend ran: when
        # Dynamo's own tracing (fake tensors) raised, every backend sees the same error.
        backend_ran = torch._dynamo.utils.counters["aot_autograd"].get("total", 0) > 0
        if backend_ran and not _same_error(err, ref_err):
            return ("error", f"eager {type(ref_err).__name__}, compiled {_one_line(err)}",
                    graphs, fb_ops)
        # Both raised the same error: what the user sees is eager's, whether the backend
        # compiled the graph or ran it eagerly to raise (ember does when eager's kernel refuses
        # the inputs: eager_rejects.py), so it is not counted as a fallback.
        return "pass", "", graphs, []
    else:
        d = diff(out, ref, "grad" if grad else "out", values)
        status, reason = ("mismatch", d) if d else ("pass", "")
    if status == "pass" and fb_ops:
        status, reason = "fallback", f"{sorted(set(map(str, fb_ops)))} {why}"
    return status, reason, graphs, fb_ops


def run_case(case: dict, progress=None) -> dict:
    """Every sample of one case; `progress(text)` is told which sample starts (so a crash names
    the sample that killed the process)."""
    import torch
    start = time.time()
    # zero_size: samples with an input without elements that eager ran (raised on: not counted)
    result = dict(case, status="skip", reason="", samples=0, graphs=0, fallback_ops=[],
                  zero_size=0)
    op = op_table().get((case["op"], case["variant"]))
    if op is None:
        return dict(result, status="error", reason="no such OpInfo")
    dtype = getattr(torch, case["dtype"])
    if dtype not in op.supported_dtypes("cpu"):
        return dict(result, reason=f"{case['dtype']} unsupported on cpu")
    if case["mode"] == "bwd" and not (op.supports_autograd
                                      and dtype in op.supported_backward_dtypes("cpu")):
        return dict(result, reason="no autograd for this dtype")
    try:
        todo = samples(op, case["dtype"], case["mode"], case.get("limit", 3))
    except Exception as e:  # noqa: BLE001 - a broken sample generator is not ember's failure
        return dict(result, reason=f"sample_inputs raised {_one_line(e)}")

    def fn(*a, **k):
        return op.op(*a, **k)
    for i, (args, kwargs, desc) in enumerate(todo):
        if progress:
            progress(f"sample {i}: {desc}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            accepted = []
            try:
                status, reason, graphs, fb = run_sample(case, fn, args, kwargs, accepted)
            except Exception as e:  # noqa: BLE001 - the harness itself must not stop the sweep
                status, reason, graphs, fb = ("error", "harness: " + _one_line(e) + " | " +
                                              traceback.format_exc(limit=2)[-200:], 0, [])
        if status == "skip":
            continue
        result["samples"] += 1
        result["graphs"] += graphs
        if accepted and accepted[0] and has_empty((args, kwargs)):
            result["zero_size"] += 1
        result["fallback_ops"] = sorted(set(result["fallback_ops"]) | set(map(str, fb)))
        if _RANK[status] < _RANK[result["status"]]:
            result["status"] = status
            result["reason"] = f"sample {i} ({desc}): {reason}" if status != "pass" else ""
    result["seconds"] = round(time.time() - start, 2)
    return result
