"""Live bytes over a function's host schedule while ember-fuse plans its groups.

A horizontal merge (two kernels that need not run one after the other) runs the merged kernel
where the later of the two ran: the values the earlier one reads stay alive until then, and its
results are made there. Whether that costs memory depends on where it happens: a value held
across a point where the arena is at its peak grows the arena (allocated for the whole call);
one whose longer life lies where the arena is emptier costs nothing. `LiveBytes` keeps the bytes
alive at each point of the schedule the groups make (a value lives from the kernel or op that
makes it to the last one that reads it, through views; returned values to the end) and answers
what a merge does to the function's peak: the arena's peak (values made and freed in the call)
plus the peak of the values allocated on their own (returned ones, donated arguments).

What it counts: results of kernels (a group's value read outside the group or returned) and of
host ops (library calls), and the arguments the caller donates (`ember.donated_args`: a
backward's saved activations, freed after their last use). Other arguments live through the
whole call and shift every point alike, so they are left out. Constants, `tensor.empty` and
fills that are cloned into kernels take no memory; a view is its base's memory. These are the
live ranges ember-buffer-reuse packs (its arena is at least their peak).
"""
import numpy as np
from torch_mlir import ir

from .dynamic_sizes import fusion_bytes
from .graph_utils import op_name, users
from .ir_queries import HOST_VIEW_OPS


class LiveBytes:
    """`block_ops`: the function's ops in order (positions are indices into it); `bid`: op ->
    position; `place(i)`: (group key, position of the group's kernel) of the op at position i
    (key None for a host op); `counted(op)`: whether op's results take memory of their own;
    `donated`: the argument indices the caller donates."""

    def __init__(self, block, block_ops, bid, place, counted, donated=()):
        self.end = len(block_ops)
        self.place = place
        self.bid = bid
        self.values: list = []      # (bytes, defining position or -1, reader positions, returned)
        self.defs: dict = {}        # position -> value indices it defines
        self.reads: dict = {}       # position -> value indices it reads (through views)
        for a in sorted(donated):
            if a < len(block.arguments):
                self._add(block.arguments[a], -1)
        for i, op in enumerate(block_ops):
            if counted(op):
                for r in op.results:
                    self._add(r, i)
        # rows: 0 the values made and freed in the call (the arena's), 1 the donated
        # arguments, 2 the returned values (allocated on their own)
        self.live = np.zeros((3, self.end + 1), dtype=np.int64)
        self.span = [self._interval(j) for j in range(len(self.values))]
        for j, s in enumerate(self.span):
            self._apply(self.live, s, j)
        self.base = self.peak()     # before the merges asked about

    def _add(self, value, at: int) -> None:
        size = _bytes(value.type)
        if size == 0:
            return
        readers, returned, stack = set(), False, [value]
        while stack:
            for u in users(stack.pop()):
                name = op_name(u)
                if name in HOST_VIEW_OPS:
                    stack.extend(u.results)
                elif name == "func.return":
                    returned = True
                else:
                    readers.add(self.bid[u])
        j = len(self.values)
        self.values.append((size, at, sorted(readers), returned))
        if at >= 0:
            self.defs.setdefault(at, []).append(j)
        for r in readers:
            self.reads.setdefault(r, []).append(j)

    def _interval(self, j, moved=frozenset(), at=0):
        """(first, last) position value j is alive at, None when it is no buffer (made and read
        inside one kernel). `moved`: positions whose ops would be one kernel at `at`."""
        size, d, readers, returned = self.values[j]

        def where(i):
            if i in moved:
                return "merged", at
            return self.place(i)

        if d < 0:
            key, start = None, 0
        else:
            key, start = where(d)
        end, outside = start, returned or key is None
        for r in readers:
            k, p = where(r)
            end = max(end, p)
            outside = outside or k != key
        if not outside:
            return None
        return (start, self.end if returned else end)

    def _apply(self, live, span, j, sign=1) -> None:
        if span is not None:
            size, d, _, returned = self.values[j]
            row = 1 if d < 0 else 2 if returned else 0
            live[row, span[0]:span[1] + 1] += sign * size

    def _affected(self, moved) -> set:
        out = set()
        for i in moved:
            out.update(self.defs.get(i, ()))
            out.update(self.reads.get(i, ()))
        return out

    def peak(self, live=None) -> int:
        """The arena's size (it is allocated for the whole call: its own peak) plus the peak
        of the rest. ember-buffer-reuse may also place a value in a donated argument's memory
        after its last use; that is not counted on here (a value fits only in one argument
        its size or larger: BERT's f32 gradients in bf16 activations do not)."""
        live = self.live if live is None else live
        return int(live[0].max() + (live[1] + live[2]).max())

    def peak_if(self, moved, at: int) -> int:
        """The function's peak if the ops at positions `moved` ran as one kernel at `at`."""
        delta = np.zeros_like(self.live)
        for j in self._affected(moved):
            new = self._interval(j, moved, at)
            if new != self.span[j]:
                self._apply(delta, self.span[j], j, -1)
                self._apply(delta, new, j)
        return self.peak(self.live + delta)

    def update(self, moved) -> None:
        """The groups changed for the ops at positions `moved` (they are merged now)."""
        for j in self._affected(moved):
            new = self._interval(j)
            if new != self.span[j]:
                self._apply(self.live, self.span[j], j, -1)
                self._apply(self.live, new, j)
                self.span[j] = new


def _bytes(t) -> int:
    """fusion_bytes, and a complex tensor's (two of its parts' floats per element: an FFT's
    values, which kernels never hold but host views and library calls pass on)."""
    try:
        return fusion_bytes(t)
    except ValueError:
        st = ir.ShapedType(t)
        part = str(st.element_type)
        if not part.startswith("complex<"):
            raise
        bits = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}.get(part[len("complex<"):-1], 64)
        n = 1
        for i in range(st.rank):
            n *= 64 if st.is_dynamic_dim(i) else st.get_dim_size(i)
        return n * bits // 4

