"""The bookkeeping of a shared CUDA-graph pool (runtime/pool_family.py), on the CPU: which
replays must run without their graph because a guarded output of a later capture of the pool
is still alive. Storages here are CPU storages; their use counts behave as a GPU's do. Then
GraphedProgram's control flow (join, guard, leave) on fake CUDA graphs."""
import weakref

import pytest
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


# ---- GraphedProgram's control flow on fake CUDA graphs ------------------------------------
class _FakeGraph:
    """A capture records the program's call; a replay runs it again and copies its results
    into the captured outputs (the memory a real replay writes). Pooled inputs the program
    no longer holds are found among the programs' static outputs by address."""
    capturing = None

    def __init__(self):
        self.again, self.static, self._pool = None, [], None

    def pool(self):
        return self._pool

    def replay(self):
        for s, o in zip(self.static, self.again()):
            if s is not None:
                s.copy_(o)


class _Prog:
    def __init__(self, fn, programs):
        self.fn, self.programs = fn, programs
        # the executor's settings a graph changes (runtime/executor.py's defaults)
        self.release_inputs = self.release_arena = self.outputs_in_inputs = True
        self.outputs_in_pools = False

    def __call__(self, *ins):
        outs = self.fn(*ins)
        g = _FakeGraph.capturing
        if g is not None:
            refs = [weakref.ref(t) for t in ins]
            ptrs = [t.data_ptr() for t in ins]

            def again():
                args = [r() if r() is not None else next(
                    o for p in self.programs for o in p._static_out
                    if o is not None and o.data_ptr() == ptr) for r, ptr in zip(refs, ptrs)]
                return self.fn(*args)
            g.again, g.static = again, outs
        return outs


@pytest.fixture
def fake_cuda(monkeypatch):
    import contextlib
    import itertools

    from ember.runtime import cuda_graphs as cg
    ids = itertools.count(1)

    @contextlib.contextmanager
    def graph(g, pool=None):
        g._pool = pool if pool is not None else (0, next(ids))
        _FakeGraph.capturing = g
        try:
            yield
        finally:
            _FakeGraph.capturing = None

    class Stream:
        def wait_stream(self, other):
            pass
    monkeypatch.setattr(cg, "_on_host", lambda t: False)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 0)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    return cg


class _FakeEvent:
    """A CUDA event whose elapsed time is `ms` (a replay's device time, as the test says)."""
    ms = 0.0
    recorded = 0

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        _FakeEvent.recorded += 1

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        return _FakeEvent.ms


def _training_programs(cg, share=True, optimizer=False):
    """A forward lending its saved activation (guarded), a backward reading it in place and
    lending its gradient, optionally an 'optimizer' reading the gradient in place."""
    programs = []
    fwd = cg.GraphedProgram(_Prog(lambda x, w: [(x @ w).sum().reshape(1), torch.tanh(x @ w)],
                                  programs), share_pool=share)
    fwd.lend([], guarded=[1])
    bwd = cg.GraphedProgram(_Prog(lambda s, g: [(1 - s * s).sum(0) * g], programs),
                            share_pool=share)
    bwd.lend([], guarded=[0])
    programs += [fwd, bwd]
    if optimizer:
        opt = cg.GraphedProgram(_Prog(lambda g, w: [w - 0 * g.sum()], programs),
                                share_pool=share)
        programs.append(opt)
    for k, p in enumerate(programs):
        p.stats = {"graph_id": f"g{k}"}
    return programs


def _step(programs, x, w):
    fwd, bwd = programs[:2]
    _, saved = fwd(x, w)
    (grad,) = bwd(saved, torch.ones(1))
    del saved
    torch.testing.assert_close(grad, (1 - torch.tanh(x @ w) ** 2).sum(0))
    if len(programs) > 2:
        programs[2](grad, w)
    return grad


def test_backward_joins_the_forwards_pool_and_leaves_it_when_its_gradient_is_kept(fake_cuda):
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    fwd, bwd, opt = progs = _training_programs(fake_cuda, optimizer=True)
    for _ in range(4):
        _step(progs, x, w)
    assert fwd.captured and bwd.captured and opt.captured
    assert fwd._family is not None and bwd._family is fwd._family and opt._family is fwd._family
    assert (fwd._seq, bwd._seq, opt._seq) == (0, 1, 2)
    assert fwd.stats["shared_pool_graphs"] == 3
    assert fwd.ungraphed_calls == bwd.ungraphed_calls == opt.ungraphed_calls == 0
    held = _step(progs, x, w)                  # the backward's gradient, kept
    assert fwd._family.alive_after(fwd._seq) and not fwd._family.alive_after(bwd._seq)
    _step(progs, x, w)                         # the forward must not replay over it
    assert fwd.ungraphed_calls == 1 and bwd._evicted
    del held
    for _ in range(2):
        _step(progs, x, w)
    assert bwd._family is None and bwd._private and bwd.captured    # it left (one capture)
    assert fwd._family is not None and fwd.captured
    before = fwd.ungraphed_calls
    held = _step(progs, x, w)                  # kept again: its pool is its own now
    _step(progs, x, w)
    assert fwd.ungraphed_calls == before
    del held


def test_a_gradient_kept_for_good_ends_with_private_pools(fake_cuda):
    """Gradients kept step after step (autograd.grad results in a list): the backward stops
    lending (its own guard), its old gradients stay guarded by the pool, and the forward,
    clashing with nothing but those, leaves after STREAK calls; every value stays right and
    every program ends captured."""
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    fwd, bwd, opt = progs = _training_programs(fake_cuda, optimizer=True)
    for _ in range(4):
        _step(progs, x, w)
    kept = []
    for _ in range(8):
        g = _step(progs, x, w)
        kept.append((g, g.clone()))
        for a, b in kept:
            assert torch.equal(a, b)
    assert fwd.captured and bwd.captured and opt.captured
    assert fwd._family is None and not bwd._guarded
    n = (fwd.ungraphed_calls, bwd.ungraphed_calls)
    for _ in range(2):
        kept.append(_step(progs, x, w))
    assert (fwd.ungraphed_calls, bwd.ungraphed_calls) == n


def test_no_shared_pool_when_off(fake_cuda):
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    progs = _training_programs(fake_cuda, share=False)
    for _ in range(5):
        _step(progs, x, w)
    assert all(p.captured and p._family is None for p in progs)
    assert progs[1]._pooled         # still reads the forward's pool in place
    assert "shared_pool_bytes" not in progs[0].stats


class _TailedForward:
    """A training forward as the executor runs it: a head (`h = tanh(x @ w)`, the saved
    activation, and a large temporary) and a last step writing a fresh output from the saved
    one (`logits = 2 h`): tail_split / run_head / run_tail / tail_reads as in
    runtime/executor.py. Value table: x, w, h, tmp, logits; outputs: logits, h."""

    class program:
        outputs = [4, 2]

    def __init__(self):
        self.heads = 0

    def _head(self, x, w):
        self.heads += 1
        return [x, w, torch.tanh(x @ w), torch.ones(1024), None]

    def __call__(self, x, w):
        vals = self._head(x, w)
        return self.run_tail(vals, 1)

    def tail_split(self, min_bytes, arena_free=False, kernel_min_bytes=0):
        return (1, frozenset({0}))

    def tail_reads(self, start):
        return frozenset({2})

    def run_head(self, inputs, stop):
        vals = self._head(*inputs)
        g = _FakeGraph.capturing
        if g is not None:
            refs = list(inputs)

            def again():
                return self._head(*refs)
            g.again, g.static = again, vals
        return vals

    def run_tail(self, vals, start):
        vals = list(vals)
        vals[4] = vals[2] * 2
        return [vals[4], vals[2]]


def test_training_forward_runs_its_large_fresh_output_after_the_replay(fake_cuda):
    """A forward that lends its saved activations (guarded) still runs its last step after
    the replay, into new memory, when that step writes only fresh outputs (the logits): not
    held in the pool for good and copied out per call besides. The head's temporaries are
    not held by the graph (only what the tail reads), and the saved activation stays
    guarded: a replay while it is alive runs without the graph."""
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    prog = _TailedForward()
    fwd = fake_cuda.GraphedProgram(prog)
    fwd.lend([], guarded=[1])
    fwd.stats = {"graph_id": "g-forward"}
    outs = []
    for k in range(5):
        x.copy_(torch.randn(3, 4))
        logits, saved = fwd(x, w)
        torch.testing.assert_close(saved, torch.tanh(x @ w))
        torch.testing.assert_close(logits, 2 * torch.tanh(x @ w))
        outs.append((logits, logits.clone()))
        del saved
    assert fwd.captured and fwd._tail == (1, frozenset({0}))
    assert fwd._static_out[0] is None and fwd._static_out[1] is not None
    assert [v is not None for v in fwd._static_vals] == [False, False, True, False, False]
    assert len({o.data_ptr() for o, _ in outs[2:]}) == 3       # new memory each call
    # held between calls: the saved activation alone (3x4 floats), nothing copied in
    assert fwd.stats["graph_static_output_bytes"] == 48
    assert fwd.stats["graph_static_input_bytes"] == 0 and fwd.stats["graph_tail_outputs"] == 1
    for o, c in outs:
        assert torch.equal(o, c)                                # not overwritten later
    assert fwd.ungraphed_calls == 0
    _, held = fwd(x, w)
    fwd(x, w)                       # the saved activation is alive: no replay over it
    assert fwd.ungraphed_calls == 1
    del held


class _SmallTail(_TailedForward):
    """The same program whose last step's outputs are small (a 3x4 logits block): a tail only
    where the threshold allows one."""

    def tail_split(self, min_bytes, arena_free=False, kernel_min_bytes=0):
        self.asked = (min_bytes, kernel_min_bytes)     # its last step: a generated kernel
        return (1, frozenset({0})) if max(min_bytes, kernel_min_bytes) <= 48 else None

    def __call__(self, x, w):      # the whole program captured (no tail): a replay reruns it
        outs = super().__call__(x, w)
        g = _FakeGraph.capturing
        if g is not None:
            g.again, g.static = (lambda: _TailedForward.__call__(self, x, w)), outs
        return outs


# (the options GraphedProgram gets, what the split is asked for, the tail it takes)
_TAIL_CASES = {
    "default": ({}, (4 << 20, 4 << 20), None),
    # `graph_tail_min_bytes=0` (compile_module passes the option to both bounds)
    "option 0": ({"tail_min_bytes": 0, "tail_kernel_min_bytes": 0}, (0, 0),
                 (1, frozenset({0}))),
    # an inference graph's default: a small generated last kernel stays in the graph, its
    # launch from Python after the replay costing more than the copy
    "inference": ({"tail_min_bytes": 0}, (0, 4 << 20), None),
}


@pytest.mark.parametrize("case", sorted(_TAIL_CASES))
def test_graph_tail_min_bytes_reaches_the_split(fake_cuda, case):
    """`graph_tail_min_bytes` (GraphedProgram's tail_min_bytes, and tail_kernel_min_bytes for
    a generated kernel) reaches the split: below the bounds the last step stays in the graph
    (its output copied out per call); otherwise it runs after the replay into new memory,
    with the same values."""
    kw, asked, tail = _TAIL_CASES[case]
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    prog = _SmallTail()
    fwd = fake_cuda.GraphedProgram(prog, **kw)
    fwd.lend([], guarded=[1])
    for _ in range(4):
        x.copy_(torch.randn(3, 4))
        logits, saved = fwd(x, w)
        torch.testing.assert_close(logits, 2 * torch.tanh(x @ w))
        del saved
    assert fwd.captured and prog.asked == asked and fwd._tail == tail


def test_graph_tail_min_bytes_option():
    from ember.frontend.options import CompileOptions, OptionsError
    from ember.frontend.compile_module import graph_tail_min_bytes
    assert CompileOptions().graph_tail_min_bytes is None
    assert graph_tail_min_bytes(CompileOptions(), "inference") == 0
    assert graph_tail_min_bytes(CompileOptions(), "forward") is None      # the 4 MiB default
    assert graph_tail_min_bytes(CompileOptions(), "backward") is None
    opts = CompileOptions.from_user({"graph_tail_min_bytes": 1 << 20})
    assert graph_tail_min_bytes(opts, "inference") == graph_tail_min_bytes(opts, "forward") == 1 << 20
    assert CompileOptions.from_user({"graph_tail_min_bytes": 0}).graph_tail_min_bytes == 0
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(OptionsError, match="graph_tail_min_bytes"):
            CompileOptions(graph_tail_min_bytes=bad)


class _RecordingHead:
    """A real CompiledProgram (test_runtime's embedding backward) whose `run_head`, under a
    fake capture, records itself: a replay runs the head again on the capture's inputs (the
    pooled one by weak reference, as a graph holds none) and copies its values into the
    captured table (what a real replay writes where the capture's allocations lay; what lies
    in the pooled input is written there directly, as the program's own views of it)."""

    def __init__(self, cp):
        self.cp = cp

    def __getattr__(self, name):
        return getattr(self.cp, name)

    def __call__(self, *ins):
        return self._record(self.cp, ins)

    def run_head(self, inputs, tail):
        return self._record(lambda *a: self.cp.run_head(a, tail), inputs)

    @staticmethod
    def _record(fn, inputs):
        g = _FakeGraph.capturing
        before = [t.clone() for t in inputs] if g is not None else None
        vals = fn(*inputs)
        if g is not None:
            for t, b in zip(inputs, before):    # a capture runs nothing: the donated input
                t.copy_(b)                      # keeps its values for the first replay
            refs = [weakref.ref(t) for t in inputs]
            # (a graph holds nothing of another graph's pool: its replay writes the pooled
            # input's memory in place, as the program's own views of it do here)
            from ember.runtime.cuda_graphs import pooled_storage
            g.again = lambda: fn(*[r() for r in refs])
            g.static = [None if isinstance(v, torch.Tensor) and pooled_storage(v) else v
                        for v in vals]
        return vals


@pytest.mark.parametrize("tail_guarded", [True, False])
def test_backward_runs_its_embedding_gradient_after_the_replay(fake_cuda, tmp_path,
                                                               tail_guarded):
    """A graphed backward (its gradients guarded, its saved activation read in place in the
    forward's pool) whose last steps are the embedding gradient's fill and scatter_add runs
    them after each replay into new memory (`tail_guarded`, the frontend's choice for a
    backward): the gradient is not held in the pool between steps (graph_static_output_bytes
    without its 512 bytes), is right at every step, and what the tail reads in the pooled
    input (the token gradients the head wrote there) is rebuilt per replay from the call's
    input, never held: the pooled storage's use count is back at rest after each call.
    Without `tail_guarded` (a forward's rule) the gradient stays in the graph."""
    from test_runtime import embedding_backward_program

    from ember.runtime.executor import load
    cg = fake_cuda
    cp = load(embedding_backward_program(), cache=tmp_path)
    bwd = cg.GraphedProgram(_RecordingHead(cp), written_inputs=frozenset({2}),
                            tail_min_bytes=0, tail_guarded=tail_guarded)
    bwd.lend([], guarded=[0, 1])
    bwd.stats = {"graph_id": "g-backward"}
    torch.manual_seed(0)
    saved = torch.empty(4, 8)        # the forward's saved activation, in its pool
    st = saved.untyped_storage()
    cg._POOLED.add(st.data_ptr())
    use = torch._C._storage_Use_Count
    rest = use(st._cdata)
    idx = torch.tensor([3, 0, 3, 15])
    grads = []
    try:
        for _ in range(5):
            g = torch.randn(4, 8)
            saved.copy_(torch.randn(4, 8))
            want = torch.zeros(16, 8).scatter_add_(0, idx.view(4, 1).expand(4, 8), g + saved)
            wsum = (g + saved).sum(1)
            emb, rows = bwd(idx, g, saved)
            assert torch.equal(emb, want) and torch.equal(rows, wsum)
            if tail_guarded:    # kept: with the tail, no replay waits for it
                grads.append(emb)
            del emb, rows
            assert use(st._cdata) == rest
    finally:
        cg._POOLED.discard(st.data_ptr())
    assert bwd.captured and bwd._pooled == [(2, saved.data_ptr())]
    if tail_guarded:
        assert bwd._tail is not None and bwd._tail[1] == {0} and bwd._static_out[0] is None
        assert [v for v, *_ in bwd._tail_views] == [4]      # the token gradients' view
        assert not any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr()
                       == st.data_ptr() for t in bwd._static_vals)
        assert len({t.data_ptr() for t in grads[2:]}) == 3   # new memory each call
        assert bwd.stats["graph_static_output_bytes"] == 16  # the row sums alone
        assert bwd.stats["graph_tail_outputs"] == 1
        assert bwd.stats["graph_tail_held_bytes"] == 0     # the ids are an input
    else:
        assert bwd._tail is None
        assert bwd.stats["graph_static_output_bytes"] == 16 + 512
    assert bwd.ungraphed_calls == 0


def _settling_graph(cg):
    """A graph watching its copied inputs for a settled address (PROMOTE_MIN_BYTES 0), and a
    call that fills its input anew and checks the value against eager."""
    programs = []
    g = cg.GraphedProgram(_Prog(lambda x, w: [torch.tanh(x @ w)], programs))
    g.PROMOTE_MIN_BYTES = 0
    g.stats = {"graph_id": "g-backward"}
    programs.append(g)
    torch.manual_seed(0)

    def call(x, w):
        x.copy_(torch.randn(3, 4))
        (out,) = g(x, w)
        torch.testing.assert_close(out, torch.tanh(x @ w))
    return g, call


def test_copied_input_that_settles_is_read_in_place(fake_cuda):
    """An input that moved between the warm-up calls is copied into a static buffer (held for
    the graph's life: a backward's 62.5 MB logits gradient on Llama); once it arrives at one
    address SETTLED replays in a row, a new capture reads it in place and the buffer goes
    (graph_static_input_bytes 0). If it moves again it is copied for good, never promoted
    twice. Values right throughout."""
    cg = fake_cuda
    g, run = _settling_graph(cg)
    w = torch.randn(4, 4)

    def call(x):
        run(x, w)

    first = torch.empty(3, 4)       # kept alive: x cannot take its address (the input moved)
    call(first)
    x = torch.empty(3, 4)
    call(x)
    call(x)                         # captured: x moved between the warm-up calls
    assert g.captured and g._copied == [0] and g.stats["graph_static_input_bytes"] == 48
    for _ in range(cg.GraphedProgram.SETTLED + 1):
        call(x)
    assert g._copied == [] and (0, x.data_ptr()) in g._inplace
    assert g.stats["graph_static_input_bytes"] == 0 and g._recaptures == 1
    for _ in range(2):
        call(x)
    other = torch.empty(3, 4)
    for _ in range(cg.GraphedProgram.SETTLED + 2):
        call(other)                 # moved: copied from now on, for good
    assert g._copied == [0] and g._recaptures == 2 and g.ungraphed_calls == 0


def test_copied_input_settles_after_a_recapture(fake_cuda):
    """A graph that recaptured once already (an input read in place moved: a backward's saved
    activation) still lets a settled copied input go: the promotion may be its second capture
    of MAX_RECAPTURES, never its last."""
    cg = fake_cuda
    g, call = _settling_graph(cg)
    w = torch.randn(4, 4)

    first = torch.empty(3, 4)       # kept alive: x cannot take its address (the input moved)
    call(first, w)
    x = torch.empty(3, 4)
    call(x, w)
    call(x, w)                      # captured: x copied, w read in place
    assert g._copied == [0] and (1, w.data_ptr()) in g._inplace
    w2 = w.clone()                  # w moves: copied from now on (the first recapture)
    call(x, w2)
    assert g._recaptures == 1 and g._copied == [0, 1]
    for _ in range(cg.GraphedProgram.SETTLED + 1):
        call(x, w2)
    assert g._copied == [1] and (0, x.data_ptr()) in g._inplace
    assert g._recaptures == 2 and g.stats["graph_recaptures"] == 2
    for _ in range(cg.GraphedProgram.SETTLED + 2):
        call(x, w2)                 # no third capture: the last stays for what must
    assert g._recaptures == 2 and g.ungraphed_calls == 0


def test_copied_input_in_another_pool_is_not_promoted(fake_cuda):
    """A copied input lying in another graph's pool (a saved activation of a forward that ran
    without its graph, `_no_pool`) is not read in place when it settles: held as a static
    input it would keep that forward from replaying. It stays copied, with no recapture."""
    cg = fake_cuda
    programs = []
    g = cg.GraphedProgram(_Prog(lambda x, w: [torch.tanh(x @ w)], programs))
    g.PROMOTE_MIN_BYTES = 0
    programs.append(g)
    w = torch.randn(4, 4)
    first = torch.randn(3, 4)       # kept alive: x cannot take its address (the input moved)
    g(first, w)
    x = torch.randn(3, 4)
    g(x, w)
    g(x, w)
    assert g._copied == [0]
    g._no_pool = True               # (it would otherwise be read in place as a pooled input)
    cg._POOLED.add(x.untyped_storage().data_ptr())
    try:
        for _ in range(cg.GraphedProgram.SETTLED + 2):
            (out,) = g(x, w)
            torch.testing.assert_close(out, torch.tanh(x @ w))
    finally:
        cg._POOLED.discard(x.untyped_storage().data_ptr())
    assert g._copied == [0] and g._recaptures == 0 and g._settle_idx == []


# ---- a program called several times per step (a layer loop's body) ------------------------
def _layer_programs(cg, copy_max_bytes):
    """One graphed forward and one graphed backward for every layer of a loop (transformers'
    layer loop with a graph break in it: one graph per layer, called once per layer, each call
    with its own weight): fwd(x, w) -> (h, tanh saved, x saved) lends its saved activations
    (guarded) to bwd(s, x, g, w) -> (grad_x, grad_w), which lends its gradients."""
    programs = []
    fwd = cg.GraphedProgram(_Prog(lambda x, w: [torch.tanh(x @ w), torch.tanh(x @ w) * 1, x * 1],
                                  programs), copy_max_bytes=copy_max_bytes)
    fwd.lend([], guarded=[1, 2])

    def backward(s, x, g, w):
        d = g * (1 - s * s)
        return [d @ w.T, x.T @ d]
    bwd = cg.GraphedProgram(_Prog(backward, programs), copy_max_bytes=copy_max_bytes)
    bwd.lend([], guarded=[0, 1])
    programs += [fwd, bwd]
    fwd.stats, bwd.stats = {"graph_id": "g-fwd"}, {"graph_id": "g-bwd"}
    return fwd, bwd


def _layer_step(fwd, bwd, x, ws):
    hs, saved = [x], []
    for w in ws:
        h, s, xs = fwd(hs[-1], w)
        hs.append(h)
        saved.append((s, xs))
    g, grads = torch.ones_like(hs[-1]), [None] * len(ws)
    for k in reversed(range(len(ws))):
        g, grads[k] = bwd(*saved[k], g, ws[k])
    del saved
    # the reference, eagerly
    xs, ref_g = [x], torch.ones_like(x)
    for w in ws:
        xs.append(torch.tanh(xs[-1] @ w))
    for k in reversed(range(len(ws))):
        d = ref_g * (1 - xs[k + 1] ** 2)
        torch.testing.assert_close(grads[k], xs[k].T @ d)
        ref_g = d @ ws[k].T
    torch.testing.assert_close(g, ref_g)
    return grads


@pytest.mark.parametrize("copy_max_bytes", [0, None, 1 << 30])
def test_a_program_called_per_layer_runs_without_its_graph_rather_than_copy(fake_cuda,
                                                                             copy_max_bytes):
    """One forward and one backward program called once per layer of a loop (whisper's
    encoder under transformers' layer loop): a forward's saved activation is alive when it
    runs for the next layer, and its weights are another tensor each call. Captured again
    with its outputs cloned and its inputs copied, each replay would copy the layer's saved
    activations out and its weights in (1.7 GB a step for Whisper-tiny on an H200, x0.98 of
    eager); at `copy_max_bytes` or more a call, the program runs without its graph from then
    on instead. Every step's gradients are right either way."""
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    ws = [torch.randn(4, 4) * 0.5 for _ in range(3)]
    fwd, bwd = _layer_programs(fake_cuda, copy_max_bytes)
    for _ in range(6):
        _layer_step(fwd, bwd, x, ws)
    if copy_max_bytes == 0:
        for p in (fwd, bwd):
            assert p.dropped and not p.captured and p._failed, p.dropped
            assert p.stats["graph_dropped"] == p.dropped
            assert p.stats["graph_static_input_bytes"] == 0
            assert p._copied == [] and p._guard == [] and not p._pool_ptrs
        assert "alive from call to call" in fwd.dropped
        # the executor's own settings are back (as without CUDA graphs)
        assert fwd._run.release_inputs and not fwd._run.outputs_in_pools
        n = (fwd.ungraphed_calls, bwd.ungraphed_calls)
        for _ in range(2):
            _layer_step(fwd, bwd, x, ws)
        assert (fwd.ungraphed_calls, bwd.ungraphed_calls) == n      # no graph to give up
    else:
        # below the bound (or none): captured again, cloning out and copying in as before
        assert not fwd._run.release_inputs and fwd._run.outputs_in_pools
        assert fwd.dropped is None and bwd.dropped is None
        assert fwd.captured and fwd._recaptures >= 1 and not fwd._guarded
        assert "graph_dropped" not in fwd.stats


@pytest.mark.parametrize("copy_max_bytes", [0, None])
def test_a_backward_whose_pooled_inputs_keep_moving_runs_without_its_graph(fake_cuda,
                                                                           copy_max_bytes):
    """A backward captured reading its forward's saved activation in place, whose forward then
    stops replaying (the caller keeps each step's saved activation): the input arrives
    elsewhere every call. Copied in from a new capture, each replay would copy the saved
    activations; at `copy_max_bytes` or more it runs without its graph from then on."""
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    fwd, bwd = _training_programs(fake_cuda)
    for p in (fwd, bwd):
        p.COPY_MAX_BYTES = copy_max_bytes
    for _ in range(4):
        _step([fwd, bwd], x, w)
    assert bwd.captured and bwd._pooled             # read in place
    kept = []
    for _ in range(5):
        _, saved = fwd(x, w)
        kept.append(saved)                          # the forward's aliases stay alive
        (grad,) = bwd(saved, torch.ones(1))
        torch.testing.assert_close(grad, (1 - torch.tanh(x @ w) ** 2).sum(0))
        del grad
    if copy_max_bytes == 0:
        assert fwd.dropped and "alive from call to call" in fwd.dropped
        assert bwd.dropped and "arrive elsewhere" in bwd.dropped, bwd.dropped
        assert not bwd.captured and not bwd._pooled and bwd._copied == []
    else:
        assert bwd.dropped is None and bwd.captured and bwd._no_pool and bwd._copied
    for t in kept:                                  # what earlier replays lent stayed intact
        torch.testing.assert_close(t, torch.tanh(x @ w))


@pytest.mark.parametrize("device_ms, dropped", [(5.0, True), (0.01, False)])
def test_dropping_a_graph_weighs_its_launches_against_its_device_time(fake_cuda, device_ms,
                                                                      dropped):
    """With the frontend's cost model (`ungraphed_host_s`: its launches' host time without a
    graph), a graph whose copies pass the bound is dropped only where a replay's device time
    (timed with CUDA events on its first replays) plus the copies exceeds that host time: a
    layer whose device time hides its launches (5 ms against 1 ms) runs without its graph; a
    short one (10 us) keeps its graph and clones, as a launch-bound gradient accumulation
    must."""
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    ws = [torch.randn(4, 4) * 0.5 for _ in range(3)]
    fwd, bwd = _layer_programs(fake_cuda, 0)
    for p in (fwd, bwd):
        p._host_s = 1e-3
    _FakeEvent.ms, _FakeEvent.recorded = device_ms, 0
    for _ in range(6):
        _layer_step(fwd, bwd, x, ws)
    assert _FakeEvent.recorded > 0
    assert bool(fwd.dropped) is dropped, fwd.dropped
    if dropped:
        assert "1.000 ms of launches" in fwd.dropped and "5.000 ms" in fwd.dropped
    else:
        assert fwd.captured and fwd._recaptures >= 1 and not fwd._guarded
    assert fwd.stats["graph_replay_ms"] == device_ms


def test_graph_copy_max_bytes_option():
    from ember.frontend.options import CompileOptions, OptionsError
    assert CompileOptions().graph_copy_max_bytes == 32 << 20
    assert CompileOptions.from_user({"graph_copy_max_bytes": None}).graph_copy_max_bytes is None
    assert CompileOptions.from_user({"graph_copy_max_bytes": 0}).graph_copy_max_bytes == 0
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(OptionsError, match="graph_copy_max_bytes"):
            CompileOptions(graph_copy_max_bytes=bad)
