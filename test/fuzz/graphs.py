"""Random programs for the differential fuzzer (issue 9, item 2).

A graph is identified by (seed, index): `generate(seed, index)` always builds the same program
(Python's `random.Random` seeded with a string is stable across runs and platforms). A graph is
Python source: `make_inputs()` builds its inputs from literal values (special values included)
and a layout (permuted, strided, expanded, offset), `fn(*inputs)` is the program. The source is
the reproducer: `Graph.source()` pasted into a regression test is the whole case.

The generator builds a program one line at a time and runs each candidate line eagerly on the
concrete inputs, so shapes and dtypes are what eager gives and data-dependent errors (an index
out of range, an integer division by zero) are known: a line eager rejects is dropped, or kept
as the program's last line (a graph that must raise) with a small probability.

Floats are tracked as *exact* (bit-for-bit reproducible: inputs, selections, views, casts,
min/max) or not (arithmetic: a compiler may contract, reassociate or keep intermediates in
fp32). Discontinuous ops (comparisons, floor, float->int casts, argmax, ...) are applied only
to exact floats, so a rounding difference that tolerance accepts is never turned into a
different integer; outputs that are exact are compared bit for bit.
"""
from __future__ import annotations

import math
import random
import re
import warnings
from dataclasses import dataclass, field

import torch

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
INTS = (torch.int64, torch.int32, torch.int8, torch.uint8)
DTYPES = FLOATS + INTS + (torch.bool,)
MAX_NUMEL = 256          # a literal input's elements
MAX_VALUE_NUMEL = 4096   # any intermediate (expand can grow a tensor)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype)    # "torch.float32"


@dataclass
class Var:
    name: str
    value: torch.Tensor
    exact: bool
    lowp: bool = False

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def shape(self):
        return tuple(self.value.shape)

    @property
    def is_float(self):
        return self.value.dtype.is_floating_point


@dataclass
class Graph:
    seed: int
    index: int
    inputs: list = field(default_factory=list)    # source lines of make_inputs' body
    args: list = field(default_factory=list)      # input names
    lines: list = field(default_factory=list)     # fn body
    outputs: list = field(default_factory=list)   # names returned
    exact: dict = field(default_factory=dict)     # output name -> bit-exact comparison
    expect_error: bool = False

    def source(self) -> str:
        body = "\n".join(f"    {ln}" for ln in self.inputs)
        fn = "\n".join(f"    {ln}" for ln in self.lines)
        ret = ", ".join(self.outputs) + ("," if len(self.outputs) == 1 else "")
        exact = [self.exact.get(o, False) for o in self.outputs]
        return (f"# fuzz graph seed={self.seed} index={self.index}"
                f"{' (eager raises)' if self.expect_error else ''}\n"
                f"import torch\nnan, inf = float('nan'), float('inf')\nEXACT = {exact!r}\n\n\n"
                f"def make_inputs():\n{body}\n    return [{', '.join(self.args)}]\n\n\n"
                f"def fn({', '.join(self.args)}):\n{fn}\n    return ({ret})\n")


def load(source: str) -> dict:
    """The namespace of a graph's source: `make_inputs`, `fn`, `EXACT`."""
    ns: dict = {}
    exec(compile(source, "<fuzz graph>", "exec"), ns)
    return ns


# ---------------------------------------------------------------------------------------------
# Inputs

def _rand_shape(rng: random.Random, rank: int | None = None) -> tuple:
    if rank is None:
        rank = rng.choices([0, 1, 2, 3, 4], [1, 3, 4, 3, 1])[0]
    dims = rng.choices([0, 1, 2, 3, 4, 5, 7], [1, 8, 6, 6, 5, 4, 2], k=rank)
    while math.prod(dims) > MAX_NUMEL:
        dims[dims.index(max(dims))] //= 2
    return tuple(dims)


def _specials(dtype) -> list:
    if dtype.is_floating_point:
        tiny = torch.finfo(dtype).tiny
        # bfloat16 subnormals: the Triton interpreter converts them wrongly (to 0 or another
        # value; a GPU does not), so they are left out for every target.
        sub = [tiny / 4, -tiny / 2] if dtype != torch.bfloat16 else [tiny, -tiny]
        return [math.nan, math.inf, -math.inf, -0.0, 0.0, *sub, 1.0, -1.0, 0.5,
                1e30 if dtype != torch.float16 else 6e4, 2.5, -3.5]
    if dtype == torch.bool:
        return [True, False]
    info = torch.iinfo(dtype)
    return [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.max - 1]


def _values(rng: random.Random, dtype, n: int, special: float) -> list:
    out = []
    for _ in range(n):
        if rng.random() < special:
            out.append(rng.choice(_specials(dtype)))
        elif dtype.is_floating_point:
            out.append(rng.gauss(0.0, 2.0))
        elif dtype == torch.bool:
            out.append(rng.random() < 0.5)
        elif dtype == torch.uint8:
            out.append(rng.randint(0, 9))
        else:
            out.append(rng.randint(-6, 6))
    return out


def _literal(values: list, dtype) -> str:
    def one(v):
        if isinstance(v, bool):
            return repr(v)
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v == math.inf else
                                               "-inf" if v == -math.inf else repr(v))
        return repr(int(v))
    # round through the dtype, so that the literal is exactly the tensor's value
    exact = torch.tensor(values, dtype=torch.float64 if dtype.is_floating_point else
                         (torch.bool if dtype == torch.bool else torch.int64)).to(dtype)
    return "[" + ", ".join(one(v) for v in exact.tolist()) + "]"


# ---------------------------------------------------------------------------------------------
# The builder

class Builder:
    def __init__(self, seed: int, index: int):
        self.rng = random.Random(f"ember-fuzz:{seed}:{index}")
        self.g = Graph(seed, index)
        self.vars: list[Var] = []
        self.env: dict = {"torch": torch, "nan": math.nan, "inf": math.inf}
        self.special = self.rng.choice([0.0, 0.05, 0.2])

    # -- inputs -----------------------------------------------------------------------------
    def new_input(self, shape: tuple, dtype, values: list | None = None,
                  layout: str | None = None) -> Var:
        rng = self.rng
        name = f"a{len(self.g.args)}"
        if layout is None:
            layout = rng.choices(["contig", "permute", "stride", "expand", "offset"],
                                 [6, 2, 1, 1, 1])[0]
        rank = len(shape)
        base, tail = list(shape), ""
        if layout == "permute" and rank >= 2:
            perm = list(range(rank))
            rng.shuffle(perm)
            base = [shape[p] for p in perm]
            inv = [perm.index(d) for d in range(rank)]
            tail = f".permute({', '.join(map(str, inv))})"
        elif layout == "stride" and rank >= 1:
            d = rng.randrange(rank)
            base[d] = shape[d] * 2
            tail = "[" + ", ".join([":"] * d + ["::2"]) + "]"
        elif layout == "expand" and rank >= 1 and values is None:
            ones = [d for d in range(rank) if rng.random() < 0.5] or [rng.randrange(rank)]
            for d in ones:
                base[d] = 1
            tail = f".expand({', '.join(map(str, shape))})"
        elif layout == "offset":
            base = [1 + math.prod(shape)]
            tail = f"[1:].view({', '.join(map(str, shape))})" if rank else "[1:].view(())"
        n = math.prod(base)
        if values is None:
            values = _values(rng, dtype, n, self.special)
        elif layout == "offset":
            values = [values[0]] + values
        if layout == "stride" and rank >= 1 and len(values) != n:
            values = [v for v in values for _ in (0, 1)]   # each row twice: any value fits
        if n == 0:
            src = f"torch.zeros({tuple(base)!r}, dtype={_dt(dtype)})"
        else:
            src = f"torch.tensor({_literal(values[:n], dtype)}, dtype={_dt(dtype)})"
            src += f".reshape({', '.join(map(str, base))})" if base else ".reshape(())"
        self.g.inputs.append(f"{name} = {src}{tail}")
        self.g.args.append(name)
        value = eval(src + tail, self.env)
        assert tuple(value.shape) == tuple(shape), (src + tail, shape)
        self.env[name] = value
        v = Var(name, value, exact=True)
        self.vars.append(v)
        return v

    def random_input(self, shape=None, dtype=None) -> Var:
        rng = self.rng
        dtype = dtype or rng.choices(DTYPES, [6, 2, 2, 3, 2, 1, 1, 1])[0]
        return self.new_input(shape if shape is not None else _rand_shape(rng), dtype)

    def index_input(self, shape: tuple, size: int, negative: bool = False) -> Var:
        """int64 indices into a dim of `size`; rarely one out of range (eager must raise)."""
        rng = self.rng
        n = math.prod(shape)
        lo = -size if negative else 0
        vals = [rng.randint(lo, size - 1) if size > 0 else 0 for _ in range(n)]
        if n and (size == 0 or rng.random() < 0.08):
            vals[rng.randrange(n)] = rng.choice([size, -size - 1, 10**9, -1])
        return self.new_input(shape, torch.int64, vals, layout=rng.choice(["contig"] * 4 +
                                                                           ["permute"]))

    # -- picking operands --------------------------------------------------------------------
    def pick(self, cond=lambda v: True) -> Var | None:
        cands = [v for v in self.vars if cond(v)]
        if not cands:
            return None
        # recent values more often: programs are chains more than fans
        weights = [1 + i for i in range(len(cands))]
        return self.rng.choices(cands, weights)[0]

    def partner(self, x: Var, dtype=None) -> Var:
        """A second operand broadcastable with x: an existing value or a new input."""
        rng = self.rng
        cands = [v for v in self.vars if v is not x and _broadcastable(v.shape, x.shape)
                 and (dtype is None or v.dtype == dtype)]
        if cands and rng.random() < 0.6:
            return rng.choice(cands)
        shape = list(x.shape)
        for d in range(len(shape)):
            if rng.random() < 0.25:
                shape[d] = 1
        while shape and rng.random() < 0.2:
            shape.pop(0)
        if rng.random() < 0.1 and x.shape:
            shape = [1] + list(x.shape)   # the partner has more dims: the result grows
        return self.random_input(tuple(shape), dtype or rng.choice([x.dtype] * 3 + list(DTYPES)))

    # -- emitting ----------------------------------------------------------------------------
    def emit(self, expr: str, exact: bool, allow_error: float = 0.05) -> Var | None:
        """Runs `expr` eagerly; on success binds it to a new name. On an eager error the line
        is kept as the graph's last one with probability `allow_error`."""
        name = f"v{len(self.g.lines)}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = eval(expr, self.env)
        except Exception:  # noqa: BLE001 - eager rejects this line
            if self.rng.random() < allow_error:
                self.g.lines.append(f"{name} = {expr}")
                self.g.expect_error = True
                return Var(name, torch.empty(0), exact)
            return None
        if not isinstance(value, torch.Tensor) or value.numel() > MAX_VALUE_NUMEL:
            return None
        self.env[name] = value
        self.g.lines.append(f"{name} = {expr}")
        v = Var(name, value, exact or not value.dtype.is_floating_point)
        # an inexact bf16/fp16 value keeps its tolerance when promoted to float32
        used = [u for u in self.vars if re.search(rf"\b{u.name}\b", expr)]
        v.lowp = not v.exact and (value.dtype in (torch.bfloat16, torch.float16) or
                                  any(u.lowp for u in used))
        self.vars.append(v)
        return v


def _broadcastable(a: tuple, b: tuple) -> bool:
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


def generate(seed: int, index: int, max_ops: int = 7) -> Graph:
    from .ops import TEMPLATES    # the op templates, weighted
    b = Builder(seed, index)
    rng = b.rng
    first = b.random_input()
    for _ in range(rng.randint(0, 1)):
        b.partner(first)
    n_ops = rng.randint(1, max_ops)
    names, weights = zip(*[(t, w) for t, w in TEMPLATES])
    while len(b.g.lines) < n_ops and not b.g.expect_error:
        for _attempt in range(12):
            template = rng.choices(names, weights)[0]
            if template(b) is not None:
                break
        else:
            break
    produced = [v for v in b.vars if v.name.startswith("v")]
    if b.g.expect_error:
        b.g.outputs = [b.g.lines[-1].split(" = ")[0]]
    else:
        last = produced[-1] if produced else b.vars[-1]
        outs = [last]
        for _ in range(rng.choice([0, 0, 1, 2])):
            outs.append(rng.choice(b.vars))   # inputs too: aliasing with the inputs
        b.g.outputs = [v.name for v in outs]
        b.g.exact = {v.name: "low" if v.lowp else v.exact for v in outs}
    return b.g
