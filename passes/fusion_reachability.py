"""What each op's kernel reaches while ember-fuse plans its groups: a quick "no path" answer
for its cycle checks.

ember-fuse refuses a merge that would make a cycle: a path from one group to the other through
an op outside both (a group is a kernel: entered whole, it runs at once). Its check walks the
block's use edges; on a graph where most ops reach most later ones (densenet's dense blocks:
every layer's output is read by every later concatenation) each walk visits most of the
block, and planning made ~13,000 of them (densenet121's backward: 3.9 million ops visited,
most of ember-fuse's time).

`Descendants` keeps, for the op at each block position, the set of positions its group reaches
through use edges (as rows of bits), kept up to date as groups merge: a group that reached an
op of a merged group reaches all of its ops and everything the merged group reaches. The rows
only ever grow (merging never removes a path), and always hold every op a path reaches (they
may hold more: a superset is all the check needs), so "no bit set" proves that no path exists,
and only the few candidates that may have one are walked (the walk also says through which
op, for ember-fuse's remark).
"""
import numpy as np

# Blocks of more ops than this build no rows (n * n bits: 32 MB here, and about as much again
# while they are built): the walk answers alone, as it did before.
MAX_OPS = 16384


class Descendants:
    """`succ[i]`: the block positions of the ops that use op i's results (each after i)."""

    def __init__(self, succ):
        n = len(succ)
        self.ok = n <= MAX_OPS and all(u > i for i, us in enumerate(succ) for u in us)
        if not self.ok:
            return
        self.succ = succ
        words = max(1, (n + 63) // 64)
        rows = [0] * n
        for i in range(n - 1, -1, -1):
            m = 0
            for u in succ[i]:
                m |= rows[u] | (1 << u)
            rows[i] = m
        nbytes = words * 8
        self.rows = np.frombuffer(b"".join(r.to_bytes(nbytes, "little") for r in rows),
                                  dtype=np.uint64).reshape(n, words).copy()

    @staticmethod
    def _mask(positions):
        """(word indices, bits in those words) of a set of positions."""
        words: dict = {}
        for p in positions:
            words[p >> 6] = words.get(p >> 6, 0) | (1 << (p & 63))
        return (np.fromiter(words, dtype=np.int64, count=len(words)),
                np.fromiter(words.values(), dtype=np.uint64, count=len(words)))

    def may_reach(self, a_ops, b_ops) -> bool:
        """False when no path leaves the positions `a_ops` (through an op outside `a_ops` and
        `b_ops`) and arrives at one of `b_ops`; True when one may."""
        if not self.ok:
            return True
        first = {u for o in a_ops for u in self.succ[o] if u not in a_ops and u not in b_ops}
        if not first:
            return False
        words, bits = self._mask(b_ops)
        hit = self.rows[np.fromiter(first, dtype=np.int64)[:, None], words[None, :]] & bits
        return bool(hit.any())

    def reaching(self, b_ops, below: int):
        """The positions under `below` whose groups reach one of `b_ops` (None: unknown)."""
        if not self.ok:
            return None
        words, bits = self._mask(b_ops)
        return set(np.flatnonzero((self.rows[:below, words] & bits).any(axis=1)).tolist())

    def merge(self, groups, below: int) -> None:
        """The groups `groups` (lists of positions) are one group now; no op at or past
        `below` reaches any of them."""
        if not self.ok:
            return
        positions = [p for g in groups for p in g]
        idx = np.fromiter(positions, dtype=np.int64)
        words, bits = self._mask(positions)
        own = np.zeros(self.rows.shape[1], dtype=np.uint64)
        own[words] = bits
        reached = np.bitwise_or.reduce(self.rows[idx], axis=0) & ~own
        # A group that reached one of them now reaches all of them and what they reach; one
        # that reached each of them already did.
        some = np.zeros(below, dtype=bool)
        every = np.ones(below, dtype=bool)
        for g in groups:
            w, b = self._mask(g)
            hit = (self.rows[:below, w] & b).any(axis=1)
            some |= hit
            every &= hit
        rows = np.flatnonzero(some & ~every)
        if len(rows):
            # every bit of `reached | own` is at or past the groups' first position (use edges
            # go forward): only those words are written (half a row on average, where the
            # rows are n bits and a merge may update thousands: densenet121's blocks)
            lo = min(positions) >> 6
            self.rows[rows, lo:] |= (reached | own)[lo:]
        self.rows[idx] = reached
