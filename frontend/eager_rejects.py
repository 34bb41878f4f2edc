"""Ops that eager's kernels reject for their dtypes: such a graph runs as eager runs it, so that
the call raises eager's own error (type and message) instead of computing something.

Eager refuses some (op, dtype) pairs in its device kernels only (`relu` of bool: "Boolean inputs
not supported for relu"; `round` of bool: "round_vml_cpu" not implemented for 'Bool'; `|` of
half; `div(rounding_mode="trunc")` of bool), not in the meta functions that Dynamo and
AOTAutograd trace with, so the ATen graph holds them and a compiler would happily compute them.

Invariant: `rejection(gm)` is None for a graph whose every op eager's kernels accept for its
inputs' dtypes and devices (then nothing changes), else the reason of the first op they reject;
the caller then runs the graph eagerly, which raises eager's error at call time.

How an (op, arguments) pair is judged, once per process (verdicts are cached by op, input
dtypes, devices, ranks and the non-tensor arguments; with the program cache on, torch's own
ops' verdicts are kept in the cache too, `keep_verdicts`, so that a warm start probes nothing
again): the op runs on tiny tensors of the same dtypes and devices (each dim min(size, 1):
emptiness and broadcasting are kept, sizes are not).
  * on the meta device first: if that fails, the tiny shapes do not fit the op's other
    arguments (a view's sizes, a kernel window): no verdict, the op is accepted;
  * then on the real device, filled with zeros and, if that fails, with ones: an error that
    depends on values (an integer division by zero, an index past a dim of size 1, an assert)
    fails for one fill only and is left to run time, where it is handled as the program's
    error (compile.EmberGraph._failed_at_run_time);
  * an error with both fills is the kernel refusing the dtypes only if the same tiny probe
    runs with other dtypes (float32 or int64 inputs): a meta function need not check shapes
    (convolution_backward's does not), and a kernel refusing the tiny shapes refuses them
    whatever the dtypes.
  * a Python bool or float among the arguments is an argument type too (`x - True`:
    "Subtraction ... with a bool tensor is not supported" whatever the tensor's dtype;
    `-2.5 | int_t`: "bitwise_or_cpu" not implemented for 'Float'): one control reads them as
    ints.
Decompositions hide ops: `gelu` of int64, `_log_softmax` of int64 become arithmetic eager would
never run. `guard(op, decomposition)` (backend.decomposition_table wraps every entry) judges
the op before it is decomposed and keeps a rejected op whole (NotImplemented), so that
`rejection` finds it in the traced graph. The decomposition runs inside AOTAutograd's tracing
modes (fake tensors, the proxy mode, functionalization: thread-local), so its probe runs in a
thread of its own, where none of them is active.
Tensors without elements (issue 8): eager's kernels check shapes that the meta functions skip
(`native_batch_norm` of an empty input: "input tensor must have at least one element";
`_softmax_backward_data` of [0] beside [1]; `diagonal_scatter` of a [10] source into an empty
slice; a [5] boolean mask of a [0, 5] tensor), and a graph on empty tensors computes nothing, so
ember (fold_zero_size) and Inductor returned a result where eager raises. An op reading or
making a tensor without elements is therefore also probed at its exact static shapes, when they
are small (_MAX_PROBE_NUMEL): failing with both fills there is eager's shape error (cached by
shapes too).
A wrong verdict costs speed, never a wrong answer: the graph runs eagerly. Random ops (the probe
would consume the user's random numbers), views (no kernel), ops without tensor inputs and ops
whose tiny result would still be large are not probed. Nor are convolutions of floating, non-empty
GPU tensors (_gpu_library_call): on a GPU they are always eager's own cuDNN kernel, called by the
compiled program, so whatever that kernel refuses it refuses there too, and the call is handled
as the program's error (eager redoes it and raises); their probes were the cost, cuDNN setting
up a plan for each argument set (efficientnet_b0's first training call on an H200: 42 probes
of convolution_backward, 5.4 s).
"""
from __future__ import annotations

import math
import operator
import threading
import warnings

import torch
import torch.fx as fx
from torch.fx.node import map_aggregate

_VERDICTS: dict[tuple, str | None] = {}
_LOCK = threading.Lock()
_MAX_PROBE_NUMEL = 1 << 16     # a tiny probe whose result is larger is not tiny: not probed


class _Skip(Exception):
    """The node is not probed (no verdict: accepted)."""


def _dim(d) -> int:
    return min(d, 1) if type(d) is int else 1      # a symbolic size: taken as non-empty


class _TensorSpec:
    __slots__ = ("shape", "dtype", "device")

    def __init__(self, val: torch.Tensor):
        # FakeTensor's `device` property is slow; its `fake_device` is the same device
        device = getattr(val, "fake_device", None) or val.device
        if device.type == "meta" or val.layout != torch.strided or val.is_quantized:
            raise _Skip
        self.shape, self.dtype, self.device = val.shape, val.dtype, device

    def key(self) -> tuple:
        return (self.dtype, self.device.type, len(self.shape))

    def retyped(self, dtype: torch.dtype) -> "_TensorSpec":
        spec = _TensorSpec.__new__(_TensorSpec)
        spec.shape, spec.dtype, spec.device = self.shape, dtype, self.device
        return spec

    def make(self, device=None, fill=0, dtype=None, exact=False):
        shape = list(self.shape) if exact else [_dim(d) for d in self.shape]
        return torch.full(shape, fill, dtype=dtype or self.dtype, device=device or self.device)


# Other dtypes for the inputs, to tell a kernel refusing the dtypes from one refusing the tiny
# shapes (a meta function need not check shapes: convolution_backward's does not): the same
# probe with one of these passing means the shapes were fine.
def _canonical(dt: torch.dtype) -> torch.dtype:
    if dt in (torch.float32, torch.int64, torch.bool):
        return dt
    return torch.float32 if dt.is_floating_point or dt.is_complex else torch.int64


_CONTROLS = (_canonical, lambda dt: torch.float32, lambda dt: torch.int64)
_SAME = object()    # the control that keeps the dtypes and reads Python bools, floats as ints
# ... and one that makes the tensors float32 and reads them as ints (`x - True`: a bool on
# either side is refused, so neither of the others runs)
_BOTH = object()


# Ops that a GPU program always runs as eager's own kernel (a library call), with the dtypes
# eager's kernel accepts for floating inputs: no probe there (see the module docstring).
_GPU_LIBRARY_OPS = frozenset({torch.ops.aten.convolution.default,
                              torch.ops.aten.convolution_backward.default})
_FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def _gpu_library_call(op, args, kwargs) -> bool:
    """Whether `op` is a GPU library call (_GPU_LIBRARY_OPS) whose tensor arguments are all
    floating, on a GPU and non-empty (an empty one is probed at its exact shapes as before)."""
    if op not in _GPU_LIBRARY_OPS:
        return False
    return all(s.device.type == "cuda" and s.dtype in _FLOATING
               and all(type(d) is not int or d > 0 for d in s.shape)
               for s in _specs(args, kwargs))


def _key_and_specs(op, args, kwargs):
    """(cache key, args, kwargs) with each tensor argument (a value, fake or real, or an FX
    node holding one in meta["val"]) replaced by a _TensorSpec."""
    key: list = [id(op)]     # overloads are singletons; hashing one is slow
    found = []

    def spec(a):
        if isinstance(a, fx.Node):
            a = a.meta.get("val")
            if not isinstance(a, torch.Tensor):
                raise _Skip                    # a symbolic size or a tuple: not judged here
        if isinstance(a, torch.Tensor):
            s = _TensorSpec(a)
            found.append(s)
            key.append(s.key())
            return s
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise _Skip
        # type and value: True and 1 are equal keys, not equal arguments
        key.append((type(a), a) if isinstance(a, (int, float, bool, str, type(None)))
                   else repr(a))
        return a

    args = map_aggregate(args, spec)
    kwargs = map_aggregate(dict(kwargs), spec)
    if not found:
        raise _Skip
    return tuple(key), args, kwargs


def _run(op, args, kwargs, device=None, fill=0, retype=None, exact=False):
    def make(a):
        if isinstance(a, _TensorSpec):
            dtype = (torch.float32 if retype is _BOTH else
                     retype(a.dtype) if retype not in (None, _SAME) else None)
            return a.make(device, fill, dtype, exact)
        if retype in (_SAME, _BOTH) and type(a) in (bool, float) and math.isfinite(a):
            return int(a)
        return a
    return op(*map_aggregate(args, make), **map_aggregate(kwargs, make))


def _runs(op, args, kwargs, retype=None, exact=False) -> bool:
    """Whether the tiny (or `exact`) probe runs, filled with zeros or else with ones."""
    for fill in (0, 1):
        try:
            _run(op, args, kwargs, fill=fill, retype=retype, exact=exact)
            return True
        except Exception:  # noqa: BLE001
            pass
    return False


def _numel(out) -> int:
    total = 0

    def count(x):
        nonlocal total
        if isinstance(x, torch.Tensor):
            total += x.numel()
        return x
    map_aggregate(out if isinstance(out, (tuple, list)) else (out,), count)
    return total


_PROBED: dict[int, bool] = {}     # id(op overload) -> whether its calls are probed


def _probed(op) -> bool:
    known = _PROBED.get(id(op))
    if known is not None:
        return known
    if not isinstance(op, torch._ops.OpOverload) or op is operator.getitem:
        return False
    returns = op._schema.returns
    known = torch.Tag.nondeterministic_seeded not in op.tags and not (
        returns and returns[0].alias_info is not None and not op._schema.is_mutable)
    _PROBED[id(op)] = known
    return known


# Backward ops whose saved statistics the trace types as the input (torch's meta: bf16 under
# bf16 autocast) where eager's forward kernel returns them in the weight's dtype (f32): eager's
# CPU native_batch_norm_backward refuses bf16 statistics beside an f32 weight ("mixed dtype
# (CPU): expect parameter to have scalar type of Float"), which eager itself never hands it.
# op -> (positions of the statistics, position of the weight); judged with the statistics in
# the weight's dtype.
_SAVED_STATISTICS = {torch.ops.aten.native_batch_norm_backward.default: ((5, 6), 2)}


def _statistics_as_eager(op, args):
    """`args` with a backward op's saved statistics in the dtype eager's forward gives them
    (_SAVED_STATISTICS), or None when that changes nothing."""
    where = _SAVED_STATISTICS.get(op)
    if where is None or len(args) <= max(where[0]):
        return None
    weight = args[where[1]]
    if not isinstance(weight, _TensorSpec):
        return None
    out, changed = list(args), False
    for i in where[0]:
        stat = args[i]
        if isinstance(stat, _TensorSpec) and stat.dtype != weight.dtype:
            out[i], changed = stat.retyped(weight.dtype), True
    return tuple(out) if changed else None


def _judge(op, args, kwargs) -> str | None:
    try:
        meta = _run(op, args, kwargs, device="meta")
    except Exception:  # noqa: BLE001 - the tiny shapes do not fit: no verdict ...
        # ... unless other dtypes make them fit: a meta function that checks the dtypes itself
        # (`sub` of two bools, `x - True`: fuzz seed 60 index 1200 computed what eager refuses)
        meta = None
        for retype in _CONTROLS:
            try:
                meta = _run(op, args, kwargs, device="meta", retype=retype)
                break
            except Exception:  # noqa: BLE001
                continue
        if meta is None:
            return None
    if _numel(meta) > _MAX_PROBE_NUMEL:
        return None
    if _runs(op, args, kwargs):
        return None
    as_eager = _statistics_as_eager(op, args)
    if as_eager is not None and _runs(op, as_eager, kwargs):
        return None     # eager's own statistics are accepted: the trace's typing is no call
    try:
        _run(op, args, kwargs, fill=1)
    except Exception as err:  # noqa: BLE001 - eager's kernel refuses these dtypes, or shapes
        error = err
    else:
        return None
    dtypes = [a.dtype for a in _specs(args, kwargs)]
    scalars = _has_typed_scalar((args, kwargs))
    for retype in (*_CONTROLS, _SAME, _BOTH):
        if retype is _SAME:
            changed = scalars
        elif retype is _BOTH:
            changed = scalars or any(d != torch.float32 for d in dtypes)
        else:
            changed = [retype(d) for d in dtypes] != dtypes
        if changed and _runs(op, args, kwargs, retype):
            first = (str(error).strip().splitlines() or [""])[0]
            return f"{type(error).__name__}: {first[:200]}"
    return None      # no dtype makes these tiny shapes run: the shapes, not the dtypes


def _empty_shapes(args, kwargs) -> tuple | None:
    """The exact shapes of the tensor arguments when one has no elements and all are static
    and small (the exact-shape probe), else None. Not for ops reading integer indices with
    elements: their errors depend on the values (an index into an empty dim), which the
    compiled program checks at run time (and a decomposed upsampling's `_unsafe_index` would
    raise another type than the user's op)."""
    specs = _specs(args, kwargs)
    shapes = tuple(tuple(s.shape) for s in specs)
    if not any(0 in sh for sh in shapes) or \
            any(type(d) is not int for sh in shapes for d in sh):
        return None
    if any(not (s.dtype.is_floating_point or s.dtype.is_complex or s.dtype == torch.bool)
           and 0 not in tuple(s.shape) for s in specs):
        return None
    if sum(math.prod(sh) for sh in shapes) > _MAX_PROBE_NUMEL:
        return None
    return shapes


def _library_op(op) -> bool:
    """An FFT: fold_zero_size keeps one that raises on an empty tensor as the library call it
    is (zero_size._library_raises), which raises eager's error inside the compiled program, so
    its shapes need no probe (other library ops on empty tensors are folded away)."""
    from .complex_values import COMPLEX_LIBRARY_OPS
    return str(op) in COMPLEX_LIBRARY_OPS


def _judge_exact(op, args, kwargs) -> str | None:
    """Eager's error for these exact (small, static, some empty) shapes, or None."""
    try:
        meta = _run(op, args, kwargs, device="meta", exact=True)
    except Exception:  # noqa: BLE001 - the meta function refuses them: Dynamo raised already
        return None
    if _numel(meta) > _MAX_PROBE_NUMEL:
        return None
    for fill in (0, 1):
        try:
            out = _run(op, args, kwargs, fill=fill, exact=True)
        except Exception:  # noqa: BLE001 - the other fill, then the checks below
            continue
        return _other_shapes(meta, out)
    as_eager = _statistics_as_eager(op, args)
    if as_eager is not None and _runs(op, as_eager, kwargs, exact=True):
        return None
    try:
        _run(op, args, kwargs, exact=True)
    except Exception as err:  # noqa: BLE001 - eager's kernel refuses these shapes
        first = (str(err).strip().splitlines() or [""])[0]
        return f"{type(err).__name__}: {first[:200]}"
    return None


def _shapes(out) -> list:
    found = []
    map_aggregate(out if isinstance(out, (tuple, list)) else (out,),
                  lambda x: found.append(tuple(x.shape)) if isinstance(x, torch.Tensor) else x)
    return found


def _other_shapes(meta, out) -> str | None:
    """Where eager's kernel returns other shapes than its meta function (which the trace
    follows) for tensors without elements: `pixel_unshuffle` of a [0, 1, 6, 6] tensor is
    eager's clone of it, [0, 1, 6, 6], where the meta function says [0, 9, 2, 2]. Such a graph
    runs eagerly: a compiled one would return the meta function's shape."""
    want, got = _shapes(meta), _shapes(out)
    if want == got:
        return None
    return f"{_OTHER_SHAPES} {got} where its meta function says {want}"


_OTHER_SHAPES = "eager returns shapes"


def _has_typed_scalar(tree) -> bool:
    """Whether a Python bool or float is among the arguments (the _SAME control reads them as
    ints)."""
    found = []
    map_aggregate(tree, lambda a: found.append(a) if type(a) in (bool, float) else a)
    return bool(found)


def _specs(args, kwargs) -> list:
    found = []

    def visit(a):
        if isinstance(a, _TensorSpec):
            found.append(a)
        return a
    map_aggregate((args, kwargs), visit)
    return found


def outside_tracing(fn):
    """`fn()` in a thread of its own, under no_grad: no fake mode, proxy mode or
    functionalization is active there (they are thread-local), whatever the caller is tracing.
    Its exception is raised here."""
    result: list = [None, None]

    def run():
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result[0] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            result[1] = err
    thread = threading.Thread(target=run, name="ember-outside-tracing", daemon=True)
    thread.start()
    thread.join()
    if result[1] is not None:
        raise result[1]
    return result[0]


def judge(op, args, kwargs) -> str | None:
    """None when eager's kernel accepts `op` for these arguments' dtypes (or when that cannot
    be told from a tiny probe), else eager's error, as `Type: message`. Tensor arguments may be
    fake (only their dtypes, devices and ranks are used) or FX nodes holding one."""
    if not _probed(op):
        return None
    try:
        key, args, kwargs = _key_and_specs(op, args, kwargs)
    except _Skip:
        return None
    if _gpu_library_call(op, args, kwargs):
        return None
    shapes = _empty_shapes(args, kwargs) if not _library_op(op) else None
    if shapes is not None:
        key = key + ("exact", shapes)
    with _LOCK:
        if key in _VERDICTS:
            return _VERDICTS[key]
    stable = _stable_key(op, key) if _STORE is not None else None
    if stable is not None and stable in _STORE["known"]:
        why = _STORE["known"][stable]
        with _LOCK:
            _VERDICTS[key] = why
        return why

    def judged():
        why = _judge(op, args, kwargs)
        if why is None and shapes is not None:
            why = _judge_exact(op, args, kwargs)
        return why
    why = outside_tracing(judged)
    with _LOCK:
        _VERDICTS[key] = why
        if stable is not None:
            _STORE["known"][stable] = why
            _STORE["new"] = True
    return why


# ---------------------------------------------------------------------------------------------
# Verdicts kept across processes: a warm start (the program cache on) probes nothing again.
# On a GPU each probe is a device launch, most of them the first of their kernel in the
# process (0.2-0.6 s a model); a verdict depends on the op, its arguments' kinds, torch's
# kernels and the device, all in its key or in the file's name.

_STORE: dict | None = None     # {"path": Path, "known": {stable key: verdict}, "new": bool}


def keep_verdicts(root) -> None:
    """Read verdicts from, and write new ones to, `root/eager-verdicts/<identity>.json`
    (`identity`: ember's sources and the versions of torch and its libraries,
    program_cache.code_identity) from now on in this process. A file that cannot be read
    is a cache miss."""
    global _STORE
    import json
    from pathlib import Path
    from .program_cache import code_identity
    root = Path(root).expanduser()
    if _STORE is not None and _STORE["root"] == root:
        return
    path = root / "eager-verdicts" / f"{code_identity()[:32]}.json"
    known: dict = {}
    try:
        known = {str(k): (None if v is None else str(v))
                 for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        pass
    _STORE = {"root": root, "path": path, "known": known, "new": False}


def flush_verdicts() -> None:
    """Write the verdicts found since the last flush (merged with the file as it is now: other
    processes write it too; the last writer's view wins, a lost verdict is probed again)."""
    store = _STORE
    if store is None or not store["new"]:
        return
    import json
    from ..runtime.cache import atomic_write
    with _LOCK:
        known, store["new"] = dict(store["known"]), False
    try:
        try:
            known = {**json.loads(store["path"].read_text()), **known}
        except (OSError, ValueError):
            pass
        store["path"].parent.mkdir(parents=True, exist_ok=True)
        atomic_write(store["path"], json.dumps(known, sort_keys=True))
    except OSError:
        pass    # a cache: the verdicts are probed again next time


_GPU_NAMES: dict[str, str] = {}


def _device_identity(kind: str) -> str:
    """A device type as verdicts depend on it: for a GPU, its name and capability."""
    if kind != "cuda":
        return kind
    name = _GPU_NAMES.get(kind)
    if name is None:
        name = _GPU_NAMES[kind] = (f"cuda:{torch.cuda.get_device_name()}:"
                                   f"{torch.cuda.get_device_capability()}:{torch.version.cuda}")
    return name


def _stable_key(op, key: tuple) -> str | None:
    """`key` (whose first part is the op's id) as text that means the same in another process,
    or None where a part has no such text (an object's repr with its address) or the op is
    not torch's own (a user's custom op may change between processes)."""
    if getattr(op, "namespace", None) not in ("aten", "prims"):
        return None
    parts: list = [str(op)]
    for part in key[1:]:
        if isinstance(part, tuple) and len(part) == 3 and isinstance(part[0], torch.dtype):
            part = (part[0], _device_identity(part[1]), part[2])     # a _TensorSpec's key
        parts.append(part)
    text = repr(parts)
    return None if " at 0x" in text else text


def verdict(node: fx.Node) -> str | None:
    """`judge` of a graph node's op with its arguments."""
    if node.op != "call_function":
        return None
    return judge(node.target, node.args, node.kwargs)


def guard(op, decomposition):
    """`decomposition` of `op`, unless eager's kernel rejects `op` for the arguments' dtypes:
    then the op stays whole (NotImplemented), for `rejection` to find in the traced graph."""
    if not (isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"):
        return decomposition

    def guarded(*args, **kwargs):
        if judge(op, args, kwargs) is not None:
            return NotImplemented
        return decomposition(*args, **kwargs)
    guarded.__wrapped__ = decomposition
    guarded.__name__ = getattr(decomposition, "__name__", "decomposition")
    return guarded


def rejection(gm: fx.GraphModule) -> str | None:
    """The reason eager rejects the first op of `gm` that its kernels refuse, or None. New
    verdicts (this graph's and those of the decompositions that traced it) are written to
    the kept verdicts (`keep_verdicts`) before it returns."""
    try:
        for node in gm.graph.nodes:
            why = verdict(node)
            if why is not None:
                dtypes = ", ".join(str(a.meta["val"].dtype).replace("torch.", "")
                                   for a in node.all_input_nodes
                                   if isinstance(a.meta.get("val"), torch.Tensor))
                verb = "differs on" if why.startswith(_OTHER_SHAPES) else "rejects"
                return f"eager {verb} {node.target} for ({dtypes}): {why}"
        return None
    finally:
        flush_verdicts()


# ---------------------------------------------------------------------------------------------
# Dynamo's graph: torch-level calls on tensors without elements

def _example(a):
    if isinstance(a, fx.Node):
        a = a.meta.get("example_value")
        if a is None:
            raise _Skip
    if isinstance(a, torch.Tensor):
        return _TensorSpec(a)
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _Skip
    return a


def _dynamo_verdict(node: fx.Node) -> str | None:
    if node.op != "call_function" or \
            getattr(node.target, "__module__", None) != "torch.nn.functional":
        return None     # ATen ops are judged by `guard` / `rejection` after AOTAutograd
    try:
        args = map_aggregate(node.args, _example)
        kwargs = map_aggregate(dict(node.kwargs), _example)
        out = node.meta.get("example_value")
    except _Skip:
        return None
    if _empty_shapes(args, kwargs) is None or _numel(out) > _MAX_PROBE_NUMEL:
        return None
    fn = node.target

    def probe():
        error = None
        for fill in (0, 1):
            with torch.random.fork_rng(devices=[]):     # a random op keeps the user's stream
                try:
                    _run(fn, args, kwargs, fill=fill, exact=True)
                    return None
                except Exception as err:  # noqa: BLE001 - eager's kernel refuses the shapes
                    error = err
        first = (str(error).strip().splitlines() or [""])[0]
        return f"{type(error).__name__}: {first[:200]}"
    try:
        return outside_tracing(probe)
    except Exception:  # noqa: BLE001 - the probe itself failed: no verdict
        return None


def dynamo_rejection(gm: fx.GraphModule) -> str | None:
    """Why eager raises on a call of Dynamo's graph `gm` that reads or makes a tensor without
    elements, at its exact (static, small) shapes, or None. Some ops decompose before any
    decomposition table sees them (upsampling, at its Autograd key: `interpolate` of a [2, 0, 4]
    tensor, which eager refuses with "Non-empty 3D data tensor expected"), so `guard` cannot
    keep them; the calls of torch.nn.functional's Python functions are judged here, on Dynamo's
    graph, and such a graph runs eagerly.
    Calls run on fresh tensors of zeros (then ones) under a forked random state; only graphs
    with an empty tensor pay for it."""
    for node in gm.graph.nodes:
        why = _dynamo_verdict(node)
        if why is not None:
            name = getattr(node.target, "__name__", str(node.target))
            return f"eager rejects {name} at its shapes without elements: {why}"
    return None
