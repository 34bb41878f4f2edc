"""The fuzzer's op templates: each takes the Builder, picks operands, emits one line (or returns
None when nothing fits). `TEMPLATES` pairs each with its weight."""
from __future__ import annotations

import math

import torch

from .graphs import DTYPES, FLOATS, INTS, Var, _dt

# Unary ops: (source with {x}, floats only, keeps exactness, discontinuous)
UNARY = [
    ("torch.neg({x})", False, True, False), ("torch.abs({x})", False, True, False),
    ("torch.exp({x})", True, False, False), ("torch.log({x})", True, False, False),
    ("torch.sqrt({x})", True, False, False), ("torch.tanh({x})", True, False, False),
    ("torch.sigmoid({x})", True, False, False), ("torch.relu({x})", False, True, False),
    ("torch.rsqrt({x})", True, False, False), ("torch.expm1({x})", True, False, False),
    ("torch.log1p({x})", True, False, False), ("torch.reciprocal({x})", True, False, False),
    ("torch.floor({x})", False, True, True), ("torch.ceil({x})", False, True, True),
    ("torch.round({x})", False, True, True), ("torch.trunc({x})", False, True, True),
    ("torch.sign({x})", False, True, True), ("torch.isnan({x})", False, True, True),
    ("torch.isinf({x})", False, True, True), ("torch.logical_not({x})", False, True, True),
    ("torch.square({x})", False, False, False), ("torch.sin({x})", True, False, False),
    ("torch.nan_to_num({x})", False, True, False), ("{x}.clone()", False, True, False),
    ("torch.nn.functional.gelu({x})", True, False, False),
]
# Binary ops: (source with {x} {y}, floats only, keeps exactness, discontinuous, ints only)
BINARY = [
    ("{x} + {y}", False, False, False, False), ("{x} - {y}", False, False, False, False),
    ("{x} * {y}", False, False, False, False), ("{x} / {y}", False, False, False, False),
    ("{x} // {y}", False, True, True, False), ("{x} % {y}", False, True, True, False),
    ("torch.fmod({x}, {y})", False, True, True, False),
    ("torch.div({x}, {y}, rounding_mode='trunc')", False, True, True, False),
    ("torch.maximum({x}, {y})", False, True, False, False),
    ("torch.minimum({x}, {y})", False, True, False, False),
    ("torch.fmax({x}, {y})", False, True, False, False),
    ("torch.fmin({x}, {y})", False, True, False, False),
    ("{x} == {y}", False, True, True, False), ("{x} != {y}", False, True, True, False),
    ("{x} < {y}", False, True, True, False), ("{x} <= {y}", False, True, True, False),
    ("{x} > {y}", False, True, True, False), ("{x} >= {y}", False, True, True, False),
    ("torch.logical_and({x}, {y})", False, True, True, False),
    ("torch.logical_or({x}, {y})", False, True, True, False),
    ("{x} & {y}", False, True, True, True), ("{x} | {y}", False, True, True, True),
    ("{x} ^ {y}", False, True, True, True),
    ("torch.atan2({x}, {y})", True, False, False, False),
    ("torch.pow({x}, {y})", True, False, False, False),
]
SCALARS = ["2", "-1", "0.5", "3", "0", "-2.5", "1e-3", "True"]


def _ok_discontinuous(*vs: Var) -> bool:
    return all(v.exact for v in vs)


def unary(b):
    src, floats_only, keeps, discont = b.rng.choice(UNARY)
    x = b.pick(lambda v: (v.is_float or not floats_only) and (not discont or v.exact))
    if x is None:
        return None
    return b.emit(src.format(x=x.name), exact=keeps and x.exact)


def _eager_traps(src: str, x, y) -> bool:
    """Whether eager itself dies on this line: its truncating division of an int32/int64 MIN
    by -1 is x86's idiv, which raises SIGFPE (seed 49 index 848 killed the generator). ember
    returns the wrapped MIN there; no eager result to compare with."""
    if "rounding_mode='trunc'" not in src:
        return False
    dt = torch.result_type(x, y)
    if dt not in (torch.int32, torch.int64):
        return False
    try:
        xs, ys = (torch.as_tensor(v).to(dt) for v in (x, y))
        return bool(((xs == torch.iinfo(dt).min) & (ys == -1)).any())
    except RuntimeError:    # shapes that do not broadcast: eager raises on the line
        return False


def binary(b):
    src, floats_only, keeps, discont, ints_only = b.rng.choice(BINARY)
    x = b.pick(lambda v: (v.is_float or not floats_only) and (not discont or v.exact)
               and (not ints_only or not v.is_float))
    if x is None:
        return None
    if b.rng.random() < 0.3:
        y = b.rng.choice(SCALARS)
        if b.rng.random() < 0.5:
            if _eager_traps(src, x.value, eval(y)):
                return None
            return b.emit(src.format(x=x.name, y=y), exact=keeps and x.exact, allow_error=0.3)
        return b.emit(src.format(x=y, y=x.name), exact=keeps and x.exact, allow_error=0.3)
    y = b.partner(x)
    if discont and not y.exact:
        return None
    if _eager_traps(src, x.value, y.value):
        return None
    return b.emit(src.format(x=x.name, y=y.name), exact=keeps and x.exact and y.exact,
                  allow_error=0.3)


def where(b):
    c = b.pick(lambda v: v.dtype == torch.bool)
    if c is None:
        x = b.pick(lambda v: v.exact)
        if x is None:
            return None
        c_src = f"{x.name} > 0"
    else:
        c_src = c.name
    x = b.pick()
    y = b.partner(x)
    if b.rng.random() < 0.3:
        return b.emit(f"torch.where({c_src}, {x.name}, {b.rng.choice(SCALARS[:6])})",
                      exact=x.exact)
    return b.emit(f"torch.where({c_src}, {x.name}, {y.name})", exact=x.exact and y.exact)


def clamp(b):
    x = b.pick(lambda v: v.dtype != torch.bool)
    if x is None:
        return None
    lo, hi = b.rng.choice([("-1", "1"), ("0", "None"), ("None", "0.5"), ("-2", "3"),
                           ("2", "-2")])
    form = b.rng.choice(["clamp", "clamp_mm", "hardtanh"])
    if form == "clamp_mm":
        src = (f"torch.clamp_min({x.name}, {lo})" if lo != "None" else
               f"torch.clamp_max({x.name}, {hi})")
    elif form == "hardtanh" and x.is_float:
        src = f"torch.nn.functional.hardtanh({x.name})"
    else:
        src = f"torch.clamp({x.name}, {lo}, {hi})"
    return b.emit(src, exact=x.exact, allow_error=0.3)


def cast(b):
    x = b.pick()
    dtype = b.rng.choice(DTYPES)
    if x.is_float and not dtype.is_floating_point:
        if not x.exact:
            return None
        vals = x.value.double()
        if vals.numel() and not (torch.isfinite(vals).all() and vals.abs().max() < 1000):
            # out-of-range float -> int conversion is undefined in C++ (eager gives the
            # x86 answer); only in-range values are compared
            return b.emit(f"{x.name}.nan_to_num(0.0, 0.0, 0.0).clamp(-1000, 1000).to({_dt(dtype)})",
                          exact=True)
    return b.emit(f"{x.name}.to({_dt(dtype)})", exact=x.exact or not x.is_float)


REDUCTIONS = [("sum", False, False), ("mean", True, False), ("amax", False, True),
              ("amin", False, True), ("prod", False, False), ("any", False, True),
              ("all", False, True), ("argmax", False, True), ("argmin", False, True),
              ("max", False, True), ("min", False, True), ("std", True, False),
              ("logsumexp", True, False)]


def reduction(b):
    name, floats_only, keeps = b.rng.choice(REDUCTIONS)
    x = b.pick(lambda v: (v.is_float or not floats_only)
                         and (v.exact or name not in ("argmax", "argmin", "max", "min", "any",
                                                      "all")))
    if x is None:
        return None
    if name == "std" and x.value.numel() and (x.value.double().abs() > 1e15).any():
        return None     # eager's CPU std accumulates in float64: see test_fuzz_regressions
    rng, rank = b.rng, x.value.dim()
    keep = rng.choice(["", ", keepdim=True"])
    one_dim = name in ("argmax", "argmin", "max", "min", "prod", "any", "all", "logsumexp",
                       "std")
    if rank == 0 or rng.random() < 0.2:
        if name in ("max", "min", "logsumexp", "std"):
            return None
        src = f"{x.name}.{name}()" if name != "logsumexp" else None
    elif one_dim or rng.random() < 0.6:
        d = rng.randrange(-rank, rank)
        src = f"{x.name}.{name}({d}{keep})"
        if name in ("max", "min"):
            src += rng.choice([".values", ".indices"])
        if name == "logsumexp":
            src = f"torch.logsumexp({x.name}, {d}{keep})"
    else:
        dims = rng.sample(range(rank), rng.randint(1, rank))
        src = f"{x.name}.{name}({tuple(dims)!r}{keep})"
    if src is None:
        return None
    return b.emit(src, exact=keeps and x.exact, allow_error=0.1)


def view(b):
    x = b.pick()
    rng, shape, rank = b.rng, list(x.shape), len(x.shape)
    kind = rng.choice(["view", "reshape", "permute", "transpose", "expand", "slice", "select",
                       "unsqueeze", "squeeze", "t", "flatten", "narrow", "contiguous", "T"])
    n = math.prod(shape)
    if kind in ("view", "reshape"):
        new = _factor(rng, n)
        if rng.random() < 0.3 and new:
            new[rng.randrange(len(new))] = -1
        src = f"{x.name}.{kind}({', '.join(map(str, new))})" if new else f"{x.name}.{kind}(())"
    elif kind == "permute" and rank:
        perm = list(range(rank))
        rng.shuffle(perm)
        src = f"{x.name}.permute({', '.join(map(str, perm))})"
    elif kind == "transpose" and rank:
        src = f"{x.name}.transpose({rng.randrange(-rank, rank)}, {rng.randrange(rank)})"
    elif kind == "expand" and rank and 1 in shape:
        new = [rng.choice([1, 2, 3, 5]) if s == 1 else s for s in shape]
        lead = [rng.choice([2, 3])] if rng.random() < 0.3 else []
        src = f"{x.name}.expand({', '.join(map(str, lead + new))})"
    elif kind == "slice" and rank:
        d = rng.randrange(rank)
        start = rng.choice(["", "1", "-2", "0"])
        stop = rng.choice(["", "-1", "3", "100"])
        step = rng.choice(["", ":2", ":3"])
        idx = [":"] * d + [f"{start}:{stop}{step}"]
        src = f"{x.name}[{', '.join(idx)}]"
    elif kind == "select" and rank:
        d = rng.randrange(rank)
        i = rng.randrange(-shape[d], shape[d]) if shape[d] else 0
        src = f"{x.name}.select({d}, {i})"
    elif kind == "unsqueeze":
        src = f"{x.name}.unsqueeze({rng.randrange(-rank - 1, rank + 1)})"
    elif kind == "squeeze":
        src = f"{x.name}.squeeze({rng.randrange(rank)})" if rank and rng.random() < 0.5 \
            else f"{x.name}.squeeze()"
    elif kind == "t" and rank <= 2:
        src = f"{x.name}.t()"
    elif kind == "T" and rank == 2:
        src = f"{x.name}.mT"
    elif kind == "flatten" and rank:
        src = f"{x.name}.flatten({rng.randrange(rank)})"
    elif kind == "narrow" and rank and shape[0]:
        start = rng.randrange(shape[0])
        src = f"{x.name}.narrow(0, {start}, {rng.randint(0, shape[0] - start)})"
    elif kind == "contiguous":
        src = f"{x.name}.contiguous()"
    else:
        return None
    return b.emit(src, exact=x.exact, allow_error=0.02)


def _factor(rng, n: int) -> list:
    if n == 0:
        return [rng.choice([0, 2]), 0, rng.choice([1, 3])][:rng.randint(1, 3)]
    out = []
    while n > 1:
        divs = [d for d in range(2, n + 1) if n % d == 0]
        d = rng.choice(divs[:3])
        out.append(d)
        n //= d
    if rng.random() < 0.3:
        out.insert(rng.randrange(len(out) + 1), 1)
    rng.shuffle(out)
    return out


def gather(b):
    x = b.pick(lambda v: v.value.dim() >= 1)
    if x is None:
        return None
    rng, rank = b.rng, x.value.dim()
    d = rng.randrange(rank)
    shape = tuple(rng.randint(0, s) if i != d else rng.randint(0, 4)
                  for i, s in enumerate(x.shape))
    idx = b.index_input(shape, x.shape[d])
    return b.emit(f"torch.gather({x.name}, {d}, {idx.name})", exact=x.exact, allow_error=0.5)


def index_select(b):
    x = b.pick(lambda v: v.value.dim() >= 1)
    if x is None:
        return None
    rng = b.rng
    d = rng.randrange(x.value.dim())
    idx = b.index_input((rng.randint(0, 5),), x.shape[d])
    if rng.random() < 0.5:
        return b.emit(f"torch.index_select({x.name}, {d}, {idx.name})", exact=x.exact,
                      allow_error=0.5)
    # advanced indexing: negative indices wrap
    idx = b.index_input((rng.randint(0, 5),), x.shape[0], negative=True)
    return b.emit(f"{x.name}[{idx.name}]", exact=x.exact, allow_error=0.5)


def embedding(b):
    w = b.pick(lambda v: v.value.dim() == 2 and v.is_float)
    if w is None:
        w = b.random_input((b.rng.randint(1, 6), b.rng.randint(1, 4)), b.rng.choice(FLOATS))
    shape = tuple(b.rng.randint(0, 4) for _ in range(b.rng.randint(1, 2)))
    idx = b.index_input(shape, w.shape[0])
    return b.emit(f"torch.nn.functional.embedding({idx.name}, {w.name})", exact=w.exact,
                  allow_error=0.5)


def matmul(b):
    rng = b.rng
    x = b.pick(lambda v: 1 <= v.value.dim() <= 3 and v.dtype in FLOATS + (torch.int64,))
    if x is None:
        return None
    n = rng.choice([1, 2, 3, 5, 0])
    k = x.shape[-1]
    if x.value.dim() == 1:
        w = b.random_input((k, n), x.dtype)
        return b.emit(f"torch.matmul({x.name}, {w.name})", exact=False)
    if x.value.dim() == 2:
        w = b.random_input((k, n) if rng.random() < 0.8 else (k,), x.dtype)
        op = "torch.mm" if w.value.dim() == 2 and rng.random() < 0.5 else "torch.matmul"
        return b.emit(f"{op}({x.name}, {w.name})", exact=False)
    w = b.random_input((x.shape[0], k, n) if rng.random() < 0.7 else (k, n), x.dtype)
    op = "torch.bmm" if w.value.dim() == 3 else "torch.matmul"
    return b.emit(f"{op}({x.name}, {w.name})", exact=False)


def softmax(b):
    x = b.pick(lambda v: v.is_float and v.value.dim() >= 1)
    if x is None:
        return None
    d = b.rng.randrange(x.value.dim())
    fn = b.rng.choice(["softmax", "log_softmax"])
    return b.emit(f"torch.{fn}({x.name}, {d})", exact=False)


def cat(b):
    x = b.pick(lambda v: v.value.dim() >= 1)
    if x is None:
        return None
    y = b.pick(lambda v: v.value.dim() == x.value.dim())
    d = b.rng.randrange(x.value.dim())
    return b.emit(f"torch.cat([{x.name}, {y.name}], {d})", exact=x.exact and y.exact,
                  allow_error=0.05)


TEMPLATES = [(unary, 6), (binary, 8), (where, 2), (clamp, 2), (cast, 3), (reduction, 4),
             (view, 6), (gather, 1), (index_select, 1), (embedding, 1), (matmul, 2),
             (softmax, 1), (cat, 1)]
assert all(d in DTYPES for d in INTS)
