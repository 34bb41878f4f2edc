"""The Triton lowering's module text of one kernel: the `@triton.jit` function (autotune
decorator, parameters, body from triton_writer), the launcher `def NAME(*tensors)` that computes
sizes and grid from the tensors at run time, and the AOT record `NAME.ember_aot`; for a
`matmul` kernel, the template, its library-call epilogue and the choosing launcher
(passes/triton_matmul.py).
"""
from __future__ import annotations

from torch_mlir import ir

from .ir_queries import shape, type_name
from .kernel_schedule import Unschedulable
from .triton_writer import MATMUL_TILE, JitKernel, MatmulWriter, decompose
from . import triton_matmul


def matmul_source(fn, autotune: bool, max_autotune: bool, choice: str) -> str:
    """A `matmul` kernel's source: the template, the epilogue alone, the choosing launcher."""
    parts = triton_matmul.Parts(fn)
    name = ir.StringAttr(fn.attributes["sym_name"]).value
    ew = MatmulWriter(fn, parts, True, autotune, max_autotune)
    ek = ew.pointwise()
    ek.name = f"{name}_epilogue"
    epilogue = kernel_source(ek, parts.schedule, ew)

    tw = MatmulWriter(fn, parts, False, autotune, max_autotune)
    configs = triton_matmul.configs_for(parts, max_autotune, autotune)
    triton_matmul.template_head(tw, parts)
    rows, cols = triton_matmul.split_dims(parts.schedule, tw.results[0], parts.N)
    root = tw.builder.stack[0]
    vars_ = {}
    decompose(root.stmts, "xrow", rows, tw.sizes(rows), "i", "x", vars_)
    decompose(root.stmts, "xcol", cols, tw.sizes(cols), "i", "x", vars_)
    root.binds = {"x"}
    for k in range(len(tw.results)):
        tw.store(k, vars_, MATMUL_TILE)
    if tw.builder.checks:
        raise Unschedulable("a matmul kernel's epilogue reads indices from data")
    constexprs = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"] + \
        (["ALLOW_TF32"] if parts.dtype == "f32" else [])
    k = tw._kernel([], {}, constexprs, [], "")
    jit = f"{name}_mm_kernel"
    lines = []
    if len(configs) > 1:
        cfgs = ", ".join(triton_matmul.config_text(c) for c in configs)
        lines.append(f"@_ember_autotune(configs=[{cfgs}], key=[])")
    lines.append("@triton.jit")
    params = k.jit_params + [f"{c}: tl.constexpr" for c in constexprs]
    lines.append(f"def {jit}({', '.join(params)}):")
    lines += k.body
    lines += ["", ""]
    lines += triton_matmul.launcher_lines(name, tw, parts, configs, choice, ek)
    bm, bn, bk, gm, warps, _ = configs[0]
    aot = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": gm}
    if parts.dtype == "f32":
        aot["ALLOW_TF32"] = False
    lines.append(f"{name}.ember_aot = {[(jit, k.signature, aot, warps)]!r}")
    return epilogue + "\n\n" + "\n".join(lines) + "\n"


def kernel_source(k: JitKernel, sched, writer) -> str:
    jit = f"{k.name}_kernel"
    lines = []
    cfgs = ", ".join(f"triton.Config({c!r}, num_warps={w})" for c, w in k.configs)
    if len(k.configs) > 1:
        keys = [p for p in k.jit_params if p in k.numels]
        # ember-buffer-reuse may give an output the memory of an input (in-place): timing a
        # config runs the kernel, so the inputs are restored after each trial.
        # Only inputs whose memory an output overlaps at run time are saved (see the prelude).
        restore = writer.in_names
        lines.append(f"@_ember_autotune(configs=[{cfgs}], key={keys!r}, restore={restore!r}, "
                     f"outputs={writer.out_names!r})")
    # Scalar arguments (after every tensor dim in the sizes table) are values, not sizes: Triton
    # must not specialize one that is 1 into a constexpr (a cast of it would not compile).
    n_dims = sum(len(shape(v)) for v in writer.args + writer.results)
    scalar_params = [n for k, n in sorted(writer.lang.dynamic_sizes.items()) if k >= n_dims]
    lines.append(f"@triton.jit(do_not_specialize={scalar_params!r})" if scalar_params
                 else "@triton.jit")
    params = k.jit_params + [f"{c}: tl.constexpr" for c in k.constexprs]
    lines.append(f"def {jit}({', '.join(params)}):")
    lines += k.body
    lines.append("")
    lines.append("")
    n_in = len(writer.args)
    if writer.sched.scalars:     # sizes / symbolic ints, after the tensors (kernel ABI)
        n_t = n_in + len(writer.results)
        lines.append(f"def {k.name}(*args):")
        lines.append(f"    tensors, scalars = args[:{n_t}], [int(x) for x in args[{n_t}:]]")
    else:
        lines.append(f"def {k.name}(*tensors):")
    # linalg's integers are signless: a uint8 tensor holds an i8 value, read as int8 (the ops
    # that care, divui/uitofp/cmpi ult, reinterpret as unsigned themselves).
    bytes_ = [n for n, v in enumerate(writer.args + writer.results) if type_name(v.type) == "i8"]
    if bytes_:
        lines.append(f"    tensors = [t.view(torch.int8) if t.dtype == torch.uint8 else t "
                     f"for t in tensors]")
    lines.append("    sizes = [d for t in tensors for d in t.shape]"
                 + (" + scalars" if writer.sched.scalars else ""))
    for name, expr in k.numels.items():
        lines.append(f"    {name} = {expr}")
    for idx, name in sorted(writer.lang.dynamic_sizes.items()):
        lines.append(f"    {name} = sizes[{idx}]")
    lines.append("    grid = lambda meta: " + k.grid)
    checked = "err" in k.jit_params
    launch = "_EMBER_LAUNCH_CHECKED" if checked else "_EMBER_LAUNCH"
    if checked:
        lines.append("    err = _ember_error_buffer(tensors[-1].device)")
    args = ", ".join(["*tensors"] + k.jit_params[n_in + len(writer.results):])
    if len(k.configs) > 1:
        lines.append(f"    {jit}[grid]({args}, **{launch})")
    else:
        c, w = k.configs[0]
        kw = ", ".join(f"{n}={v}" for n, v in c.items())
        lines.append(f"    {jit}[grid]({args}, {kw}, num_warps={w}, **{launch})")
    aot = [(jit, k.signature, k.configs[0][0], k.configs[0][1])]
    lines.append(f"{k.name}.ember_aot = {aot!r}")
    if checked:
        lines.append(f"{k.name}.ember_checked = True")
    return "\n".join(lines) + "\n"
