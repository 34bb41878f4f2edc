"""The bookkeeping of a shared CUDA-graph pool (runtime/pool_family.py), on the CPU: which
replays must run without their graph because a guarded output of a later capture of the pool
is still alive. Storages here are CPU storages; their use counts behave as a GPU's do."""
import weakref

import torch

from ember.runtime.pool_family import PoolFamily


class _Member:
    """What a GraphedProgram holds of a capture: its static outputs and their storages."""

    def __init__(self, family, n=2):
        self.seq = family.next_seq()
        self.static = [torch.empty(8) for _ in range(n)]
        self.reg = family.register(self.seq, [t.untyped_storage() for t in self.static],
                                   weakref.ref(self))

    def lend(self):
        """What a replay hands out: a new alias per guarded output."""
        return [t.detach() for t in self.static]

    def let_go(self, family):
        """A recapture: the member drops its outputs; the family keeps the lent ones."""
        family.retire(self.reg)
        self.static = []


def test_only_later_captures_outputs_stop_a_replay():
    fam = PoolFamily(pool=(0, 1))
    fwd, bwd = _Member(fam), _Member(fam)
    assert not fam.alive_after(fwd.seq) and not fam.alive_after(bwd.seq)
    acts = fwd.lend()       # saved activations: registered before the backward's capture
    assert not fam.alive_after(bwd.seq)
    grads = bwd.lend()      # gradients: the forward's temporaries may be under them
    assert fam.alive_after(fwd.seq) and not fam.alive_after(bwd.seq)
    clash = fam.clashing(fwd.seq, {})
    assert [r.owner() for r in clash] == [bwd]
    del grads[0]
    assert fam.alive_after(fwd.seq)     # one is enough
    grads.clear()
    assert not fam.alive_after(fwd.seq)
    del acts


def test_pooled_inputs_read_in_place_do_not_clash():
    """A storage of a later registration that lies within a pooled input the member reads
    (same address, no larger: alive at its capture) is no clash; a larger one is."""
    fam = PoolFamily(pool=(0, 1))
    opt, later = _Member(fam), _Member(fam)
    held = later.lend()
    st = later.static[0].untyped_storage()
    other = later.static[1].untyped_storage()
    spans = {st.data_ptr(): st.nbytes(), other.data_ptr(): other.nbytes()}
    assert fam.alive_after(opt.seq)
    assert fam.clashing(opt.seq, spans) == []
    spans[other.data_ptr()] = other.nbytes() - 4      # smaller than what lies there now
    assert fam.clashing(opt.seq, spans) == [later.reg]
    del held


def test_a_member_that_lets_go_keeps_its_lent_outputs_guarded_until_they_die():
    fam = PoolFamily(pool=(0, 1))
    fwd, bwd = _Member(fam), _Member(fam)
    grads = bwd.lend()
    bwd.let_go(fam)                      # its recapture: the family holds the old storages
    assert fam.registered == 4           # (the forward's two, held by the forward)
    assert fam.alive_after(fwd.seq)
    assert fam.clashing(fwd.seq, {}) == [bwd.reg] and bwd.reg.retired
    grads.pop()
    assert fam.alive_after(fwd.seq) and fam.registered == 3    # the dead one was dropped
    grads.clear()
    assert not fam.alive_after(fwd.seq) and fam.registered == 2
    fam.retire(bwd.reg)                  # idempotent (the member's finalizer runs later)
    assert fam.registered == 2


def test_nothing_lent_nothing_alive_and_members_collected():
    """A member collected while its aliases live: the finalizer retires its registration and
    the family alone guards them; once they die, nothing is registered."""
    fam = PoolFamily(pool=(0, 1))
    fwd = _Member(fam)
    bwd = _Member(fam)
    weakref.finalize(bwd, fam.retire, bwd.reg)
    grads = bwd.lend()
    del bwd
    assert fam.alive_after(fwd.seq)
    grads.clear()
    assert not fam.alive_after(fwd.seq) and fam.registered == 2     # the forward's
    empty = fam.register(fam.next_seq(), [])
    assert not fam.alive_after(fwd.seq) and empty.storages == []


def test_shared_pool_bytes_reported_to_every_member():
    fam = PoolFamily(pool=(0, 1))
    r1, r2 = {}, {}
    fam.captured(100, r1)
    assert r1["shared_pool_bytes"] == 100 and r1["shared_pool_graphs"] == 1
    fam.captured(30, r2)
    fam.captured(5, r2)                  # a recapture into the pool: counted once more
    assert r1["shared_pool_bytes"] == r2["shared_pool_bytes"] == 135
    assert r1["shared_pool_graphs"] == 3


def test_option_is_explicit():
    from ember.frontend.options import CompileOptions, OptionsError
    assert CompileOptions().shared_graph_pool is True
    assert CompileOptions.from_user({"shared_graph_pool": False}).shared_graph_pool is False
    try:
        CompileOptions(shared_graph_pool="no")
    except OptionsError:
        pass
    else:
        raise AssertionError("a non-bool shared_graph_pool was accepted")
