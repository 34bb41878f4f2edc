"""The Triton matmul template of a `matmul` kernel (ember-matmul-template's output), for
ember-lower-to-triton.

A `matmul` kernel's body is a product (operands that are kernel arguments, maybe through a
`linalg.transpose`; a zero-filled f32 `linalg.matmul` / `linalg.batch_matmul`) followed by a
pointwise epilogue that reads the product at the point it writes. Its source holds:

* `NAME_mm_kernel`: the template. One program computes a BLOCK_M x BLOCK_N tile of the product
  with `tl.dot` in f32 (bf16/f16 operands on tensor cores; f32 operands in IEEE f32, or TF32
  where `torch.backends.cuda.matmul.allow_tf32` allows it, read at each call), programs grouped
  by GROUP_M rows of tiles for L2 reuse, then evaluates the epilogue on the tile in registers
  (the product is the accumulator `acc`; other operands are loaded at the tile's indices) and
  stores the results once. Autotuned over block sizes (more with max-autotune).
* `NAME_epilogue`: the epilogue alone as a pointwise kernel reading the product from memory,
  for the library alternative: the library call (cuBLAS: mm, bmm, addmm, with the bias and
  rounding eager's call has) into a buffer, then it.
* `def NAME(*tensors)`: the launcher. `_ember_matmul_choose` (prelude) runs the variant the
  lowering's `matmul-choice` names; with `auto`, on a GPU it times both on the first call (each
  after its own warm-up and autotuning) and keeps the faster one for the process; without a
  GPU (the interpreter) it runs the template.
"""
from __future__ import annotations

import math

from torch_mlir import ir

from .graph_utils import defining_op, op_name
from .ir_queries import shape, type_name
from .kernel_expr import Expr
from .kernel_schedule import KernelSchedule, Unschedulable, scalar_args, tensor_args
from .triton_lang import round_to, widen

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages); the first is what the
# interpreter and the ahead-of-time builds use.
CONFIGS = [(64, 64, 32, 8, 4, 3), (128, 128, 32, 8, 4, 3), (128, 64, 64, 8, 4, 3),
           (64, 128, 64, 8, 4, 3), (128, 128, 64, 8, 8, 3), (128, 256, 64, 8, 8, 3)]
MORE_CONFIGS = [(256, 128, 64, 8, 8, 3), (128, 256, 32, 8, 8, 4), (64, 64, 64, 8, 4, 4),
                (32, 64, 32, 8, 4, 5), (64, 32, 32, 8, 4, 5), (128, 128, 32, 8, 8, 4),
                (64, 256, 32, 8, 8, 4), (256, 64, 32, 8, 8, 4), (128, 64, 32, 8, 4, 4)]
CHOICES = ("auto", "template", "library")
_TORCH = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}

PRELUDE = '''

_EMBER_MATMUL_CHOICE = {}
_EMBER_DOT_UPCAST = tl.constexpr(__import__("os").environ.get("TRITON_INTERPRET", "0") == "1")


def _ember_allow_tf32():
    return bool(torch.backends.cuda.matmul.allow_tf32) and not getattr(torch.version, "hip", None)


def _ember_matmul_choose(name, policy, launcher, tensors):
    # Which variant `launcher(*tensors, _choice=...)` runs: "template" or "library"; "probe"
    # for runtime/triton_warm.py's mock tensors (record both variants' launches, run nothing).
    if not isinstance(tensors[0], torch.Tensor):
        return "probe"
    if policy != "auto":
        return policy
    dev = tensors[0].device
    key = (name, str(dev), _ember_allow_tf32())
    choice = _EMBER_MATMUL_CHOICE.get(key)
    if choice is not None:
        return choice
    if dev.type != "cuda":
        choice = "template"       # nothing to time on: the interpreter runs the template
    elif torch.cuda.is_current_stream_capturing():
        return "library"          # no timing inside a graph capture
    else:
        # Outputs never share memory with inputs here (no in-place for matmul kernels), so
        # running a variant again changes nothing but the time.
        import triton.testing
        times = {}
        for k in ("template", "library"):
            launcher(*tensors, _choice=k)   # compiles; autotunes the template's configurations
        for k in ("template", "library"):
            times[k] = triton.testing.do_bench(lambda: launcher(*tensors, _choice=k),
                                               warmup=5, rep=25, return_mode="median")
        choice = min(times, key=times.get)
        _EMBER_MATMUL_TIMES[key] = times
    _EMBER_MATMUL_CHOICE[key] = choice
    return choice


_EMBER_MATMUL_TIMES = {}


def _ember_mm_into(a, b, out, bias=None):
    # out = a @ b (+ bias), accumulated in f32 and rounded once to out's type, by the library
    # (cuBLAS): eager's own call where the types are eager's (bf16 addmm: the same bits)
    mm = torch.bmm if a.dim() == 3 else torch.mm
    if a.dtype == out.dtype and (bias is None or bias.dtype == out.dtype):
        if bias is None:
            mm(a, b, out=out)
        else:
            (torch.baddbmm if a.dim() == 3 else torch.addmm)(bias, a, b, out=out)
        return
    if a.dtype == torch.float32:
        acc = mm(a, b)
    elif a.is_cuda:
        acc = (torch.ops.aten.bmm.dtype if a.dim() == 3 else torch.ops.aten.mm.dtype)(
            a, b, torch.float32)
    else:
        acc = mm(a.float(), b.float())
        acc.add_(0.0)     # -0.0 sums as eager's narrow GEMM gives them (runtime/externs.py)
    if bias is not None:
        acc = acc + bias.float()
    out.copy_(acc)
'''


def _finish(product, args):
    """(value, bias argument index or None, bias is a row vector) when the product's only user
    is a generic of the finishing form `[truncf](product [+ extf?(bias)])`, else None."""
    us = [u.owner for u in product.uses]
    if len(us) != 1 or op_name(us[0]) != "linalg.generic":
        return None
    gen = us[0]
    ins = list(gen.opview.inputs)
    body = [op_name(o) for o in gen.regions[0].blocks[0].operations]
    if ins[0] != product or not set(body) <= {"arith.extf", "arith.addf", "arith.truncf",
                                              "linalg.yield"}:
        return None
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(gen.attributes["indexing_maps"])]
    rank = len(shape(product))
    ident = ir.AffineMap.get_identity(rank)
    if maps[0] != ident or maps[-1] != ident or body.count("arith.addf") > 1:
        return None
    bias, row = None, False
    if len(ins) == 2:
        if ins[1] not in args or "arith.addf" not in body:
            return None
        bias = args.index(ins[1])
        row = shape(ins[1]) == shape(product)[-1:] and \
            maps[1] == ir.AffineMap.get(rank, 0, [ir.AffineDimExpr.get(rank - 1)])
        if not row and (maps[1] != ident or shape(ins[1]) != shape(product)):
            return None
    elif len(ins) != 1 or "arith.addf" in body:
        return None
    return gen.results[0], bias, row


class Parts:
    """A `matmul` kernel taken apart: the product's operands (argument index, transposed), its
    sizes, the product value, the epilogue's ops and schedule."""

    def __init__(self, fn):
        block = fn.regions[0].blocks[0]
        ops = list(block.operations)
        mms = [op for op in ops if op_name(op) in ("linalg.matmul", "linalg.batch_matmul")]
        if len(mms) != 1:
            raise Unschedulable("a matmul kernel holds exactly one linalg.matmul", fn.location)
        mm = mms[0]
        self.batched = op_name(mm) == "linalg.batch_matmul"
        args = list(block.arguments)
        self.tensor_args = tensor_args(block)
        if scalar_args(block):
            raise Unschedulable("a matmul kernel of symbolic sizes", fn.location)
        self.operands = []
        for v in list(mm.operands)[:2]:
            transposed = False
            op = defining_op(v)
            if op is not None and op_name(op) == "linalg.transpose":
                v, transposed = op.operands[0], True
            if v not in args:
                raise Unschedulable("a matmul kernel's operands are its arguments", mm.location)
            self.operands.append((self.tensor_args.index(v), transposed))
        fill = defining_op(mm.operands[2])
        if fill is None or op_name(fill) != "linalg.fill":
            raise Unschedulable("a matmul kernel's product starts from zero", mm.location)
        self.product = mm.results[0]
        if type_name(self.product.type) != "f32":
            raise Unschedulable("a matmul kernel accumulates in f32", mm.location)
        s = shape(self.product)
        a_shape = shape(self.operands_values(block)[0])
        self.B = s[0] if self.batched else 1
        self.M, self.N = s[-2], s[-1]
        self.K = a_shape[-2] if self.operands[0][1] else a_shape[-1]
        if None in (self.B, self.M, self.N, self.K):
            raise Unschedulable("a matmul kernel of symbolic sizes", fn.location)
        self.dtype = type_name(self.operands_values(block)[0].type)
        # The library call's own finish (ember-matmul-template builds it): a bias added in f32
        # and / or the rounding to a bf16/f16 result, as one generic right after the product.
        # The template applies it to its accumulator; the library variant is that call.
        self.bias, self.bias_row, self.value = None, False, self.product
        finish = _finish(self.product, self.tensor_args)
        if finish is not None:
            self.value, self.bias, self.bias_row = finish
        self.out_type = type_name(self.value.type)
        after = ops[ops.index(self.value.owner) + 1:-1]
        self.results = list(ops[-1].operands)
        self.schedule = KernelSchedule(after, [self.value] + self.tensor_args, self.results,
                                       "pointwise", [])
        if self.schedule.kind != "pointwise":
            raise Unschedulable("a matmul kernel's epilogue is pointwise", fn.location)

    def operands_values(self, block):
        ta = tensor_args(block)
        return [ta[i] for i, _ in self.operands]

    def strides(self, k):
        """(batch, row, column) strides of operand k as the product reads it."""
        idx, transposed = self.operands[k]
        rows, cols = (self.M, self.K) if k == 0 else (self.K, self.N)
        batch = rows * cols
        return (batch, 1, rows) if transposed else (batch, cols, 1)


def template_head(w, parts: Parts) -> list:
    """The template's statements before the epilogue (tile indices, the K loop of `tl.dot`,
    the library call's own bias and rounding on `acc`), put first in the root scope of `w`'s
    builder, which binds the product to `acc` (ember_lower_to_triton._MatmulWriter)."""
    p = parts
    b = w.builder
    root = b.stack[0]
    wide = any(math.prod(shape(v)) > 2 ** 31 - 1 for v in p.tensor_args + p.results) or \
        p.B * p.M * p.N > 2 ** 31 - 1
    cast = ".to(tl.int64)" if wide else ""
    (ia, _), (ib, _) = p.operands
    sab, sam, sak = p.strides(0)
    sbb, sbk, sbn = p.strides(1)
    A, B = w.in_names[ia], w.in_names[ib]
    head = [
        f"pid = tl.program_id(0){cast}",
        f"bid = tl.program_id(1){cast}" if p.batched else "bid = 0",
        f"num_pid_m = tl.cdiv({p.M}, BLOCK_M)",
        f"num_pid_n = tl.cdiv({p.N}, BLOCK_N)",
        "width = GROUP_M * num_pid_n",
        "first_m = (pid // width) * GROUP_M",
        "group_m = tl.minimum(num_pid_m - first_m, GROUP_M)",
        "pid_m = first_m + ((pid % width) % group_m)",
        "pid_n = (pid % width) // group_m",
        "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "offs_k = tl.arange(0, BLOCK_K)",
        # rows / columns past the edge wrap around (valid addresses; the store masks them)
        f"offs_am = {_wrapped('offs_m', p.M, 'BLOCK_M', sam)}",
        f"offs_bn = {_wrapped('offs_n', p.N, 'BLOCK_N', sbn)}",
        f"a_ptrs = {A} + bid * {sab} + offs_am[:, None] * {sam} + offs_k[None, :] * {sak}",
        f"b_ptrs = {B} + bid * {sbb} + offs_k[:, None] * {sbk} + offs_bn[None, :] * {sbn}",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        f"for k0 in range(0, {p.K}, BLOCK_K):",
        f"    if {p.K} % BLOCK_K == 0:",
        "        a = tl.load(a_ptrs)",
        "        b = tl.load(b_ptrs)",
        "    else:",
        f"        a = tl.load(a_ptrs, mask=offs_k[None, :] < {p.K} - k0, other=0.0)",
        f"        b = tl.load(b_ptrs, mask=offs_k[:, None] < {p.K} - k0, other=0.0)",
    ]
    if p.dtype == "f32":
        head += ["    if ALLOW_TF32:",
                 '        acc = tl.dot(a, b, acc, input_precision="tf32")',
                 "    else:",
                 '        acc = tl.dot(a, b, acc, input_precision="ieee")']
    else:
        # the interpreter's tl.dot reads bf16/f16 operands as raw bits: it gets them widened
        head += ["    if _EMBER_DOT_UPCAST:",
                 f'        acc = tl.dot({widen("a", p.dtype)}, {widen("b", p.dtype)}, acc, '
                 'input_precision="ieee")',
                 "    else:",
                 "        acc = tl.dot(a, b, acc)"]
    head += [f"    a_ptrs += BLOCK_K * {sak}",
             f"    b_ptrs += BLOCK_K * {sbk}",
             f"xmask = (offs_m[:, None] < {p.M}) & (offs_n[None, :] < {p.N})"]
    if p.bias is not None:
        off = "offs_n[None, :]" if p.bias_row else \
            f"bid * {p.M * p.N} + offs_m[:, None] * {p.N} + offs_n[None, :]"
        load = f"tl.load({w.in_names[p.bias]} + {off}, mask=xmask, other=0)"
        head.append(f"acc = acc + {widen(load, type_name(p.tensor_args[p.bias].type))}")
    if p.out_type != "f32":
        head.append(f"acc = {round_to('acc', p.out_type)}")
    head += [
             f"xrow = bid * {p.M} + offs_m[:, None]" if p.batched else "xrow = offs_m[:, None]",
             "xcol = offs_n[None, :]"]
    root.stmts[:0] = head
    return head


def _wrapped(offs: str, n: int, block: str, stride: int) -> str:
    """`offs % n`, with Inductor's contiguity hint where it is true or harmless: the dim is
    not the contiguous one (vector loads run along K), or no tile wraps (n a multiple of every
    block size); a wrapped tile along the contiguous dim is not contiguous."""
    if stride != 1 or n % 256 == 0:
        return f"tl.max_contiguous(tl.multiple_of({offs} % {n}, {block}), {block})"
    return f"{offs} % {n}"


def split_dims(sched, out, cols: int):
    """The non-unit dims of `out` split into (row dims, column dims): the column dims'
    sizes multiply to `cols` (ember-matmul-template checked that they can)."""
    dims = [g for g in sched.dims(out) if not sched.unit(g)]
    sizes = [sched.size(g) for g in dims]
    for k in range(len(dims) + 1):
        if math.prod(sizes[k:]) == cols:
            return dims[:k], dims[k:]
    raise Unschedulable("a matmul kernel's result does not split into the product's rows "
                        "and columns")


def acc_expr() -> Expr:
    return Expr("acc", frozenset({"x"}))


def config_text(c) -> str:
    bm, bn, bk, gm, warps, stages = c
    return (f"triton.Config({{'BLOCK_M': {bm}, 'BLOCK_N': {bn}, 'BLOCK_K': {bk}, "
            f"'GROUP_M': {gm}}}, num_warps={warps}, num_stages={stages})")


def configs_for(parts: Parts, max_autotune: bool, autotune: bool) -> list:
    cs = list(dict.fromkeys(CONFIGS + (MORE_CONFIGS if max_autotune else [])))
    if not autotune:
        return cs[:1]
    # the pipelined operand tiles must fit in shared memory (228 KiB on an H100 / H200 SM)
    elt = 4 if parts.dtype == "f32" else 2
    cs = [c for c in cs if (c[0] * c[2] + c[2] * c[1]) * elt * c[5] <= 200 * 1024]
    # tiles far larger than the product only mask lanes off: keep those that fit (and the first)
    fit = [c for c in cs if c[0] <= max(16, _pow2(parts.M)) * 2 and c[1] <= max(16, _pow2(parts.N)) * 2]
    return [cs[0]] + [c for c in fit if c != cs[0]]


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def check_choice(choice: str) -> None:
    if choice not in CHOICES:
        raise ValueError(f"matmul-choice must be one of {', '.join(CHOICES)}")


def launcher_lines(name: str, w, parts: Parts, configs, choice: str, epi) -> list:
    """The choosing launcher: the template's launch, or the library call and the epilogue
    kernel's launch (`epi`: its _Kernel), inline (runtime/triton_warm.py records the launches
    a launcher's own code makes)."""
    p = parts
    jit = f"{name}_mm_kernel"
    n_in = len(w.args)
    (ia, ta), (ib, tb) = p.operands
    grid = (f"lambda meta: (triton.cdiv({p.M}, meta['BLOCK_M']) * "
            f"triton.cdiv({p.N}, meta['BLOCK_N']), {p.B})")
    tf32 = ", ALLOW_TF32=_ember_allow_tf32()" if p.dtype == "f32" else ""
    lines = [f"def {name}(*tensors, _choice=None):",
             f"    choice = _choice or _ember_matmul_choose({name!r}, {choice!r}, {name}, "
             "tensors)",
             '    if choice != "library":']
    if len(configs) > 1:
        lines.append(f"        {jit}[{grid}](*tensors{tf32}, **_EMBER_LAUNCH)")
    else:
        bm, bn, bk, gm, warps, stages = configs[0]
        lines.append(f"        {jit}[{grid}](*tensors, BLOCK_M={bm}, BLOCK_N={bn}, "
                     f"BLOCK_K={bk}, GROUP_M={gm}{tf32}, num_warps={warps}, "
                     f"num_stages={stages}, **_EMBER_LAUNCH)")
    numel = math.prod(shape(p.value))
    egrid = f'lambda meta: (triton.cdiv({numel}, meta["XBLOCK"]),)'
    eargs = f"*tensors[:{n_in}], mm, *tensors[{n_in}:], {numel}"
    if len(epi.configs) > 1:
        elaunch = f"{epi.name}_kernel[{egrid}]({eargs}, **_EMBER_LAUNCH)"
    else:
        c, warps = epi.configs[0]
        kw = ", ".join(f"{n}={v}" for n, v in c.items())
        elaunch = f"{epi.name}_kernel[{egrid}]({eargs}, {kw}, num_warps={warps}, **_EMBER_LAUNCH)"
    lines += ['    if choice != "template":',
              f"        a = tensors[{ia}]" + (".transpose(-1, -2)" if ta else ""),
              f"        b = tensors[{ib}]" + (".transpose(-1, -2)" if tb else ""),
              f"        mm = torch.empty({tuple(shape(p.value))!r}, "
              f"dtype=torch.{_TORCH[p.out_type]}, "
              'device="meta" if choice == "probe" else a.device)',
              '        if choice != "probe":',
              "            _ember_mm_into(a, b, mm" +
              (f", tensors[{p.bias}])" if p.bias is not None else ")"),
              f"        {elaunch}"]
    return lines
