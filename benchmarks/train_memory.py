"""Where a training step's memory goes: one step of a model under eager, Inductor and ember, with
the peak of live tensor bytes, what is alive at that peak, and per compiled graph what ember's
reports say (issue 11: ember's training peak against Inductor's).

    python3 benchmarks/train_memory.py --model gpt2 --dtype bf16                 # GPU: full size
    TRITON_INTERPRET=1 python3 benchmarks/train_memory.py --model gpt2 --size tiny \\
        --backends eager,inductor,ember:triton,ember:cpu                        # the CPU machine

A backend is `eager`, `inductor` or `ember[:TARGET]` (`ember:triton` under TRITON_INTERPRET=1 is
the GPU's program on the CPU: the same arenas, the same saved tensors). Every backend gets a
fresh copy of the model, runs `--warmup` steps (compiles, CUDA-graph captures), then one
measured step with every allocation and free recorded:

  * CPU: the profiler's allocation events (`profile_memory`), each with the allocator's running
    total, its address and the Python frames above it;
  * CUDA: the caching allocator's history (`torch.cuda.memory._record_memory_history`); memory a
    CUDA graph's replay writes (its private pool) is no allocation and shows only as
    `reserved` and ember's `graph_pool_bytes`.

Figures (MB):
  peak       the most allocated during the step above what was allocated before the backend's
             first call (the harness's `peak_mb`: what the backend keeps between steps counts)
  resident   allocated at the step's start above that same base (kept between steps: CUDA-graph
             outputs, pooled CPU arenas)
  step_peak  the most allocated during the step above its start
and, at the moment of the peak, the live blocks grouped by what they are: parameters'
gradients, saved activations (the storages the autograd graph holds between forward and
backward, parameters excluded), ember's arenas (the runtime's `_take_template`), the rest by
the frame or op that allocated them. Then per ember graph: saved outputs, arena, inputs
reused/freed, graph pool. `--fresh-arena` makes ember's CPU programs allocate their arena per
call as on a GPU (the CPU runtime otherwise pools a finished call's arena for the next call, so
it is resident). `--shape BxS` gives a transformers model that batch and sequence at any
size (`--size small --shape 8x128`: the small model's layers on the full model's tokens).
`--options JSON` adds ember compile options (`'{"recompute_saved": true}'`). `--json FILE`
writes the figures.
"""
from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
from collections import defaultdict

import torch

try:
    from .models import build
except ImportError:     # run as a script: python3 benchmarks/train_memory.py
    from models import build

MB = 2 ** 20
_MARK = "_train_memory_phase"


# ---- the step ------------------------------------------------------------------------------
def _saved_storages(loss: torch.Tensor, shapes: dict | None = None) -> dict[int, int]:
    """data_ptr -> nbytes of every storage the autograd graph under `loss` saved for the
    backward (compiled graphs' ctx.saved_tensors, eager nodes' _saved_* attributes);
    `shapes` gets data_ptr -> "dtype[shape]" of a tensor saved in each."""
    out: dict[int, int] = {}

    def add(t):
        if isinstance(t, torch.Tensor) and t.layout == torch.strided:
            s = t.untyped_storage()
            if s.nbytes():
                out[s.data_ptr()] = s.nbytes()
                if shapes is not None:
                    shapes[s.data_ptr()] = f"{str(t.dtype)[6:]}{list(t.shape)}"
        elif isinstance(t, (list, tuple)):
            for x in t:
                add(x)

    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        try:
            add(node.saved_tensors)             # autograd.Function (AOTAutograd's)
        except Exception:   # noqa: BLE001 - not a Function, or freed
            pass
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    add(getattr(node, name))
                except Exception:   # noqa: BLE001
                    pass
        todo.extend(f for f, _ in node.next_functions)
    return out


class Step:
    """One training step of `model`: zero grads, forward (autocast for bf16), loss, backward.
    Records the saved storages between forward and backward and marks the phase boundaries
    in the allocation trace."""

    def __init__(self, model, fwd, inputs, loss_fn, device, dtype):
        self.model, self.fwd, self.inputs, self.loss_fn = model, fwd, inputs, loss_fn
        self.device, self.dtype = device, dtype
        self.saved: dict[int, int] = {}
        self.saved_shapes: dict[int, str] = {}
        self.loss = None

    def __call__(self, record=False):
        for p in self.model.parameters():
            p.grad = None
        _mark(self.device, "forward")
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.dtype == "bf16"):
            loss = self.loss_fn(self.fwd(*self.inputs))
        if record:
            self.saved = _saved_storages(loss, self.saved_shapes)
        _mark(self.device, "backward")
        loss.backward()
        _mark(self.device, "end")
        self.loss = loss.detach()
        return self.loss


def _mark(device, phase):
    """A phase boundary in the trace: a one-element allocation from a function named after the
    phase (the allocation's Python frames name it, on the CPU and in CUDA's history)."""
    with torch.profiler.record_function(f"{_MARK}:{phase}"):
        _MARKERS[phase](device)


def _train_memory_phase_forward(device):
    torch.empty(1, device=device)


def _train_memory_phase_backward(device):
    torch.empty(1, device=device)


def _train_memory_phase_end(device):
    torch.empty(1, device=device)


_MARKERS = {"forward": _train_memory_phase_forward, "backward": _train_memory_phase_backward,
            "end": _train_memory_phase_end}


def _phase_of(frames: list[str]) -> str:
    for f in frames:
        if _MARK in f:
            return f.split(_MARK, 1)[1][1:].split()[0]
    return ""


# ---- allocation traces ---------------------------------------------------------------------
_KEEP_FRAMES = ("/ember/", "torchinductor", "/_inductor/", "/_functorch/", "train_memory")


def _label(frames: list[str]) -> str:
    """CUDA (Python frames): the innermost frame of ember, Inductor or AOTAutograd (or the
    innermost at all). CPU (ops and record_function scopes, innermost first): the innermost
    op and the innermost scope that is no aten op (ember's, see `_scoped_runtime`)."""
    for f in frames:
        if any(k in f for k in _KEEP_FRAMES) and "train_memory" not in f:
            return f.split("/")[-1]
    scope = next((f for f in frames if f.startswith("ember ")), None) or next(
        (f for f in frames if not f.startswith("aten::")), "")
    return (frames[0].split("/")[-1] if frames else "?") + (f" < {scope[:60]}" if scope else "")


def _cpu_trace(step) -> tuple[list, int]:
    """[(ptr, +/-bytes, running total, label, phase)] of one step on the CPU, and the total
    allocated at its start."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile
    # no Python stacks: under the Triton interpreter they take all the memory there is; ember's
    # runtime is labelled by record_function scopes instead (`_scoped_runtime`)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof, \
            _scoped_runtime():
        step(record=True)
    events = []

    def walk(evs):
        for e in evs:
            if e.tag == _EventType.Allocation:
                x = e.extra_fields
                if x.device.type == "cpu":
                    frames, p = [], e.parent
                    while p is not None:
                        if p.tag in (_EventType.PyCall, _EventType.TorchOp):
                            frames.append(p.name)
                        p = p.parent
                    events.append((e.start_time_ns, x.ptr, x.alloc_size, x.total_allocated,
                                   frames, _phase_of(frames)))
            walk(e.children)
    walk(prof.profiler.kineto_results.experimental_event_tree())
    events.sort(key=lambda e: e[0])
    if not events:
        return [], 0
    start = events[0][3] - events[0][2]
    trace, phase = [], "forward"
    for _, ptr, size, total, frames, mark in events:
        if mark:        # the marker's own allocation: the phase it starts
            phase = mark
            if size > 0:
                trace.append((ptr, size, total, "marker", phase))
                continue
        trace.append((ptr, size, total, _label(frames), phase))
    return trace, start


class _scoped_runtime:
    """ember's runtime allocations under record_function scopes named `ember arena` (the
    per-call arena), `ember inputs` (values carved from donated inputs, or fresh buffers for
    them) and `ember program` (the rest of a call: unplanned values, outputs)."""

    def __enter__(self):
        try:
            from ember.runtime.executor import CompiledProgram
        except ImportError:
            self.saved = None
            return self
        self.cls = CompiledProgram
        self.saved = {n: getattr(CompiledProgram, n)
                      for n in ("_take_template", "_carve_inputs", "_run")}
        for name, fn in self.saved.items():
            setattr(CompiledProgram, name, _scoped(fn, {"_take_template": "ember arena",
                                                        "_carve_inputs": "ember inputs",
                                                        "_run": "ember program"}[name]))
        return self

    def __exit__(self, *exc):
        for name, fn in (self.saved or {}).items():
            setattr(self.cls, name, fn)


def _scoped(fn, scope):
    def run(*args, **kwargs):
        with torch.profiler.record_function(scope):
            return fn(*args, **kwargs)
    return run


def _cuda_trace(step, base) -> tuple[list, int]:
    """The same from the caching allocator's history, recorded since the backend's first call
    (`base` allocated then: `_start_cuda_history`), so that blocks kept from earlier steps (a
    CUDA graph's outputs, made at its capture) are named too; the events before the measured
    step come with phase "earlier"."""
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    n_before = len(_cuda_events())
    try:
        step(record=True)
        torch.cuda.synchronize()
        events = _cuda_events()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    trace, total, phase = [], base, "earlier"
    for k, e in enumerate(events):
        act = e["action"]
        if act not in ("alloc", "free_requested"):
            continue
        names = [f"{f['filename']}({f['line']}): {f['name']}" for f in e.get("frames", [])]
        size = e["size"] if act == "alloc" else -e["size"]
        label = _label(names)
        if any("cuda_graphs.py" in n and n.endswith("_capture") for n in names):
            label += " (in a CUDA-graph capture)"
        if k >= n_before and _phase_of(names) and size > 0:
            phase, label = _phase_of(names), "marker"
        total += size
        trace.append((e["addr"], size, total, label, phase))
    if abs(total - torch.cuda.memory_allocated()) > 2 ** 20:
        print(f"   (the allocator history does not add up: {total} vs "
              f"{torch.cuda.memory_allocated()} bytes; events were dropped)")
    return trace, start


def _start_cuda_history():
    try:        # the previous backend's events are not this one's
        torch.cuda.memory._record_memory_history(max_entries=10_000_000, stacks="python",
                                                 clear_history=True)
    except TypeError:   # an older torch
        torch.cuda.memory._record_memory_history(max_entries=10_000_000, stacks="python")


def _cuda_events() -> list:
    snap = torch.cuda.memory._snapshot()
    return snap["device_traces"][torch.cuda.current_device()]


# ---- analysis ------------------------------------------------------------------------------
def analyse(trace, start, base, saved, grads, params) -> dict:
    live: dict[int, tuple[int, str, str]] = {}
    peak, peak_live, peak_phase = start, None, ""
    for ptr, size, total, label, phase in trace:
        if phase != "earlier" and peak_live is None:
            peak_live = dict(live)      # the step's start
        if size > 0:
            live[ptr] = (size, label, phase)
        else:
            live.pop(ptr, None)
        if phase != "earlier" and total > peak:
            peak, peak_live, peak_phase = total, dict(live), phase
    peak_live = peak_live or {}
    groups: dict[str, int] = defaultdict(int)
    for ptr, (size, label, phase) in peak_live.items():
        if ptr in grads:
            key = "gradients"
        elif ptr in saved and ptr not in params:
            key = "saved activations"
        elif "_take_template" in label or "ember arena" in label:
            key = f"ember arena [{phase}]"
        else:
            key = f"{label} [{phase}]"
        groups[key] += size
    saved_act = {p: n for p, n in saved.items() if p not in params}
    return {"peak_mb": (peak - base) / MB, "resident_mb": (start - base) / MB,
            "step_peak_mb": (peak - start) / MB, "peak_phase": peak_phase,
            "saved_count": len(saved_act), "saved_mb": sum(saved_act.values()) / MB,
            "saved_params_count": len(saved) - len(saved_act),
            "alive_at_peak_mb": {k: round(v / MB, 3) for k, v in
                                 sorted(groups.items(), key=lambda kv: -kv[1])}}


def _ember_graphs() -> list[dict]:
    try:
        import ember
        reports = ember.last_reports()
    except Exception:   # noqa: BLE001
        return []
    keys = ("graph_id", "status", "num_outputs", "output_bytes", "input_output_bytes",
            "saved_outputs", "planned_peak_bytes", "unplanned_peak_bytes", "runtime_arena_bytes",
            "inputs_reused", "inputs_freed", "graph_pool_bytes", "shared_pool_bytes",
            "shared_pool_graphs", "ungraphed_calls", "graph_static_input_bytes",
            "graph_static_output_bytes", "graph_tail_outputs", "graph_tail_held_bytes")
    out = []
    for r in reports:
        row = {k: r[k] for k in keys if k in r}
        plan = r.get("memory_plan") or {}
        if "in_inputs_bytes" in plan:
            row["in_inputs_bytes"] = plan["in_inputs_bytes"]
        out.append(row)
    return out


def _fresh_arenas() -> int:
    """ember's CPU programs stop pooling their arenas (one per call, as on a GPU)."""
    try:
        from ember.runtime.executor import CompiledProgram
    except ImportError:
        return 0
    n = 0
    for obj in _programs(CompiledProgram):
        if obj._pool is not None:
            obj._pool = None
            n += 1
    return n


def _programs(cls) -> list:
    out = []
    for obj in gc.get_objects():
        try:
            if type(obj) is cls:
                out.append(obj)
        except ReferenceError:  # a dead weak proxy
            pass
    return out


def _ember_options(target: str, device: str, own_min_bytes: int | None,
                   extra: dict | None = None) -> dict:
    """torch.compile options for ember; `own_min_bytes` (not None) sets ember-buffer-reuse's
    `own-min-bytes` in the default pipeline (before/after figures of own allocations); `extra`:
    more ember options (`--options`)."""
    options = {"target": target, **(extra or {})}
    if own_min_bytes is not None:
        from ember.frontend.options import CompileOptions, default_pipeline
        resolved = target if target != "auto" else ("cuda" if device == "cuda" else "cpu")
        pipeline = default_pipeline(CompileOptions(target=resolved), resolved)
        flag = "ember-buffer-reuse{print-plan=true"
        if flag not in pipeline:
            raise ValueError(f"no {flag}}} in ember's default pipeline: {pipeline}")
        options["pipeline"] = pipeline.replace(flag, f"{flag} own-min-bytes={own_min_bytes}")
    return options


def measure(name, size, backend, device, dtype, warmup, fresh_arena, shape=None,
            own_min_bytes=None, extra_options=None) -> dict:
    small, tiny = size == "small", size == "tiny"
    if shape is None and size == "full":
        shape = {"bert": (16, 128), "gpt2": (8, 256)}.get(name)
    model, inputs, loss_fn = build(name, device, small, tiny, text_shape=shape)
    model.train()
    if backend == "eager":
        fwd = model
    elif backend == "inductor":
        fwd = torch.compile(model, backend="inductor")
    else:
        import ember
        ember.clear_reports()
        target = backend.split(":", 1)[1] if ":" in backend else "auto"
        fwd = torch.compile(model, backend="ember", options=_ember_options(
            target, device, own_min_bytes, extra_options))
    step = Step(model, fwd, inputs, loss_fn, device, dtype)
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        _start_cuda_history()
    else:
        base = None
    for _ in range(warmup):
        step()
    if fresh_arena and backend.startswith("ember"):
        _fresh_arenas()
    for p in model.parameters():
        p.grad = None
    gc.collect()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        trace, start = _cuda_trace(step, base)
        harness_peak = (torch.cuda.max_memory_allocated() - base) / MB
    else:
        trace, start = _cpu_trace(step)
        base = start - _resident_cpu_bytes(model, inputs, start)
        harness_peak = None
    grads = {p.grad.untyped_storage().data_ptr() for p in model.parameters()
             if p.grad is not None}
    row = {"model": name, "size": size, "dtype": dtype, "backend": backend,
           **analyse(trace, start, base, step.saved, grads, params)}
    kinds: dict[str, list] = defaultdict(lambda: [0, 0])
    for ptr, nbytes in step.saved.items():
        if ptr not in params:
            kinds[step.saved_shapes[ptr]][0] += 1
            kinds[step.saved_shapes[ptr]][1] += nbytes
    row["saved_by_shape"] = {k: [n, round(b / MB, 3)] for k, (n, b) in
                             sorted(kinds.items(), key=lambda kv: -kv[1][1])}
    if harness_peak is not None:
        row["max_memory_allocated_mb"] = harness_peak
        row["reserved_mb"] = torch.cuda.memory_reserved() / MB
    if backend.startswith("ember"):
        row["graphs"] = _ember_graphs()
    row["loss"] = float(step.loss)
    return row


def _resident_cpu_bytes(model, inputs, start) -> int:
    """On the CPU the allocator's total holds everything of the process: what the backend
    keeps between steps is estimated as ember's pooled arenas (the model and inputs are
    every backend's)."""
    del model, inputs, start
    try:
        from ember.runtime.executor import CompiledProgram
    except ImportError:
        return 0
    return sum(obj.arena_bytes * len(obj._pool) for obj in _programs(CompiledProgram)
               if obj._pool)


def _print(row):
    print(f"\n== {row['model']} {row['size']} {row['dtype']} {row['backend']}: "
          f"peak {row['peak_mb']:.2f} MB (resident {row['resident_mb']:.2f}, step "
          f"{row['step_peak_mb']:.2f}) at the {row['peak_phase']}; saved "
          f"{row['saved_count']} tensors {row['saved_mb']:.2f} MB (+{row['saved_params_count']}"
          f" parameters); loss {row['loss']:.6g}")
    if "max_memory_allocated_mb" in row:
        print(f"   max_memory_allocated - base {row['max_memory_allocated_mb']:.2f} MB, "
              f"reserved {row['reserved_mb']:.2f} MB")
    for k, v in row["alive_at_peak_mb"].items():
        if v >= 0.001:
            print(f"   {v:10.3f} MB  {k}")
    print("   saved: " + ", ".join(f"{n}x {k} ({mb} MB)" for k, (n, mb) in
                                   row["saved_by_shape"].items()))
    for g in row.get("graphs", []):
        print("   graph " + ", ".join(f"{k}={v}" for k, v in g.items()))
    if row.get("graphs"):
        # each capture's own new bytes: a pool shared by the step's graphs counts once
        pools = sum(g.get("graph_pool_bytes", 0) for g in row["graphs"])
        print(f"   graph pools {pools / MB:.2f} MB")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--size", choices=("tiny", "small", "full"), default=None,
                    help="default: full on CUDA, tiny on the CPU")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--backends", default="ember,inductor,eager")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--shape", default=None, metavar="BxS",
                    help="a transformers model's (batch, sequence) at any --size: the small "
                         "model's layers on the full model's tokens (llama 8x128)")
    ap.add_argument("--fresh-arena", action="store_true")
    ap.add_argument("--own-min-bytes", type=int, default=None,
                    help="ember-buffer-reuse's own-min-bytes for ember (-1: no own allocations)")
    ap.add_argument("--options", default=None, metavar="JSON",
                    help='more ember compile options, e.g. \'{"recompute_saved": true}\'')
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    extra = json.loads(args.options) if args.options else None
    size = args.size or ("full" if args.device == "cuda" else "tiny")
    shape = tuple(int(n) for n in args.shape.lower().split("x")) if args.shape else None
    rows = []
    for be in args.backends.split(","):
        torch._dynamo.reset()
        try:
            row = measure(args.model, size, be, args.device, args.dtype, args.warmup,
                          args.fresh_arena, shape, args.own_min_bytes, extra)
        except Exception as err:  # noqa: BLE001 - one backend failing is a row, not the end
            import traceback
            traceback.print_exc()
            row = {"model": args.model, "backend": be, "error": f"{type(err).__name__}: {err}"}
            print(f"\n== {be}: {row['error']}")
        else:
            _print(row)
        rows.append(row)
        gc.collect()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
