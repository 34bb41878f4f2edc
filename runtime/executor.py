"""Run a Program: build/load its code once, then per call allocate one arena and run the steps.

Everything that does not depend on the input tensors (ctypes bindings, the int64 sizes arrays,
arena view geometry, constants, extern resolution) is computed in `load`, so a call is a loop
over prebuilt closures.
"""
from __future__ import annotations

import ctypes
import functools
import math
import operator
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

import contextvars

from .cache import ArtifactCache, as_cache
from .cpp_build import load_library
from .env import triton_interpreted
from .externs import extern_result_shape, resolve, resolve_library
from .fast_views import reinterpret
from .kernel_errors import error_for
from .program import Program, Step, ValueInfo
from .py_module import load_python_module

# ids of the tensors passed to the running call that its caller may still read after it (a
# backward's gradient inputs, donated where nothing but the call holds them: the frontend's
# backward wrapper sets this): their memory is neither reused nor freed by the call.
BORROWED: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "ember_borrowed_inputs", default=frozenset())

_ARENA_ALIGN = 64


def _quiet_ieee(launch: Callable) -> Callable:
    """The Triton interpreter computes with NumPy, which warns (RuntimeWarning: divide by zero,
    invalid value) wherever IEEE arithmetic gives an inf or a NaN, as in lanes a mask leaves
    out (log(0) on padding) or a real log(0); a GPU kernel, like eager torch, gives the same
    values silently, so an interpreted launch does too."""
    import functools

    import numpy as np

    @functools.wraps(launch)
    def quiet(*args, **kwargs):
        with np.errstate(all="ignore"):
            return launch(*args, **kwargs)
    return quiet


def _dtype(name: str) -> torch.dtype:
    if name == "index":         # a host scalar (a size): a Python int at run time
        return torch.int64
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"ember runtime: unknown dtype {name!r}")
    return dt


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class CompiledProgram:
    def __init__(self, program: Program, device: str | torch.device = "cpu", *,
                 cache: ArtifactCache | Path | str | None = None,
                 extra_flags: Sequence[str] = (), reuse_arena: bool = True,
                 parallel_compile: bool = True, precompile_overlap: bool = False,
                 weight_copies: bool = False):
        self.program = p = program
        # A precompile still running (precompile_overlap): each launcher waits for its own
        # kernels' builds before its first launch (`_gated`); None once all are built.
        self._pending = None
        self._gate = precompile_overlap and parallel_compile and p.lang == "python" \
            and torch.device(device).type == "cuda" and not triton_interpreted()
        self.device = dev = torch.device(device)
        if p.lang == "cpp" and dev.type != "cpu":
            raise ValueError(f"ember runtime: C++ programs run on the CPU, not on {dev}")
        if p.lang not in ("cpp", "python"):
            raise ValueError(f"ember runtime: unknown program language {p.lang!r}")
        self._kernels = self._bind_kernels(as_cache(cache), extra_flags)
        # Dynamic shapes: sizes are "vN" (the host scalar N) or None (found at run time).
        self._dynamic = any(v.dtype == "index" or not _static(v.shape) for v in p.values)

        self._dtypes = [_dtype(v.dtype) for v in p.values]
        # outputs written into their inputs' memory (ValueInfo.into_input)
        self._writes_inputs = any(v.into_input is not None for v in p.values)
        self._shared_inputs: set[int] = set()
        # per-call value table, constants prefilled; its last slot holds the call's arena
        # (`_ARENA_SLOT`: freed through it after its last step, `_release_arena`)
        self._init: list = [None] * (len(p.values) + 1)
        self._runs: list[Callable[[list], None]] = []
        self._producer: dict[int, Step] = {}
        self._view_src: dict[int, int] = {}
        self._other_reads = {i for s in p.steps if s.kind != "library" for i in s.inputs}
        self._library_only = frozenset(i for s in p.steps if s.kind == "library"
                                       for i in s.inputs if i not in self._other_reads)
        self._as_is = _strided_inputs(p, self._library_only)
        # Inputs a matmul may read packed by MKL when they are parameters
        # (runtime/weight_copies.py): an inference program's, except those it writes or may
        # overwrite (donated).
        self._weight_inputs = frozenset(range(p.num_inputs)) - {
            v.into_input for v in p.values} - set(p.donated_inputs) \
            if weight_copies and dev.type == "cpu" else frozenset()
        steps_runs = []
        for s in p.steps:
            for o in s.outputs:
                self._producer[o] = s
            steps_runs.append(self._make_step(s))
        self._plan_arena()
        self._check_outputs()
        self._release_after = self._releases()
        self._step_start: list[int] = []    # step k's first entry in self._runs
        self._release_step = {i: k for k, ins in self._release_after.items() for i in ins}
        arena_last = self._arena_last_step()
        self._release_arena_run = None
        self._drop_after = self._drops()
        for k, runs in enumerate(steps_runs):
            self._step_start.append(len(self._runs))
            self._runs.extend(runs)
            if k in self._release_after:
                self._runs.append(functools.partial(self._release, self._release_after[k]))
            if k in self._drop_after:
                self._runs.append(functools.partial(self._drop, self._drop_after[k]))
            if k == arena_last:
                self._release_arena_run = functools.partial(self._release_arena, -1)
                self._runs.append(self._release_arena_run)
        self._in_checks = [(tuple(v.shape), self._dtypes[i]) for i, v in enumerate(p.values[:p.num_inputs])]
        self._dev_type = dev.type
        # (shapes, dtypes, on-device test) of the inputs, for _take_inputs' fast path
        on_device = {"cpu": _IS_CPU, "cuda": _IS_CUDA}.get(dev.type)
        self._fast_inputs = None
        if on_device is not None and not self._dynamic and \
                not any(v.dtype == "index" for v in p.values[:p.num_inputs]):
            self._fast_inputs = (
                [torch.Size(shape) for shape, _ in self._in_checks],
                [dt for _, dt in self._in_checks], on_device,
                [self._as_is.get(i) or _contiguous_strides(shape)
                 for i, (shape, _) in enumerate(self._in_checks)])
        # 0-dim CPU inputs of a GPU graph (efficient attention's philox seed and offset, Python
        # scalars lifted to tensors): passed as they are to library calls, which expect them
        # there; moved to the device when a kernel or extern reads them.
        on_device = {i for s in p.steps if s.kind != "library" for i in s.inputs}
        self._host_scalar_ok = dev.type != "cpu"
        self._host_scalar_moves = {i for i in range(p.num_inputs) if i in on_device}
        # Donated inputs freed after their last use (see _releases); per call, those whose
        # storage is theirs alone (_carve_inputs).
        self.release_inputs = True
        # A call's arena is freed after the last step that uses it (`_arena_last_step`), when
        # it is the call's own (not pooled for the next call, as on the CPU): the outputs
        # made after it (a backward's last gradients) may take its memory.
        self.release_arena = True
        self._releasable: set[int] = set()
        self._pool: list[list] | None = [] if dev.type == "cpu" and reuse_arena else None
        # Outputs planned in a donated input's memory are handed out there (the caller keeps
        # that input's memory with them); False gives them memory of their own.
        self.outputs_in_inputs = True
        # The same for an input in a graphed forward's pool (pooled_storage), instead of
        # `outputs_in_inputs`: such outputs keep that graph from replaying while they live
        # (its liveness guard). Off by default; a graphed backward turns it on and hands them
        # out as views it rebuilds per replay, holding none itself (runtime/cuda_graphs.py).
        self.outputs_in_pools = False
        self._precompiled: dict | None = None
        if parallel_compile and p.lang == "python" and dev.type == "cuda" \
                and not triton_interpreted() and self._module is not None:
            self._precompile()

    @property
    def precompiled(self) -> dict | None:
        """The precompile's result (runtime/triton_warm.precompile); while an overlapped one
        is still building, {"pending": True} (nothing waits for it here)."""
        pending = self._pending
        if pending is not None:
            if not pending.done.is_set():
                return {"ok": 0, "errors": [], "pending": True}
            self._precompiled = pending.result
        return self._precompiled

    def _gated(self, name: str, fn: Callable) -> Callable:
        """`fn` (a Triton launcher) that first waits, while an overlapped precompile runs, for
        the builds of its own kernels (their requests answered, compiled or failed)."""
        def gated(*args, **kwargs):
            pending = self._pending
            if pending is not None:
                if pending.done.is_set():
                    self._precompiled, self._pending = pending.result, None
                else:
                    pending.wait_launcher(name)
            return fn(*args, **kwargs)
        gated.__wrapped__ = fn
        for attr in ("ember_checked",):
            if hasattr(fn, attr):
                setattr(gated, attr, getattr(fn, attr))
        return gated

    @property
    def freed_inputs(self) -> int:
        """How many donated inputs a call frees after their last use (when they are its own)."""
        return sum(len(v) for v in self._release_after.values())

    @property
    def arena_bytes(self) -> int:
        """Bytes of the arena each call allocates (the planned one rounded up to _ARENA_ALIGN;
        0 without planned values): the runtime's share of a call's peak beyond its inputs and
        the outputs it hands back."""
        return self._arena_bytes

    # ---- load-time preparation -------------------------------------------------------------
    def _bind_kernels(self, cache: ArtifactCache, extra_flags: Sequence[str]) -> dict[str, Callable]:
        p = self.program
        out: dict[str, Callable] = {}
        self._module = None
        self._error_record = None     # kernels' error record (runtime/kernel_errors.py)
        self._checked: set[str] = set()
        if p.lang == "cpp":
            lib = load_library(p.source, extra_flags, cache=cache) if p.kernel_names else None
            if lib is not None and hasattr(lib, "ember_error_record"):
                lib.ember_error_record.restype = ctypes.POINTER(ctypes.c_int64 * 4)
                self._error_record = lib.ember_error_record().contents
                # a kernel with checks exports `NAME_checked` (passes/cpp_emitter.py)
                self._checked = {n for n in p.kernel_names if hasattr(lib, f"{n}_checked")}
            for name in p.kernel_names:
                try:
                    out[name] = getattr(lib, name)
                except AttributeError:
                    raise ValueError(f"ember runtime: kernel {name!r} is not defined (extern \"C\") "
                                     f"in the built translation unit") from None
                out[name].restype = None
        else:
            mod = load_python_module(p.source, cache) if p.kernel_names else None
            self._module = mod
            for name in p.kernel_names:
                fn = getattr(mod, name, None)
                if not callable(fn):
                    raise ValueError(f"ember runtime: kernel launcher {name!r} not in the module")
                out[name] = _quiet_ieee(fn) if triton_interpreted() else \
                    self._gated(name, fn) if self._gate else fn
                # On a GPU a failed check is a device-side assert; the interpreter's record is
                # read after the launch (reading a GPU's would synchronize every call).
                if getattr(fn, "ember_checked", False) and triton_interpreted():
                    self._checked.add(name)
                    self._error_record = mod._ember_error_buffer(self.device)
        return out

    def _precompile(self) -> None:
        """Compiles every kernel launch of the first call (every autotuning configuration) in
        worker processes, into Triton's disk cache (runtime/triton_warm.py); never raises."""
        from .triton_warm import precompile
        p, launches, seen = self.program, [], set()
        for s in p.steps:
            if s.kind != "kernel":
                continue
            args = []
            for i in tuple(s.inputs) + tuple(s.outputs):
                off = p.values[self._root(i)].offset
                args.append((tuple(p.values[i].shape), self._dtypes[i], off or 0))
            key = (s.name, tuple((a[0], str(a[1]), a[2] % 16) for a in args))
            if key not in seen:
                seen.add(key)
                launches.append((s.name, args))
        from .triton_warm import PendingPrecompile
        got = precompile(self._module, launches, self.device, overlap=self._gate)
        if isinstance(got, PendingPrecompile):
            self._pending = got
        else:
            self._precompiled = got

    def _alloc_runs(self, outputs: Sequence[int]) -> list[Callable[[list], None]]:
        """Outputs without an arena offset get their own tensor, allocated when produced."""
        runs = []
        for o in outputs:
            v = self.program.values[o]
            if v.offset is None and not _static(v.shape):
                if None in v.shape:
                    continue            # sized by the step that makes it
                shape, dt, dev = tuple(v.shape), self._dtypes[o], self.device

                def alloc_dyn(vals, o=o, shape=shape, dt=dt, dev=dev):
                    vals[o] = torch.empty(_resolve(shape, vals), dtype=dt, device=dev)
                runs.append(alloc_dyn)
            elif v.offset is None and v.into_input is not None:
                shape, dt, dev = tuple(v.shape), self._dtypes[o], self.device

                def alloc_into(vals, o=o, i=v.into_input, shape=shape, dt=dt, dev=dev):
                    t = vals[i]     # the input (or its contiguous copy: _take_inputs)
                    if (t.shape == shape and t.dtype == dt and t.is_contiguous()
                            and t.data_ptr() not in self._shared_inputs):
                        vals[o] = t
                    else:
                        vals[o] = torch.empty(shape, dtype=dt, device=dev)
                runs.append(alloc_into)
            elif v.offset is None:
                shape, dt, dev = tuple(v.shape), self._dtypes[o], self.device

                def alloc(vals, o=o, shape=shape, dt=dt, dev=dev):
                    vals[o] = torch.empty(shape, dtype=dt, device=dev)
                runs.append(alloc)
        return runs

    def _make_step(self, s: Step) -> list[Callable[[list], None]]:
        p, vals_info = self.program, self.program.values
        if s.kind == "kernel":
            fn = self._kernels.get(s.name)
            if fn is None:
                raise ValueError(f"ember runtime: step calls kernel {s.name!r}, which is not in "
                                 f"Program.kernel_names")
            ids = tuple(s.inputs) + tuple(s.outputs)
            scalars = tuple(s.params.get("scalars", ()))
            if p.lang == "cpp" and (scalars or not all(_static(vals_info[i].shape) for i in ids)):
                fn.argtypes = [ctypes.c_void_p] * len(ids) + [ctypes.POINTER(ctypes.c_int64)]

                def run(vals, fn=fn, ids=ids, scalars=scalars):   # this call's sizes
                    dims = [d for i in ids for d in vals[i].shape] + [vals[i] for i in scalars]
                    fn(*[vals[i].data_ptr() for i in ids],
                       (ctypes.c_int64 * max(len(dims), 1))(*dims))
            elif scalars:
                def run(vals, fn=fn, ids=ids, scalars=scalars):
                    fn(*[vals[i] for i in ids], *[vals[i] for i in scalars])
            elif p.lang == "cpp":
                dims = [d for i in ids for d in vals_info[i].shape]
                sizes = (ctypes.c_int64 * max(len(dims), 1))(*dims)
                fn.argtypes = [ctypes.c_void_p] * len(ids) + [ctypes.POINTER(ctypes.c_int64)]

                def run(vals, fn=fn, ids=ids, sizes=sizes):
                    fn(*[vals[i].data_ptr() for i in ids], sizes)
            else:
                def run(vals, fn=fn, ids=ids):
                    fn(*[vals[i] for i in ids])
            if s.name in self._checked and self._error_record is not None:
                return self._alloc_runs(s.outputs) + [run, self._raise_kernel_error]
            return self._alloc_runs(s.outputs) + [run]
        if s.kind == "extern":
            params = dict(s.params)
            if s.name in _WEIGHT_OPERAND and \
                    s.inputs[_WEIGHT_OPERAND[s.name]] in self._weight_inputs:
                params["weight_copy"] = True
            efn = resolve(s.name, params)
            ins, outs = tuple(s.inputs), tuple(s.outputs)
            if any(None in vals_info[o].shape for o in outs):
                size = extern_result_shape(s.name, dict(s.params))
                (o,) = outs
                dt, dev = self._dtypes[o], self.device

                def run_ext_dyn(vals, efn=efn, ins=ins, o=o, size=size, dt=dt, dev=dev):
                    a = [vals[i] for i in ins]
                    vals[o] = torch.empty(size(a), dtype=dt, device=dev)
                    own = efn(a, [vals[o]])
                    if isinstance(own, list):   # the library's own result (see run_ext)
                        vals[o] = own[0] if own[0].dtype == dt and own[0].is_contiguous() \
                            else vals[o].copy_(own[0])
                return [run_ext_dyn]

            def run_ext(vals, efn=efn, ins=ins, outs=outs):
                own = efn([vals[i] for i in ins], [vals[o] for o in outs])
                for o, t in zip(outs, own if isinstance(own, list) else ()):
                    # the library's own result (see externs.ExternFn): kept when it has the
                    # planned buffer's shape, type and row-major layout, else copied there
                    if t.shape == vals[o].shape and t.dtype == vals[o].dtype \
                            and t.is_contiguous():
                        vals[o] = t
                    else:
                        vals[o].copy_(t)
            return self._alloc_runs(s.outputs) + [run_ext]
        if s.kind == "library":
            lfn = resolve_library(s.name, dict(s.params))
            ins, outs = tuple(s.inputs), tuple(s.outputs)

            dts = tuple(self._dtypes[o] for o in outs)
            # torch's meta functions (which typed the graph) and its kernels disagree now and
            # then on a shape too: CPU `_embedding_bag` (mode sum, its fast path) returns an
            # empty offset2bag where its meta function says one element per index. Harmless
            # where only eager's kernels read the value (its backward rebuilds offset2bag when
            # it is empty); anything else (a kernel, a view) was generated for the declared
            # shape, so a result of another shape is refused there (the graph then runs in
            # eager torch: frontend/compile.py) instead of being read out of bounds.
            checked = tuple((k, vals_info[o].shape) for k, o in enumerate(outs)
                            if o in self._other_reads and _static(vals_info[o].shape))
            name = s.name

            def run_lib(vals, lfn=lfn, ins=ins, outs=outs, dts=dts, checked=checked, name=name):
                res = lfn([vals[i] for i in ins])
                for k, shape in checked:
                    if tuple(res[k].shape) != shape:
                        raise ValueError(f"ember: library call {name} returned result {k} of "
                                         f"shape {list(res[k].shape)}, its meta function says "
                                         f"{list(shape)}")
                for o, dt, t in zip(outs, dts, res):
                    # and the dtype: CPU layer norm of a bf16 input with f32 weights returns
                    # f32 mean/rstd, its meta says bf16. Kernels and the graph read the declared
                    # type.
                    vals[o] = t if t.dtype == dt else t.to(dt)
            return [run_lib]
        if s.kind == "view":
            (i,), (o,) = s.inputs, s.outputs
            shape = tuple(vals_info[o].shape)
            self._view_src[o] = i
            if vals_info[o].dtype != vals_info[i].dtype:    # int8 <-> uint8: same bytes
                dt = self._dtypes[o]

                def run_bitcast(vals, i=i, o=o, dt=dt):
                    vals[o] = vals[i].view(dt)
                return [run_bitcast]

            if s.name == "cast":

                def run_cast(vals, i=i, o=o):
                    vals[o] = vals[i]
                return [run_cast]
            if not _static(shape):
                groups = s.params.get("reassociation")

                shape_from = s.params.get("shape_from")

                def run_view_dyn(vals, i=i, o=o, shape=shape, groups=groups, kind=s.name,
                                 shape_from=shape_from):
                    src = vals[i]
                    if shape_from is not None:      # tensor.reshape: sizes made on the host
                        size = list(vals[shape_from])
                    elif kind == "collapse_shape" and groups is not None:
                        size = [_numel([src.shape[k] for k in g]) for g in groups]
                    else:
                        size = [-1 if d is None else d for d in _resolve(shape, vals)]
                    try:
                        vals[o] = src.view(size)
                    except RuntimeError:
                        vals[o] = src.reshape(size)
                return [run_view_dyn]

            def run_view(vals, i=i, o=o, shape=shape):
                try:
                    vals[o] = vals[i].view(shape)
                except RuntimeError:    # not expressible as a view of these strides: copy
                    vals[o] = vals[i].reshape(shape)
            return [run_view]
        if s.kind == "const":
            (o,) = s.outputs
            self._init[o] = self._make_const(s.params["value"], vals_info[o], self._dtypes[o])
            return []
        if s.kind == "empty":
            return self._alloc_runs(s.outputs)
        if s.kind == "fill":
            (o,) = s.outputs
            shape, dt, dev = tuple(vals_info[o].shape), self._dtypes[o], self.device
            value = s.params["value"]

            def fill(vals, o=o, shape=shape, dt=dt, dev=dev, value=value):
                vals[o] = torch.full(shape, value, dtype=dt, device=dev)
            return [fill]
        if s.kind == "scalar":
            return [_scalar_run(s)]
        raise ValueError(f"ember runtime: unknown step kind {s.kind!r}")

    def _raise_kernel_error(self, vals) -> None:
        """After a kernel that checks its data: raise what it recorded (and clear the record)."""
        rec = self._error_record
        if rec[0]:
            err = error_for(list(rec))
            for k in range(4):
                rec[k] = 0
            raise err

    def _make_const(self, value, v: ValueInfo, dt: torch.dtype) -> torch.Tensor:
        shape = tuple(v.shape)
        t = torch.as_tensor(value, dtype=dt)
        if t.dim() == 0 and shape:     # a splat: filled where it lives
            return torch.full(shape, t.item(), dtype=dt, device=self.device)
        if tuple(t.shape) != shape:
            t = t.reshape(shape)
        return t.to(self.device).contiguous()

    def _plan_arena(self) -> None:
        p = self.program
        returned = {self._root(o) for o in p.outputs}
        self._carve: list[tuple] = []
        # donated input -> (bytes needed, [(value, dtype, shape, byte offset, bytes)])
        self._in_inputs: dict[int, tuple[int, list[tuple]]] = {}
        need = 0
        for vid, v in enumerate(p.values):
            if v.offset is None:
                continue
            if vid < p.num_inputs:
                raise ValueError(f"ember runtime: graph input %{vid} has an arena offset")
            dt = self._dtypes[vid]
            nbytes = _numel(v.shape) * dt.itemsize
            if v.in_input is not None:
                if not 0 <= v.in_input < p.num_inputs or v.offset % _ARENA_ALIGN:
                    raise ValueError(f"ember runtime: value %{vid} in input {v.in_input} at "
                                     f"offset {v.offset}")
                end, carve = self._in_inputs.get(v.in_input, (0, []))
                carve.append((vid, dt, tuple(v.shape), v.offset, nbytes, vid in returned,
                              _contiguous_strides(v.shape)))
                self._in_inputs[v.in_input] = (max(end, v.offset + nbytes), carve)
                continue
            if v.offset % dt.itemsize or v.offset < 0 or v.offset + nbytes > p.arena_bytes:
                raise ValueError(f"ember runtime: value %{vid} at offset {v.offset} "
                                 f"({nbytes} bytes) does not fit the {p.arena_bytes}-byte arena")
            need = max(need, v.offset + nbytes)
            self._carve.append((vid, dt, tuple(v.shape), _contiguous_strides(v.shape),
                                v.offset // dt.itemsize))
        # Rounded so that the uint8 arena can be reinterpreted as any dtype.
        self._arena_bytes = -(-need // _ARENA_ALIGN) * _ARENA_ALIGN if self._carve else 0
        self._arena_dtypes = sorted({c[1] for c in self._carve}, key=str)

    def _root(self, vid: int) -> int:
        while vid in self._view_src:
            vid = self._view_src[vid]
        return vid

    def _check_outputs(self) -> None:
        """The caller keeps outputs past the call, and the next call reuses the arena: an
        output in (or viewing) the arena would be overwritten under the caller's feet. Sets
        `_clone_out`, the output positions handed out as copies."""
        p = self.program
        self._clone_out: set[int] = set()
        roots: set[int] = set()
        for pos, o in enumerate(p.outputs):
            r = self._root(o)
            assert p.values[r].offset is None or p.values[r].in_input is not None, (
                f"ember runtime: output %{o} aliases the arena (root %{r} at offset "
                f"{p.values[r].offset}); the buffer planner must give escaping values offset -1")
            if r not in self._producer and r >= p.num_inputs:
                raise ValueError(f"ember runtime: output %{o} is never produced by a step")
            if self._producer.get(r) is not None and self._producer[r].kind == "const":
                self._clone_out.add(pos)    # constants live across calls: never hand them out
            elif r < p.num_inputs or r in roots:
                # The frontend returns each value once and keeps outputs that alias an input or
                # another output out of the program (they are views made on the host), so this
                # is a copy MLIR folded away (`clone`, `trunc` of an integer, a reduction over
                # no dims): eager returns a new tensor, not the input or the other output.
                self._clone_out.add(pos)
            roots.add(r)

    # ---- per call ------------------------------------------------------------------------
    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        if torch.is_grad_enabled():     # out= refuses tensors that require grad
            with torch.no_grad():
                return self._run(inputs)
        return self._run(inputs)

    def _take_template(self) -> list:
        """The value table with constants and arena views filled in. One arena per call, except
        that on the CPU (synchronous: a finished call no longer touches its arena) a finished
        call's arena, with its views, goes to a pool for the next call: carving costs ~1 us per
        value. Concurrent calls each pop their own; outputs never alias the arena, so reuse is
        invisible to the caller. On GPUs kernels are asynchronous and calls may be on different
        streams, so the caching allocator (stream-aware) gives every call a fresh arena."""
        if self._pool:
            try:
                return self._pool.pop()
            except IndexError:      # another thread took the last one
                pass
        vals = self._init.copy()
        if self._arena_bytes:
            arena = torch.empty(self._arena_bytes, dtype=torch.uint8, device=self.device)
            typed = {dt: arena.view(dt) for dt in self._arena_dtypes}
            # (internal values: no output roots in the arena, so no autograd view is needed)
            for vid, dt, shape, stride, eoff in self._carve:
                vals[vid] = reinterpret(typed[dt], shape, stride, eoff)
            vals[-1] = arena
        return vals

    def tail_split(self, min_bytes: int, arena_free: bool = False,
                   kernel_min_bytes: int = 0) -> tuple | None:
        """Where a CUDA graph may stop: (the tail, the output positions it writes), when the
        program's last computing step (with the views of its results that follow it) writes
        program outputs of at least `min_bytes` together into memory of their own: a
        generated kernel or an extern call (a matmul: a language model's logits) whose
        results are all allocated fresh (no arena offset, static shape, not an input's
        memory), or a library call (torch allocates its results). A graph replays the runs
        before it and runs the tail after each replay, into new memory: those outputs need no
        copy out of the graph's pool (runtime/cuda_graphs.py). None otherwise.

        The tail (opaque: run_head / run_tail / tail_reads take it) also takes the kernels
        that make an arena value it reads from program inputs alone (autocast's bf16 copy of
        the LM head's weight, which the head would otherwise keep in its arena for the tail):
        they run at the tail's start into new memory, so the graph keeps nothing of its arena
        for the tail. Only with `arena_free` (a graph whose pool the next capture shares: a
        training forward); an inference graph keeps those launches in its graph. A value the
        tail reads that the plan put in the arena (the LM head's normalized input; a token
        gradient) gets memory of its own in the head (`_tail_own`), so that what a graph
        keeps for its tail is that value, never the whole arena.

        The last step may also be a library call writing a fill in place (a backward's
        embedding gradient, `scatter_add_` into zeros): the tail then starts at that fill
        (`_fill_tail`), so the gradient is memory the tail allocates, not the graph's.

        A tail whose last step is a generated kernel also needs `kernel_min_bytes` of outputs:
        it is launched from Python, through Triton's launcher, after the replay, which costs
        more host time than a library call's launch, so that on a short graph it is what the
        call waits for."""
        p = self.program
        if self._dynamic or not p.steps or self._writes_inputs or self._clone_out:
            return None
        k = len(p.steps) - 1
        while k >= 0 and p.steps[k].kind == "view":
            k -= 1
        if k < 0:
            return None
        s = p.steps[k]
        if s.kind not in ("kernel", "extern", "library") or s.name in self._checked \
                or not s.outputs:
            return None
        if s.kind == "library" and s.params.get("in_place") is not None:
            # its result is the fill it wrote in place: a tail only from that fill on (a
            # backward's embedding gradients, `_fill_tail`), never into the head's memory
            first = self._fill_tail(k)
            if first is None:
                return None
            # from the first fill whose run reads nothing in the arena (what it reads there
            # would be kept for it, `_tail_own`, and lie beside the gradients it writes: BERT's
            # token-type gradient reads a 12 MB index made in the arena, its word-embedding
            # gradient, 89 MB, nothing there); the whole run where every start reads some
            fills = [j for j in range(first, k + 1) if p.steps[j].kind == "fill"]
            first = next((j for j in fills if not self._tail_own((self._step_start[j], ()))),
                         first)
        else:
            first = k
        fresh: set[int] = set()
        for v in p.steps[first:]:   # views of the tail's results are fresh memory too
            if v.kind != "view" or set(v.inputs) <= fresh:
                fresh.update(v.outputs)
        made = {o for v in p.steps[first:] for o in v.outputs}
        if any(o in made and o not in fresh for o in p.outputs):
            return None     # a view of the head's memory made in the tail, handed out
        if s.kind in ("kernel", "extern") and any(
                p.values[o].offset is not None or p.values[o].into_input is not None
                or not _static(p.values[o].shape) for o in s.outputs):
            return None
        positions = frozenset(j for j, o in enumerate(p.outputs) if o in fresh)
        if not positions:
            return None
        nbytes = sum(_numel(p.values[o].shape) * self._dtypes[o].itemsize
                     for o in {p.outputs[j] for j in positions})
        if nbytes < min_bytes or (s.kind == "kernel" and nbytes < kernel_min_bytes):
            return None
        moved = self._tail_casts(k) if arena_free and first == k else ()
        key = (self._step_start[first], moved)
        if any(self._producer.get(r) is None or self._producer[r].kind not in ("kernel", "extern")
               for r in self._tail_own(key)):
            return None
        return key, positions

    def _tail_own(self, tail) -> tuple[int, ...]:
        """The arena values (roots of views) the tail reads: the head gives them memory of
        their own (run_head), so a graph keeping them for its tail keeps no more than them
        (before, a view of the arena kept all of it: Llama's forward held its 32 MB arena
        between steps for the 1 MB its LM head reads)."""
        return tuple(sorted({self._root(i) for i in self.tail_reads(tail)
                             if self._in_arena(i)}))

    def _in_arena(self, vid: int) -> bool:
        """Whether value `vid` (or what it views) lies in the arena (not in a donated input)."""
        v = self.program.values[self._root(vid)]
        return v.offset is not None and v.in_input is None

    def _fill_tail(self, k: int) -> int | None:
        """For a last step `k` that is a library call writing a fill in place (the embedding
        gradient's `scatter_add_` into zeros, IN_PLACE): the first step of the longest run of
        steps ending the program made of fills, the in-place calls writing them and views,
        starting at a fill, where each such call writes a fill of the run and each fill is read
        by nothing but its call (GPT-2's backward ends with two: wpe's, then wte's). None
        where there is no such run. Its results are memory the run allocates itself, so a
        graph may run it after each replay into new memory, as a tail."""
        p = self.program
        steps = p.steps
        end = len(steps)
        a = end
        while a > 0 and (steps[a - 1].kind in ("view", "fill")
                         or (steps[a - 1].kind == "library"
                             and steps[a - 1].params.get("in_place") is not None)):
            a -= 1
        index = {id(x): n for n, x in enumerate(steps)}
        while a <= k and steps[a].kind != "fill":     # it starts at a fill of the run
            a += 1
        if a > k:
            return None
        readers: dict[int, int] = {}
        for x in steps:
            for i in x.inputs:
                readers[i] = readers.get(i, 0) + 1
        for x in steps[a:]:
            if x.kind == "library":
                i = x.inputs[x.params["in_place"]]
                st = self._producer.get(i)
                if st is None or st.kind != "fill" or index[id(st)] < a or readers[i] != 1 \
                        or i in p.outputs or any(
                            p.values[o].offset is not None or p.values[o].in_input is not None
                            for o in x.outputs):
                    return None
            elif x.kind == "fill" and any(
                    not _static(p.values[o].shape) or p.values[o].offset is not None
                    for o in x.outputs):
                return None
        return a

    def _tail_casts(self, k: int) -> tuple[int, ...]:
        """Steps before `k` that the tail may run first: a kernel that makes an arena value
        step `k` reads, from program inputs alone (nothing the head writes), whose results
        only steps from `k` on read and no program output is."""
        p = self.program
        outs = set(p.outputs)
        donated = set(p.donated_inputs)
        moved = []
        for i in p.steps[k].inputs:
            if p.values[i].offset is None or i not in self._producer:
                continue
            st = self._producer[i]
            j = next(n for n, x in enumerate(p.steps) if x is st)
            # (not reading a donated input: after the head, its memory may hold later values)
            if (st.kind != "kernel" or st.name in self._checked or j in moved
                    or not all(x < p.num_inputs and x not in donated for x in st.inputs)
                    or any(o in outs or not _static(p.values[o].shape) for o in st.outputs)
                    or any(set(st.outputs) & set(x.inputs) for x in p.steps[j + 1:k])):
                continue
            moved.append(j)
        return tuple(sorted(moved))

    def _step_runs(self, j: int) -> list:
        end = self._step_start[j + 1] if j + 1 < len(self._step_start) else len(self._runs)
        return self._runs[self._step_start[j]:end]

    def tail_reads(self, tail) -> frozenset[int]:
        """The values the tail (tail_split's) reads that it does not make: all a captured
        head's value table must keep for it. The rest (the arena and its views, the head's
        temporaries) is let go, so that a graph's capture holds none of it (its pool's free
        blocks: a training forward's temporaries, which its backward's capture reuses in a
        shared pool)."""
        start, moved = tail
        k = self._step_start.index(start)
        reads: set[int] = set()
        made: set[int] = set()
        steps = self.program.steps
        for s in [steps[j] for j in moved] + steps[k:]:
            reads.update(i for i in s.inputs if i not in made)
            made.update(s.outputs)
        return frozenset(reads)

    def run_head(self, inputs: tuple, tail) -> list:
        """The value table after the runs before the tail (tail_split): what a graph captures."""
        start, moved = tail
        skip = {id(r) for j in moved for r in self._step_runs(j)}
        own = self._tail_own(tail)
        with torch.no_grad():
            _, vals = self._begin(inputs)
            self._prepare_inputs(inputs, vals)
            for r in own:       # out of the arena: the tail keeps these, not the arena
                vals[r] = torch.empty(tuple(self.program.values[r].shape),
                                      dtype=self._dtypes[r], device=self.device)
            for run in self._runs[:start]:
                if id(run) not in skip:
                    run(vals)
        return vals

    def run_tail(self, vals: list, tail) -> list[torch.Tensor]:
        """The tail on a copy of a head's value table; the program's outputs. The moved
        kernels' results get new memory (their arena place is the head's)."""
        start, moved = tail
        vals = list(vals)
        p = self.program
        with torch.no_grad():
            for j in moved:
                for o in p.steps[j].outputs:
                    if p.values[o].offset is not None:
                        vals[o] = torch.empty(tuple(p.values[o].shape), dtype=self._dtypes[o],
                                              device=self.device)
                for run in self._step_runs(j):
                    run(vals)
            for run in self._runs[start:]:
                run(vals)
        return [vals[o] for o in p.outputs]

    def _begin(self, inputs: tuple) -> tuple[list, list]:
        """(the value table template taken for this call, this call's table with the inputs)."""
        p = self.program
        if len(inputs) != p.num_inputs:
            raise TypeError(f"ember: compiled graph takes {p.num_inputs} tensors, got {len(inputs)}")
        base = self._take_template()
        vals = base.copy()
        if self._dynamic:
            self._bind_inputs(inputs, vals)
        else:
            self._take_inputs(inputs, vals)
        return base, vals

    def _prepare_inputs(self, inputs: tuple, vals: list) -> None:
        """Per call, before the steps: the inputs written in place, the values planned in
        donated inputs' memory (_carve_inputs)."""
        if self._writes_inputs:     # an input passed twice is not written in place
            seen, shared = set(), set()
            for t in inputs:
                if isinstance(t, torch.Tensor):
                    ptr = t.data_ptr()
                    (shared if ptr in seen else seen).add(ptr)
            self._shared_inputs = shared
        if self._in_inputs or self._release_after:
            self._carve_inputs(inputs, vals)

    def _run(self, inputs: tuple) -> list[torch.Tensor]:
        p = self.program
        base, vals = self._begin(inputs)
        self._prepare_inputs(inputs, vals)
        for run in self._runs:
            run(vals)
        if self._pool is not None:
            self._pool.append(base)
        if self._clone_out:
            return [vals[o].clone() if i in self._clone_out else vals[o]
                    for i, o in enumerate(p.outputs)]
        return [vals[o] for o in p.outputs]

    def _releases(self) -> dict[int, list[int]]:
        """Step index -> the donated inputs whose memory can be freed after it: no later step
        reads or writes the input or a value planned in its memory (ValueInfo.in_input),
        directly or through a view or a library call's result (which may alias its operands),
        and no output aliases them."""
        p = self.program
        donated = set(p.donated_inputs)
        if not donated:
            return {}
        alias: dict[int, set[int]] = {i: {i} for i in donated}    # value -> donated inputs
        for i, (_, carve) in self._in_inputs.items():
            for c in carve:
                alias[c[0]] = {i}
        last: dict[int, int] = {}
        for k, s in enumerate(p.steps):
            touched = set()
            for v in tuple(s.inputs) + tuple(s.outputs):
                touched |= alias.get(v, set())
            for i in touched:
                last[i] = k
            if touched and s.kind in ("view", "library"):
                for o in s.outputs:
                    alias[o] = alias.get(o, set()) | touched
        kept = set()
        for o in p.outputs:
            kept |= alias.get(o, set())
        out: dict[int, list[int]] = {}
        for i, k in last.items():
            if i not in kept:
                out.setdefault(k, []).append(i)
        return out

    def _arena_last_step(self) -> int | None:
        """The last step that reads or writes a value in the arena, or a view or library
        result that may alias one (no output does: _check_outputs); None when that is the
        last step (nothing would be gained) or there is no arena."""
        if not self._carve:
            return None
        inside = {c[0] for c in self._carve}
        last = None
        for k, s in enumerate(self.program.steps):
            if inside.intersection(s.inputs) or inside.intersection(s.outputs):
                last = k
                if s.kind not in ("kernel", "extern"):
                    inside.update(s.outputs)
        return last if last is not None and last < len(self.program.steps) - 1 else None

    def _drops(self) -> dict[int, tuple[int, ...]]:
        """Step index -> the values without an arena offset (their own tensors: results the
        planner left out of the arena, library results, fills) that no later step reads or
        writes and no output is: this call's table lets go of them after that step, so their
        memory is free for what comes after (Inductor's `del buf`). Dropping a reference is
        safe whatever aliases it: a view or a library result still in use keeps its storage."""
        p = self.program
        outputs = set(p.outputs)
        last: dict[int, int] = {}
        for k, s in enumerate(p.steps):
            for v in tuple(s.inputs) + tuple(s.outputs):
                last[v] = k
        own, anywhere = set(), set()
        for s in p.steps:
            if s.kind in ("kernel", "extern", "library", "fill", "empty"):
                own.update(s.outputs)
            if s.kind in ("extern", "view"):
                # an extern may hand back the library's own result in place of its planned
                # arena buffer (a convolution: externs.ExternFn), and a view keeps its base's
                # storage: held to the call's end, resnet50's fp32 inference kept every
                # convolution's output, and its CUDA-graph pool was their sum (1636 MB, the
                # arena 220 MB, eager's peak 318 MB)
                anywhere.update(s.outputs)
        out: dict[int, list[int]] = {}
        for v, k in last.items():
            info = p.values[v] if v < len(p.values) else None
            if (v < p.num_inputs or v in outputs or info is None
                    or info.into_input is not None
                    or not (v in anywhere or v in own and info.offset is None)):
                continue
            out.setdefault(k, []).append(v)
        return {k: tuple(vs) for k, vs in out.items()}

    def _drop(self, vids: tuple[int, ...], vals: list) -> None:
        """Lets go of `vids` (`_drops`), in a CUDA-graph capture too, whatever
        `release_arena` says: a block freed during the capture goes back to the graph's pool
        and a later allocation of the same capture takes it (the replay runs the same kernels
        in the same stream order), as any captured PyTorch code frees its temporaries.
        Holding them made the pool their sum (swin_t's bf16 inference pool 808 MB, eager's
        peak 222; 688 MB without)."""
        for v in vids:
            vals[v] = None

    def _release_arena(self, vid: int, vals: list) -> None:
        if self.release_arena and self._pool is None and vals[vid] is not None:
            vals[vid].untyped_storage().resize_(0)

    def _release(self, inputs: list[int], vals: list) -> None:
        for i in inputs:
            if i in self._releasable:
                vals[i].untyped_storage().resize_(0)

    def _carve_inputs(self, inputs: tuple, vals: list) -> None:
        """Values planned in donated inputs' memory (ValueInfo.in_input): views of the input's
        bytes when it is contiguous, aligned, large enough and its storage is no other
        input's (a view of another input would see the writes); otherwise of a fresh buffer,
        and returned values then get their own (see `outputs_in_inputs`)."""
        storages = None
        borrowed = BORROWED.get()

        def own(i):
            """The program's value for input i is a tensor whose storage nothing else passed
            to this call shares (or a contiguous copy made for the call)."""
            nonlocal storages
            t = vals[i]
            if t is not inputs[i]:
                return True
            if borrowed and id(t) in borrowed:
                return False
            if storages is None:
                storages = {}
                for x in inputs:
                    if isinstance(x, torch.Tensor):
                        key = x.untyped_storage().data_ptr()
                        storages[key] = storages.get(key, 0) + 1
            return storages[t.untyped_storage().data_ptr()] == 1

        from .cuda_graphs import pooled_storage
        if self._release_after:
            cand = {i for ins in self._release_after.values() for i in ins
                    if self.release_inputs and isinstance(vals[i], torch.Tensor)
                    and not pooled_storage(vals[i])}
            rel = {i for i in cand if own(i)}
            # Inputs that share one storage (views of one buffer: attention's saved q, k and
            # v), every one of them donated and passed as it is: the storage is freed after
            # the last of them has been read.
            shared: dict[int, list[int]] = {}
            for i in cand - rel:
                if vals[i] is inputs[i] and id(vals[i]) not in borrowed:
                    shared.setdefault(vals[i].untyped_storage().data_ptr(), []).append(i)
            for key, members in shared.items():
                if len(members) == storages[key]:
                    rel.add(max(members, key=self._release_step.__getitem__))
            self._releasable = rel
        for i, (need, carve) in self._in_inputs.items():
            t, u8 = vals[i], None
            if (t.is_contiguous() and t.numel() * t.element_size() >= need
                    and t.data_ptr() % _ARENA_ALIGN == 0
                    and t.storage_offset() * t.element_size() % _ARENA_ALIGN == 0):
                if own(i):
                    u8 = t.reshape(-1).view(torch.uint8)
            fresh = u8 is None
            if fresh:
                u8 = torch.empty(need, dtype=torch.uint8, device=self.device)
            # a graphed forward's pool: an output there holds that graph's replays back while
            # it lives (its liveness guard)
            keep_out = fresh or not (self.outputs_in_pools if pooled_storage(t)
                                     else self.outputs_in_inputs)
            typed: dict = {}
            for vid, dt, shape, off, nbytes, returned, stride in carve:
                if returned and keep_out:
                    # handed to the caller: not a view of memory it does not expect to keep
                    vals[vid] = torch.empty(shape, dtype=dt, device=self.device)
                elif returned:
                    vals[vid] = u8[off:off + nbytes].view(dt).view(shape)
                else:   # an internal value: the input's bytes reinterpreted (fast_views)
                    base = typed.get(dt)
                    if base is None:
                        whole = u8.numel() // dt.itemsize * dt.itemsize
                        base = typed[dt] = u8[:whole].view(dt)
                    vals[vid] = reinterpret(base, shape, stride, off // dt.itemsize)

    def _is_host_scalar(self, t: torch.Tensor, dt, shape) -> bool:
        """Whether input `t`, expected as a 0-dim `dt` on a GPU, is one on the host (see
        _host_scalar_moves): taken as it is, or moved where a kernel reads it."""
        return self._host_scalar_ok and not shape and t.dim() == 0 and \
            t.device.type == "cpu" and t.dtype == dt

    def _bind_inputs(self, inputs: tuple, vals: list) -> None:
        """A dynamic program's inputs: symbolic ints as they are, tensors checked for their rank,
        dtype, device and static dims (Dynamo's guards hold the symbolic ones)."""
        dev_type = self._dev_type
        for i, t in enumerate(inputs):
            shape, dt = self._in_checks[i]
            if self.program.values[i].dtype == "index":
                vals[i] = int(t)
                continue
            if isinstance(t, torch.Tensor) and self._is_host_scalar(t, dt, shape):
                vals[i] = t.to(self.device) if i in self._host_scalar_moves else t
                continue
            if (not isinstance(t, torch.Tensor) or t.dim() != len(shape) or t.dtype != dt
                    or t.device.type != dev_type
                    or any(isinstance(d, int) and d != n for d, n in zip(shape, t.shape))):
                raise ValueError(f"ember: input {i} must be {dt} of shape {list(shape)} on "
                                 f"{dev_type}, got {getattr(t, 'dtype', type(t))} "
                                 f"{list(getattr(t, 'shape', ()))}")
            vals[i] = t if t.is_contiguous() else t.contiguous()

    def _take_inputs(self, inputs: tuple, vals: list) -> None:
        fast = self._fast_inputs
        # the common case checked with C-level loops: every input a tensor of its compiled
        # shape and dtype on the program's device, contiguous or with the strides it is taken
        # with as it is (_as_is) (a training graph has hundreds)
        if fast is not None and len(inputs) == len(fast[0]) and \
                list(map(_SHAPE, inputs)) == fast[0] and list(map(_DTYPE, inputs)) == fast[1] \
                and all(map(fast[2], inputs)) and (list(map(_STRIDE, inputs)) == fast[3]
                                                   or all(map(torch.Tensor.is_contiguous, inputs))):
            vals[:len(inputs)] = inputs
            return
        dev_type = self._dev_type
        for i, t in enumerate(inputs):
            shape, dt = self._in_checks[i]
            if self._is_host_scalar(t, dt, shape):
                vals[i] = t.to(self.device) if i in self._host_scalar_moves else t
                continue
            if (t.shape != shape and i not in self._library_only) or t.dtype != dt \
                    or t.device.type != dev_type:
                raise ValueError(
                    f"ember: input {i} must be {dt} {list(shape)} on {dev_type}, got "
                    f"{t.dtype} {list(t.shape)} on {t.device} (the graph was compiled for "
                    f"static shapes; recompile for new shapes)")
            if t.is_contiguous() or self._as_is.get(i) == t.stride():
                vals[i] = t
            else:
                vals[i] = t.contiguous()


# extern matmul -> its operand b (the one a Linear layer's weight is, read transposed)
_WEIGHT_OPERAND = {"aten.mm": 1, "aten.addmm": 2}
_SHAPE = operator.attrgetter("shape")
_DTYPE = operator.attrgetter("dtype")
_STRIDE = torch.Tensor.stride
_IS_CPU = operator.attrgetter("is_cpu")
_IS_CUDA = operator.attrgetter("is_cuda")


def _strided_inputs(p: Program, library_only: frozenset) -> dict[int, tuple[int, ...]]:
    """Input -> the strides it is taken with as it comes (ValueInfo.strides): inputs that only
    library steps read, each as a plain operand (not through an operand view or a layout change
    the runtime makes, which start from a row-major buffer), and that are not returned."""
    wrapped = set()
    for s in p.steps:
        if s.kind != "library":
            continue
        params = s.params
        for k in [v[0] for v in params.get("views", [])] + \
                list(params.get("channels_last", ([], []))[0]):
            if 0 <= k < len(s.inputs):
                wrapped.add(s.inputs[k])
    return {i: tuple(v.strides) for i, v in enumerate(p.values[:p.num_inputs])
            if v.strides is not None and i in library_only and i not in wrapped
            and i not in p.outputs}


def _static(shape) -> bool:
    return all(isinstance(d, int) for d in shape)


def _resolve(shape, vals) -> tuple:
    """A dynamic shape at run time: "vN" -> the host scalar N's value (None stays None)."""
    return tuple(vals[int(d[1:])] if isinstance(d, str) else d for d in shape)


def _floordiv(a, b):
    return a // b


def _ceildiv(a, b):
    return -(-a // b)


def _trunc_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _float_div(a, b):
    """IEEE division (Python's raises on a zero divisor)."""
    if b == 0:
        return math.copysign(math.inf, a) * math.copysign(1.0, b) if a != 0 else math.nan
    return a / b


def _trunc_rem(a, b):
    return a - b * _trunc_div(a, b)


_CMPI = [lambda a, b: a == b, lambda a, b: a != b, lambda a, b: a < b, lambda a, b: a <= b,
         lambda a, b: a > b, lambda a, b: a >= b, lambda a, b: a < b, lambda a, b: a <= b,
         lambda a, b: a > b, lambda a, b: a >= b]
_SCALAR_OPS = {
    "addi": lambda a, b: a + b, "subi": lambda a, b: a - b, "muli": lambda a, b: a * b,
    "divsi": _trunc_div, "divui": _trunc_div, "floordivsi": _floordiv, "ceildivsi": _ceildiv,
    "remsi": _trunc_rem, "remui": _trunc_rem, "maxsi": max, "minsi": min,
    "andi": lambda a, b: a & b, "ori": lambda a, b: a | b, "xori": lambda a, b: a ^ b,
    "index_cast": int, "index_castui": int, "extsi": int, "extui": int, "trunci": int,
    "select": lambda c, a, b: a if c else b,
    # float steps of a size (arange's ceil(end / step)); results rounded to their type's width
    "sitofp": float, "uitofp": float, "fptosi": math.trunc, "fptoui": math.trunc,
    "addf": lambda a, b: a + b, "subf": lambda a, b: a - b, "mulf": lambda a, b: a * b,
    "divf": _float_div, "negf": lambda a: -a, "truncf": float, "extf": float,
    "maximumf": max, "minimumf": min, "maxnumf": max, "minnumf": min,
    "ceil": math.ceil, "floor": math.floor,
}
_FLOAT_BITS = {16: np.float16, 32: np.float32}


def _scalar_run(s: Step) -> Callable[[list], None]:
    """A host-side size computation (export_program.SCALAR_OPS) on Python ints. Sizes are small
    non-negative numbers, so signed/unsigned and width do not matter; cf.assert raises."""
    ins, outs = tuple(s.inputs), tuple(s.outputs)
    if s.name == "constant":
        value = s.params["value"]

        def run_const(vals, o=outs[0], value=value):
            vals[o] = value
        return run_const
    if s.name == "dim":
        def run_dim(vals, t=ins[0], k=ins[1], o=outs[0]):
            vals[o] = vals[t].shape[vals[k]]
        return run_dim
    if s.name == "from_elements":
        def run_tuple(vals, ins=ins, o=outs[0]):
            vals[o] = tuple(vals[i] for i in ins)
        return run_tuple
    if s.name == "assert":
        msg = s.params.get("msg", "")

        def run_assert(vals, c=ins[0], msg=msg):
            if not vals[c]:
                raise RuntimeError(f"ember: shape check failed: {msg}")
        return run_assert
    if s.name == "cmpi":
        fn = _CMPI[s.params["predicate"]]
    elif s.name in _SCALAR_OPS:
        fn = _SCALAR_OPS[s.name]
    else:
        raise ValueError(f"ember runtime: unknown scalar op {s.name!r}")

    rounded = _FLOAT_BITS.get(s.params.get("bits"))
    if rounded is not None:
        def run_rounded(vals, fn=fn, ins=ins, o=outs[0], rounded=rounded):
            vals[o] = float(rounded(fn(*[vals[i] for i in ins])))
        return run_rounded

    def run(vals, fn=fn, ins=ins, o=outs[0]):
        vals[o] = fn(*[vals[i] for i in ins])
    return run


def load(program: Program, device: str | torch.device = "cpu", *,
         cache: ArtifactCache | Path | str | None = None,
         extra_flags: Sequence[str] = (), reuse_arena: bool = True,
         parallel_compile: bool = True, precompile_overlap: bool = False,
         weight_copies: bool = False) -> CompiledProgram:
    """Build (through the artifact cache) and bind a Program; `cache` defaults to the one named
    by EMBER_CACHE_DIR (runtime/env.py). `reuse_arena=False` allocates a fresh arena on
    every call on the CPU too (see CompiledProgram._take_template). `parallel_compile` (GPU
    Triton programs) compiles all kernels in worker processes before the first call
    (runtime/triton_warm.py); False leaves each to Triton's JIT at its first launch.
    `precompile_overlap`: load returns while the workers build, and each kernel's first
    launch waits for its own builds only (triton_warm.PendingPrecompile).
    `weight_copies` (an inference program on the CPU): matmuls may read a parameter operand
    packed by MKL, kept across calls (runtime/weight_copies.py)."""
    return CompiledProgram(program, device, cache=cache, extra_flags=extra_flags,
                           reuse_arena=reuse_arena, parallel_compile=parallel_compile,
                           precompile_overlap=precompile_overlap, weight_copies=weight_copies)
