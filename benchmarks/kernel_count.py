"""Launches per graph of a training step, compiled only (nothing runs through ember's kernels).

    python benchmarks/kernel_count.py [--models gpt2,bert,resnet18,mlp] [--target triton]
                                      [--mode train-bf16|train-fp32|infer-fp32|infer-bf16]
                                      [--size small|full] [--layers 1,2]
                                      [--optimizer] [--kernels] [--json FILE]

Models come from models.py (`--size small`: the CPU machine's sizes; `full`: the GPU table's,
e.g. efficientnet_b0 batch 32 at 224, whose reductions split as on the GPU); the torchvision
ones (resnet50, efficientnet_b0, ...) where torchvision is importable, else skipped.
`infer-bf16` is the GPU table's bf16 inference: the model and its inputs cast to bf16.
Every graph Dynamo hands ember (forward, backward, the optimizer step with `--optimizer`) is
compiled for `--target` (`triton` on the CPU machine: the GPU's code generator, no GPU
needed); `runtime.executor.load` is replaced by a stub, so no kernel is built or run, and the
graph's own FX code runs eagerly in its place (the step goes on with eager's values).
Per graph it prints the host schedule's launches by kind:
  generated  kernels ember wrote (`ember_fused_*`), less the two kinds below
  copies     generated kernels that only copy (`ember_fused_copy_*`)
  fills      generated kernels that only fill a constant, and "fill" steps (a memset)
  library    `ember.extern` (matmul, conv, pooling) and ATen library calls
  bias       a second kernel inside a library call on a GPU: an `aten.convolution` extern
             given a bias (cuDNN computes none; ATen adds it after the call, `output.add_`).
             Counted for the GPU's code generator only; Inductor peels the bias off on a GPU
             (its CPU-scheduled code below still passes it), so none is counted for Inductor
With `--layers 1,2` (transformers models) it compiles the model with each layer count and
prints the difference: the launches one layer adds. With `--inductor`, the same step under
Inductor is counted too, scheduled as for a GPU (`cpu_backend="triton"`: Inductor's GPU
scheduler and fusion decisions; its C++ scheduler would put several loop nests into one kernel,
which a GPU kernel cannot); nothing is compiled, its launches do nothing. Per ember graph it
also prints the MB of constants the program keeps and of the tensors it fills per call
(`held`). `--kernels` lists every launch in order (name, kind).
`kernel MB` is the memory traffic of the generated kernels: per launch, the bytes of the tensors
it reads and writes (each once), summed. `--fuse-options "recompute-max-ops=0"` adds options to
the default pipeline's ember-fuse (a before/after comparison of one fusion decision);
`--options '{"exact_low_precision": false}'` adds ember compile options. `--gpu-attention`
traces SDPA as a GPU's f32 SDPA does (see gpu_attention); `--target cuda` compiles with the
GPU's pipeline (channels-last training graphs, cuDNN's conv bias, one-pass variances), which
`--target triton` (the Triton target of the CPU tests) does not.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import FULL_TEXT_SHAPE, TRANSFORMERS, build  # noqa: E402

KINDS = ("generated", "copies", "fills", "library", "bias")


def step_kind(step) -> str | None:
    """The launch kind of a Program step (None: no launch: views, constants, empties)."""
    if step.kind in ("extern", "library"):
        return "library"
    if step.kind == "fill":     # a new tensor filled per call (a memset on a GPU)
        return "fills"
    if step.kind != "kernel":
        return None
    tags = re.sub(r"^ember_fused_|_\d+$", "", step.name).split("_")
    if tags == ["copy"]:
        return "copies"
    if tags in (["fill"], ["zeros"], ["full"]):
        return "fills"
    return "generated"


@contextlib.contextmanager
def compile_only(records: list, timing: dict | None = None):
    """Within: ember compiles each graph to its Program, records it, and runs the graph's FX
    code eagerly instead of the program (`timing["eager"]`, when given, adds up those runs'
    seconds)."""
    import ember.frontend.compile as fc
    import ember.frontend.compile_module as cm
    import ember.runtime.executor as ex

    real_static, real_load = fc.compile_static, ex.load
    current = {}

    class Stub:
        arena_bytes = 0
        freed_inputs = 0

        def __init__(self, gm):
            self.gm = gm

        def __call__(self, *args):
            t0 = time.perf_counter()
            out = self.gm(*args)
            if timing is not None:
                timing["eager"] = timing.get("eager", 0.0) + time.perf_counter() - t0
            return list(out) if isinstance(out, (tuple, list)) else out

    def static(gm, tensors, options, target, dump, kind="graph", **kw):
        current["gm"], current["kind"] = gm, kind
        return real_static(gm, tensors, options, target, dump, kind, **kw)

    def load(program, device="cpu", **kw):
        records.append({"kind": current.get("kind"), "program": program})
        return Stub(current["gm"])

    fc.compile_static, ex.load = static, load
    try:
        yield
    finally:
        fc.compile_static, ex.load = real_static, real_load
        del cm


def library_bias(program, step) -> bool:
    """Whether a GPU runs `step` as two kernels: a convolution extern with a bias operand."""
    return program.target == "triton" and step.kind == "extern" \
        and step.name == "aten.convolution" and len(step.inputs) > 2


def count(program) -> dict:
    out = dict.fromkeys(KINDS, 0)
    for s in program.steps:
        k = step_kind(s)
        if k:
            out[k] += 1
        if library_bias(program, s):
            out["bias"] += 1
    out["total"] = sum(out[k] for k in KINDS)
    out["kernel_bytes"] = kernel_bytes(program)
    return out


def held(record) -> dict:
    """`const_mb`: the constants the program keeps for its whole life (a splat the runtime
    fills once at load: the embedding backward's zeros were one, vocabulary x hidden);
    `fill_mb`: the tensors it fills anew on every call ("fill" steps)."""
    p = record["program"]
    size = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "bfloat16": 2,
            "float16": 2, "bool": 1, "int8": 1, "uint8": 1}

    def mb(kind):
        return round(sum(math.prod(p.values[s.outputs[0]].shape)
                         * size.get(p.values[s.outputs[0]].dtype, 4)
                         for s in p.steps if s.kind == kind) / 2 ** 20, 3)
    return {"const_mb": mb("const"), "fill_mb": mb("fill")}


def kernel_bytes(program) -> int:
    """Bytes the generated kernels read and write: per launch, each tensor it reads or writes
    once (what a kernel moves through memory when every element is touched once)."""
    total = 0
    for s in program.steps:
        if s.kind != "kernel":
            continue
        for i in dict.fromkeys(s.inputs + s.outputs):
            v = program.values[i]
            n = 1
            for d in v.shape:
                n *= d
            total += n * torch.empty((), dtype=getattr(torch, v.dtype)).element_size()
    return total


@contextlib.contextmanager
def fuse_options(extra: str):
    """Within: the default pipeline's ember-fuse gets `extra` options too."""
    import ember.frontend.compile_module as cm
    import ember.frontend.partition as pt
    if not extra:
        yield
        return
    real = cm.default_pipeline

    def patched(options, target):
        return real(options, target).replace("explain=true}", f"explain=true {extra}}}")

    cm.default_pipeline = pt.default_pipeline = patched
    try:
        yield
    finally:
        cm.default_pipeline = pt.default_pipeline = real


def _model(name: str, layers: int | None, size: str = "small", mode: str = ""):
    # `full`: the GPU table's shapes (GPT-2 8x256 and BERT 16x128, as measure.py builds them)
    model, inputs, loss = build(name, "cpu", small=size == "small",
                                text_shape=FULL_TEXT_SHAPE.get(name) if size == "full" else None)
    if mode == "infer-bf16":
        model = model.to(torch.bfloat16)
        inputs = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs)
    if layers is not None and hasattr(model, "config"):
        cfg = copy.deepcopy(model.config)
        for attr in ("n_layer", "num_hidden_layers", "n_layers"):
            if hasattr(cfg, attr):
                setattr(cfg, attr, layers)
        torch.manual_seed(0)
        model = type(model)(cfg)
        if mode == "infer-bf16":
            model = model.to(torch.bfloat16)
    return model, inputs, loss


def _step(model, inputs, loss_fn, mode: str, compile_fn, optimizer: bool):
    fwd = compile_fn(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4) if optimizer else None
    opt_step = compile_fn(opt.step) if optimizer else None
    if mode.startswith("infer"):
        with torch.no_grad():
            fwd(*inputs)
        return
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "train-bf16"):
        loss = loss_fn(fwd(*inputs))
    loss.backward()
    if optimizer:
        opt_step()


def ember_counts(name, mode, target, layers, optimizer, debug_dir=None,
                 extra_fuse: str = "", options: dict | None = None,
                 size: str = "small") -> list[dict]:
    import ember        # registers the backend
    torch._dynamo.reset()
    model, inputs, loss = _model(name, layers, size, mode)
    records: list = []
    ember.clear_reports()
    with compile_only(records), fuse_options(extra_fuse):
        _step(model.train() if mode.startswith("train") else model.eval(), inputs, loss, mode,
              lambda f: torch.compile(f, backend="ember", options={
                  "target": target, "debug_dir": debug_dir, **(options or {})}),
              optimizer)
    for r in ember.last_reports():
        if r.get("status") != "compiled" or r.get("eager_fallback_ops"):
            print(f"{name}: graph {r['graph_id']} {r.get('status')}: eager "
                  f"{r.get('eager_fallback_ops')} {str(r.get('error', ''))[:120]}", file=sys.stderr)
    return records


@contextlib.contextmanager
def inductor_triton_code(codes: list):
    """Within: Inductor schedules CPU graphs as it does GPU ones (`cpu_backend="triton"`: the
    same scheduler and fusion decisions, Triton kernels) and appends each graph's output code
    to `codes`; no kernel is compiled, and launches do nothing (the step goes on with
    uninitialised values: shapes are all that matter here)."""
    import torch._inductor.async_compile as ac
    import torch._inductor.config as ic
    import torch._inductor.graph as gg
    import torch.utils._triton as ut

    class Unbuilt:
        def run(self, *a, **k):
            pass

        def __getattr__(self, name):
            return lambda *a, **k: None

    def codegen(self, *a, **k):
        r = real_codegen(self, *a, **k)
        code = r[0] if isinstance(r, tuple) else r
        codes.append(getattr(code, "value", code))
        return r

    saved = (ic.cpu_backend, ic.force_disable_caches, ut.triton_hash_with_backend,
             gg.GraphLowering.codegen, ac.AsyncCompile.triton)
    real_codegen = gg.GraphLowering.codegen
    ic.cpu_backend, ic.force_disable_caches = "triton", True   # a cached graph has no codegen
    ut.triton_hash_with_backend = lambda: "0" * 64
    gg.GraphLowering.codegen = codegen
    ac.AsyncCompile.triton = lambda self, name, src, *a, **k: Unbuilt()
    try:
        yield
    finally:
        (ic.cpu_backend, ic.force_disable_caches, ut.triton_hash_with_backend,
         gg.GraphLowering.codegen, ac.AsyncCompile.triton) = saved


def inductor_launches(code: str) -> list[tuple[str, str]]:
    """[(kind, name)] of the launches in one Inductor output module's `call`."""
    body = code[code.find("def call("):]
    out = []
    for line in body.splitlines():
        m = re.match(r"\s+(triton_\w+)\.run\(", line)
        if m:
            out.append(("generated", m.group(1)))
            continue
        m = re.match(r"\s+(?:\w+ = )?(extern_kernels\.\w+|torch\.ops\.[\w.]+)\(", line)
        if m:
            out.append(("library", m.group(1)))
        elif re.match(r"\s+\w+\.(zero_|fill_)\(", line):
            out.append(("fills", line.strip()))
        elif re.match(r"\s+(?:\w+ = )?\w+\.copy_\(", line):
            out.append(("copies", line.strip()))
    return out


def inductor_counts(name, mode, layers, optimizer,
                    size: str = "small") -> list[list[tuple[str, str]]]:
    torch._dynamo.reset()
    model, inputs, loss = _model(name, layers, size, mode)
    model = model.train() if mode.startswith("train") else model.eval()
    codes: list = []
    with inductor_triton_code(codes):
        try:
            _step(model, inputs, loss, mode, lambda f: torch.compile(f, backend="inductor"),
                  optimizer)
        except (RuntimeError, IndexError) as err:
            # an aten op of the output code read the garbage of an unbuilt kernel as indices
            # (resnet's max-pool backward): each graph is compiled before it runs, so every
            # graph that ran is counted; a later one (the optimizer step) may be missing
            print(f"{name}: inductor's step stopped ({type(err).__name__}: {str(err)[:80]}); "
                  f"{len(codes)} graphs counted", file=sys.stderr)
    return [inductor_launches(c) for c in codes]


def _tally(launches) -> dict:
    out = dict.fromkeys(KINDS, 0)
    for kind, _ in launches:
        out[kind] += 1
    out["total"] = sum(out[k] for k in KINDS)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gpt2,bert,resnet18,mlp")
    ap.add_argument("--target", default="triton")
    ap.add_argument("--mode", default="train-bf16",
                    choices=("train-bf16", "train-fp32", "infer-fp32", "infer-bf16"))
    ap.add_argument("--size", default="small", choices=("small", "full"),
                    help="models.py's CPU sizes or the GPU table's")
    ap.add_argument("--layers", default="", help="e.g. 1,2: per-layer difference")
    ap.add_argument("--optimizer", action="store_true", help="count the AdamW step's graph")
    ap.add_argument("--inductor", action="store_true", help="also count Inductor's CPU code")
    ap.add_argument("--kernels", action="store_true", help="list every launch")
    ap.add_argument("--json", default="")
    ap.add_argument("--debug-dir", default=None, help="ember's debug dump (IR per stage)")
    ap.add_argument("--fuse-options", default="", help="extra ember-fuse options, e.g. "
                    "'recompute-max-ops=0'")
    ap.add_argument("--options", default="", help="ember compile options as JSON, e.g. "
                    "'{\"exact_low_precision\": false}'")
    ap.add_argument("--gpu-attention", action="store_true",
                    help="trace SDPA as a GPU's f32 SDPA does (memory-efficient attention with "
                         "the mask as a bias expanded over the heads), through CPU stand-ins")
    args = ap.parse_args(argv)
    with gpu_attention() if args.gpu_attention else contextlib.nullcontext():
        _main(args)


@contextlib.contextmanager
def gpu_attention():
    """Within: `F.scaled_dot_product_attention` traces as a GPU's does for f32 (and for
    training): to `_scaled_dot_product_efficient_attention`, a boolean mask converted to a
    float bias and expanded to [B, H, S, S] (SDPA's convert_boolean_attn_mask and
    preprocess_mask), run on the CPU by test/pytest/efficient_attention_cpu.py's stand-ins. On
    the CPU SDPA traces to the CPU's flash attention, whose mask stays [B, 1, S, S]: GPT-2's
    mask launches (three kernels and a cumsum on the H200 before kc19) do not show there. (The
    graph then holds no SDPA call, so frontend/attention_masks.py cannot drop an all-visible
    mask: BERT's counts with it are not a GPU's.)"""
    import torch.nn.functional as F
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, os.pardir, "test", "pytest"))
    from efficient_attention_cpu import efficient_attention_on_cpu

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        bias = None
        if attn_mask is not None:
            bias = attn_mask if attn_mask.dtype != torch.bool else torch.where(
                attn_mask.logical_not(), float("-inf"),
                torch.zeros((), dtype=q.dtype, device=q.device))
            bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, grad, dropout_p, is_causal, scale=scale)[0]

    real = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = torch.nn.functional.scaled_dot_product_attention = sdpa
    try:
        with efficient_attention_on_cpu():
            yield
    finally:
        F.scaled_dot_product_attention = real


def _main(args) -> None:
    rows = []
    for name in args.models.split(","):
        layer_counts = [int(x) for x in args.layers.split(",") if x and name in TRANSFORMERS]
        layer_counts = layer_counts or [None]
        per_layers = {}
        for layers in layer_counts:
            try:
                records = ember_counts(name, args.mode, args.target, layers, args.optimizer,
                                       args.debug_dir, args.fuse_options,
                                       json.loads(args.options) if args.options else None,
                                       args.size)
            except ImportError as err:
                print(f"{name}: skipped ({err})")
                break
            label = name + (f" ({layers} layers)" if layers else "")
            totals = dict.fromkeys(KINDS + ("total", "kernel_bytes"), 0)
            for r in records:
                c = count(r["program"])
                for k in totals:
                    totals[k] += c[k]
                h = held(r)
                print(f"{label:<24} {r['kind']:<9} " +
                      "  ".join(f"{k} {c[k]:4d}" for k in KINDS + ("total",)) +
                      f"  kernel MB {c['kernel_bytes'] / 1e6:8.3f}"
                      f"  constants {h['const_mb']:.1f} MB  fills {h['fill_mb']:.1f} MB")
                if args.kernels:
                    for s in r["program"].steps:
                        if step_kind(s):
                            extra = " (+ bias kernel)" if library_bias(r["program"], s) else ""
                            print(f"    {step_kind(s):<10} {s.name}{extra}")
            print(f"{label:<24} {'all':<9} " +
                  "  ".join(f"{k} {totals[k]:4d}" for k in KINDS + ("total",)) +
                  f"  kernel MB {totals['kernel_bytes'] / 1e6:8.3f}")
            per_layers[layers] = totals
            row = {"model": name, "layers": layers, "mode": args.mode, "ember": totals,
                   "graphs": [{"kind": r["kind"], **count(r["program"]), **held(r)}
                              for r in records]}
            if args.inductor:
                ind = inductor_counts(name, args.mode, layers, args.optimizer, args.size)
                tot = _tally([x for g in ind for x in g])
                for g in ind:
                    print(f"{label:<24} {'inductor':<9} " +
                          "  ".join(f"{k} {_tally(g)[k]:4d}" for k in KINDS + ("total",)))
                    if args.kernels:
                        for kind, n in g:
                            print(f"    {kind:<10} {n}")
                print(f"{label:<24} {'ind. all':<9} " +
                      "  ".join(f"{k} {tot[k]:4d}" for k in KINDS + ("total",)))
                row["inductor"] = tot
                per_layers.setdefault(("inductor", layers), tot)
            rows.append(row)
        for who in ("ember", "inductor"):
            got = sorted((k if who == "ember" else k[1], v) for k, v in per_layers.items()
                         if (who == "ember") == (not isinstance(k, tuple)))
            if len(got) >= 2:
                (a, ta), (b, tb) = got[:2]
                print(f"{name:<15} {who:<8} per layer " + "  ".join(
                    f"{k} {(tb[k] - ta[k]) / (b - a):5.1f}" for k in KINDS + ("total",)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
