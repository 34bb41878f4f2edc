"""Structured kernel IR: the typed tree that the C++ and Triton lowerings build, decide on and
finally print.

Invariant: code generation decisions (index simplification, constant folding, loop
flattening, OpenMP collapse depth and clauses, column blocks, load and store masks, pointer
widening) are made on these nodes; text exists only as what a language's printer makes of them
(`Printer` with a kernel_expr `Lang` for expressions, `render_stmt` for statements,
`render_loop` for loop headers, the lowerings' block renderers for Scopes).

Expressions (immutable, hashable, compared structurally):
    Var(name, deps)           a local, a loop variable or a size symbol; `deps`: the loop
                              variables its value depends on (for hoisting)
    Const(value, dtype)       a typed constant; dtype INT is an integer of index arithmetic,
                              printed as a bare literal in every language
    Op(kind, args, dtype, atypes)   an operation: `kind` is an MLIR op name ("arith.addf",
                              "arith.cmpf.ogt", ...), an index op "idx.add|sub|mul|div|rem|
                              min|max|lt|ge", or CHECK_INDEX (args: index, size, Const dim)
    Load(buffer, offset, dtype, masks)
    Raw(text)                 a target snippet that no decision looks into
    Op(CONVERT, (x,), dtype) a plain conversion to dtype (C++ `(float)x`)
Statements: Let(name, dtype, value) (a constant local), Decl(name, dtype, value, const,
length) (a mutable local, e.g. an accumulator, or an array of `length` elements), Store(buffer,
offset, value, dtype), Assign(name, value, op), Line(text) (a statement no decision looks into)
Scope (a block with its `Loop` header, the loop variables it binds and its OmpPragmas) and
If(cond, then, other) (a branch between two plain Scopes, C++).
`Loop(var, start, stop, step, span)` is a counted loop; its bounds are nodes (step None
when printed: 1). `OmpPragma.collapse`
is a count, fitted to the depth of the perfect loop nest when printed. A language prints a
loop header with `lang.loop(var, start, stop, step, span)` (`render_loop`) and a Decl with
`lang.decl(...)`.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Union

INT = "int"              # dtype of index-arithmetic integer literals
CHECK_INDEX = "index.check"      # a bound check on an index (not an MLIR op)
CONVERT = "convert"              # a plain conversion to the node's dtype (not an MLIR op)


@dataclasses.dataclass(frozen=True)
class Var:
    name: str
    deps: frozenset = frozenset()


@dataclasses.dataclass(frozen=True, eq=False)
class Const:
    value: Union[int, float, bool]
    dtype: str

    # Equal when spelled alike: -0.0 is not 0.0, True is not 1, and a NaN equals itself.
    def _key(self):
        k = self.__dict__.get("_k")
        if k is None:
            k = (self.dtype, type(self.value).__name__, repr(self.value))
            object.__setattr__(self, "_k", k)
        return k

    def __eq__(self, other):
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


@dataclasses.dataclass(frozen=True)
class Op:
    kind: str
    args: tuple
    dtype: str
    atypes: tuple = ()

    def __hash__(self):      # cached: trees are dict keys (memos) many times over
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.kind, self.args, self.dtype, self.atypes))
            object.__setattr__(self, "_hash", h)
        return h


@dataclasses.dataclass(frozen=True)
class Load:
    buffer: str
    offset: object
    dtype: str
    masks: tuple = ()     # names of the tile masks the load is under (Triton)


@dataclasses.dataclass(frozen=True)
class Raw:
    text: str


Node = Union[Var, Const, Op, Load, Raw]


def int_value(n) -> Optional[int]:
    """The value of an index-arithmetic literal, else None."""
    return n.value if isinstance(n, Const) and n.dtype == INT else None


def deps_of(n) -> frozenset:
    """Loop variables that node `n` depends on."""
    if isinstance(n, Var):
        return n.deps
    if isinstance(n, Op):
        d = n.__dict__.get("_deps")
        if d is None:
            d = frozenset().union(*[deps_of(a) for a in n.args]) if n.args else frozenset()
            object.__setattr__(n, "_deps", d)
        return d
    if isinstance(n, Load):
        return deps_of(n.offset)
    return frozenset()


def children(n):
    if isinstance(n, Op):
        return n.args
    if isinstance(n, Load):
        return (n.offset,)
    return ()


def walk(n):
    """`n` and every node below it (pre-order; shared subtrees once)."""
    seen, work = set(), [n]
    while work:
        x = work.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        work.extend(children(x))


# --- index arithmetic -----------------------------------------------------------------------
def _idx(kind, a, b):
    return Op("idx." + kind, (a, b), "index", ("index", "index"))


def _is(n, kind) -> bool:
    return isinstance(n, Op) and n.kind == "idx." + kind


def _floor_of(n):
    """(X, n) when `n` is `(X / n) * n`, else None."""
    if _is(n, "mul") and _is(n.args[0], "div") and n.args[0].args[1] == n.args[1]:
        return n.args[0].args
    return None


def fold_index(kind: str, a, b):
    """`a kind b` for index values (kind: add|sub|mul|div|rem|min|max), simplified:
    constants fold, identities (x + 0, x * 1, x / 1, x * 0, x % 1) vanish, and
    delinearize/linearize round trips fold back: (X / n) * n + X % n == X for any sign, C and
    Python alike, so a flattened loop index reads contiguous operands directly. Row-major
    offsets nest as ((P + X / n) * n + X % n), so (P + X / n) * n distributes first."""
    ai, bi = int_value(a), int_value(b)
    if ai is not None and bi is not None:
        return Const({"add": ai + bi, "sub": ai - bi, "mul": ai * bi, "div": ai // max(bi, 1),
                      "rem": ai % max(bi, 1), "min": min(ai, bi),
                      "max": max(ai, bi)}[kind], INT)
    if kind == "add" and ai == 0 or kind == "mul" and ai == 1:
        return b
    if kind in ("add", "sub") and bi == 0 or kind in ("mul", "div") and bi == 1:
        return a
    if kind == "mul" and (ai == 0 or bi == 0) or kind == "rem" and bi == 1:
        return Const(0, INT)
    if kind == "mul" and _is(a, "add"):
        p, q = a.args
        for d, o in ((q, p), (p, q)):
            if _is(d, "div") and d.args[1] == b:
                return fold_index("add", fold_index("mul", o, b), fold_index("mul", d, b))
    if kind == "add":
        for f, r in ((a, b), (b, a)):
            if not _is(r, "rem"):
                continue
            if _floor_of(f) == r.args:
                return r.args[0]
            if _is(f, "add"):                   # (P + floor) + rem -> P + X
                p, q = f.args
                for fl, o in ((q, p), (p, q)):
                    if _floor_of(fl) == r.args:
                        return fold_index("add", o, r.args[0])
    return _idx(kind, a, b)


# --- printing ---------------------------------------------------------------------------------
class Printer:
    """Prints expression nodes with a language (`Lang` of kernel_expr); memoised per node."""

    def __init__(self, lang):
        self.lang = lang
        self.memo: dict = {}

    def __call__(self, n) -> str:
        if isinstance(n, Var):
            return n.name
        hit = self.memo.get(n)
        if hit is None:
            hit = self.memo[n] = self._print(n)
        return hit

    def _print(self, n) -> str:
        lang = self.lang
        if isinstance(n, Var):
            return n.name
        if isinstance(n, Raw):
            return n.text
        if isinstance(n, Const):
            return str(n.value) if n.dtype == INT else lang.constant(n.value, n.dtype)
        if isinstance(n, Load):
            return lang.load(n.buffer, self(n.offset), n.dtype, n.masks)
        if n.kind == CHECK_INDEX:
            i, size, dim = n.args
            return lang.check_index(self(i), self(size), dim.value)
        return lang.op(n.kind, [self(a) for a in n.args], n.dtype, list(n.atypes), n.args)


# --- statements ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Let:
    name: str
    dtype: str
    value: object


@dataclasses.dataclass
class Decl:
    """A mutable local `name` of `dtype` set to `value` (an accumulator), `const` when it is
    never assigned again; with `length`, an array of that many elements (no value)."""
    name: str
    dtype: str
    value: object = None
    const: bool = False
    length: Optional[int] = None


@dataclasses.dataclass
class Store:
    """`buffer[offset] = value`. A block store (Triton) has the `tile` shape it covers (block
    sizes or 1) and the tile `masks` it is under; `widen`: the pointer is broadcast to the tile
    (its offset misses a tile variable); `fill`: the value is, too (it depends on none)."""
    buffer: str
    offset: object
    value: object
    dtype: str
    tile: Optional[tuple] = None
    masks: tuple = ()
    widen: bool = False
    fill: bool = False


@dataclasses.dataclass
class Assign:
    """`name op value` on a mutable local (an accumulator): op is "=", "+=", ..."""
    name: str
    value: object
    op: str = "="


@dataclasses.dataclass
class Line:
    text: str


@dataclasses.dataclass
class OmpPragma:
    """An OpenMP directive on a loop: `parallel for` (threads) and/or `simd`; `collapse`: how
    many perfectly nested loops from this one it spans; `work` (with `parallel`): the factors
    (nodes) of the iteration count that must reach `min_work` for threads to start (none:
    always); `reductions`: (operator, variable) pairs."""
    parallel: bool = False
    simd: bool = False
    collapse: int = 1
    work: tuple = ()
    min_work: int = 0
    reductions: tuple = ()

    def render(self, depth: int, show: "Printer") -> str:
        """The pragma line; `depth`: the perfect depth of the nest it is on (a hoisted loop
        invariant between two loops makes a nest imperfect, so collapse shrinks to fit)."""
        n = min(self.collapse, depth)
        text = "#pragma omp " + " ".join(["parallel for"] * self.parallel + ["simd"] * self.simd)
        if n > 1:
            text += f" collapse({n})"
        if self.work:
            text += f" if({' * '.join(show(f) for f in self.work)} >= {self.min_work})"
        return text + "".join(f" reduction({op}:{v})" for op, v in self.reductions)


@dataclasses.dataclass
class Loop:
    """A counted loop: `var` from `start` while `var < stop`, by `step` (nodes). With `span`
    (a node), the loop also stops at `start + span` (a chunk of an outer loop's range)."""
    var: str
    start: object
    stop: object
    step: object = Const(1, INT)
    span: object = None

    def names(self) -> set:
        """The loop variable and every variable its bounds read."""
        out = {self.var}
        for n in (self.start, self.stop, self.step, self.span):
            if n is not None:
                out.update(x.name for x in walk(n) if isinstance(x, Var))
        return out


class Scope:
    """A block of statements; `binds` are the loop variables it introduces, `loop` its loop
    header (None: a plain block), `pragmas` the OmpPragmas in front of it (C++)."""

    def __init__(self, binds=(), loop: Optional[Loop] = None):
        self.binds, self.loop = set(binds), loop
        self.stmts: list = []      # Let, Decl, Store, Assign, Line, str or nested Scope
        self.pragmas: list = []
        self.open = False


@dataclasses.dataclass
class If:
    """`if (cond) { then } else { other }`: `cond` a node, `then` and `other` plain Scopes
    (no loop header)."""
    cond: object
    then: Scope
    other: Scope


def perfect_depth(scope: Scope) -> int:
    """How many loops nest perfectly from `scope` down (what OpenMP `collapse` may span)."""
    depth = 1
    while len(scope.stmts) == 1 and isinstance(scope.stmts[0], Scope):
        scope, depth = scope.stmts[0], depth + 1
    return depth


def statement_nodes(stmt):
    """The expression trees a statement holds."""
    if isinstance(stmt, Let):
        return (stmt.value,)
    if isinstance(stmt, Decl):
        return () if stmt.value is None else (stmt.value,)
    if isinstance(stmt, Store):
        return (stmt.offset, stmt.value)
    if isinstance(stmt, Assign):
        return (stmt.value,)
    return ()


def nested_scopes(scope: "Scope") -> list:
    """The scopes directly inside `scope`'s statements (loop scopes, both branches of an If):
    what a rewrite of every scope of a kernel tree recurses into."""
    out = []
    for s in scope.stmts:
        if isinstance(s, Scope):
            out.append(s)
        elif isinstance(s, If):
            out += [s.then, s.other]
    return out


def all_nodes(stmts):
    """Every expression node of `stmts` (nested scopes included)."""
    for s in stmts:
        if isinstance(s, Scope):
            yield from all_nodes(s.stmts)
        elif isinstance(s, If):
            yield from walk(s.cond)
            yield from all_nodes([s.then, s.other])
        else:
            for n in statement_nodes(s):
                yield from walk(n)


def render_stmt(stmt, show: Printer) -> str:
    """One statement (not a Scope) as a line of the printer's language."""
    if isinstance(stmt, str):
        return stmt
    if isinstance(stmt, Line):
        return stmt.text
    if isinstance(stmt, Let):
        return show.lang.let(stmt.name, stmt.dtype, show(stmt.value))
    if isinstance(stmt, Decl):
        value = None if stmt.value is None else show(stmt.value)
        return show.lang.decl(stmt.name, stmt.dtype, value, stmt.const, stmt.length)
    if isinstance(stmt, Store):
        if stmt.tile is None:
            return show.lang.store(stmt.buffer, show(stmt.offset), show(stmt.value), stmt.dtype)
        return show.lang.tile_store(stmt.buffer, show(stmt.offset), show(stmt.value),
                                    stmt.dtype, stmt.tile, stmt.masks, stmt.widen, stmt.fill)
    if isinstance(stmt, Assign):
        return show.lang.assign(stmt.name, stmt.op, show(stmt.value))
    raise TypeError(f"not a statement: {stmt!r}")


def render_loop(loop: Loop, show: Printer) -> str:
    """A Scope's loop header in the printer's language."""
    step = None if int_value(loop.step) == 1 else show(loop.step)
    span = None if loop.span is None else show(loop.span)
    return show.lang.loop(loop.var, show(loop.start), show(loop.stop), step, span)
