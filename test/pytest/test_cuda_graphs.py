"""CUDA-graph replay of inference graphs (runtime/cuda_graphs.py). Needs a GPU: on the CPU-only
CI these are skipped; they run in the GPU machine's suite."""
import pytest
import torch

import ember
from conftest import check_fallbacks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                               torch.nn.LayerNorm(64)).cuda().eval()


def test_replays_match_eager_for_new_inputs():
    model = _model()
    compiled = torch.compile(model, backend="ember")
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(32, 64, device="cuda")
            out = compiled(x)
            ref = model(x)
            err = ((out - ref).double().norm() / ref.double().norm()).item()
            assert err < 1e-5, (step, err)
    reports = [r for r in ember.last_reports() if r.get("status") == "compiled"]
    assert any(r.get("cudagraphs") for r in reports)


def test_outputs_survive_later_replays():
    model = _model()
    compiled = torch.compile(model, backend="ember")
    with torch.no_grad():
        xs = [torch.randn(32, 64, device="cuda") for _ in range(5)]
        outs = [compiled(x) for x in xs]      # replays 3..5 reuse the graph's memory
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)


def test_changed_parameter_storage_falls_back_correctly():
    model = _model()
    compiled = torch.compile(model, backend="ember")
    x = torch.randn(32, 64, device="cuda")
    with torch.no_grad():
        for _ in range(4):
            compiled(x)
        # New storage for a weight that the graph read in place: must not replay stale memory.
        model[0].weight.data = torch.randn_like(model[0].weight)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_cudagraphs_option_off():
    ember.clear_reports()
    model = _model()
    compiled = torch.compile(model, backend="ember", options={"cudagraphs": False})
    with torch.no_grad():
        x = torch.randn(32, 64, device="cuda")
        for _ in range(4):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert not any(r.get("cudagraphs") for r in ember.last_reports())


def test_training_graph_with_host_scalars_runs_and_is_captured_when_unread():
    """Efficient attention's backward takes its philox seed and offset as 0-dim CPU tensors: the
    executor passes them to the library call as they are (it rejected them: 'input 4 must be
    on cuda, got cpu'). Without dropout their values are never read, so the backward is still
    captured (with dropout it would not be: a replay would reuse the seed read at capture)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32, device="cuda", requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.0)

    ember.clear_reports()
    cf = torch.compile(f, backend="ember", options={"target": "cuda"})
    for _ in range(4):
        grads = torch.autograd.grad(cf(q, k, v).square().sum(), (q, k, v))
    refs = torch.autograd.grad(f(q, k, v).square().sum(), (q, k, v))
    for g, r in zip(grads, refs):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)
    reports = ember.last_reports()
    assert len(reports) == 2 and all(r["status"] == "compiled" and not r["eager_fallback_ops"]
                                     for r in reports), reports
    assert all(r.get("cudagraphs") for r in reports), reports


def test_training_graphs_are_captured_and_match_eager():
    """A training step's forward and backward graphs replay as CUDA graphs too (their launches
    cost more host time than the step's GPU time). The forward hands its saved activations out
    of its pool uncloned: a second forward before the first's backward finds them alive and
    runs without its graph (into fresh memory), so the first's gradients stay exact."""
    torch.manual_seed(0)
    model = _model().train()
    ref_model = _model().train()
    ember.clear_reports()
    compiled = torch.compile(model, backend="ember")
    for step in range(5):
        x = torch.randn(32, 64, device="cuda")
        y = compiled(x)
        y2 = compiled(x * 2)            # a second forward before the first's backward
        (y.square().mean() + y2.mean()).backward()
        ref = ref_model(x)
        (ref.square().mean() + ref_model(x * 2).mean()).backward()
        for p, q in zip(model.parameters(), ref_model.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    reports = [r for r in ember.last_reports() if r.get("status") == "compiled"]
    kinds = {r["graph_id"].rsplit("-", 1)[-1] for r in reports if r.get("cudagraphs")}
    assert kinds == {"forward", "backward"}, reports


def test_input_that_moves_after_capture_is_copied_from_then_on():
    """An input that kept its storage over the warm-up calls only by the caching allocator's
    chance (a backward graph's saved activations) arrives elsewhere later: the graph is captured
    again with that input copied in, instead of every later call running without the graph."""
    from ember.runtime.cuda_graphs import GraphedProgram

    graphed = GraphedProgram(lambda a, b: [a * 2 + b])
    a, b = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    for _ in range(3):
        graphed(a, b)
    assert graphed.captured
    for step in range(3):
        a2 = torch.randn(64, device="cuda")          # new storage on every call
        torch.testing.assert_close(graphed(a2, b)[0], a2 * 2 + b)
        assert graphed.captured and graphed._recaptures == 1, step


def test_optimizer_step_lends_written_back_outputs_and_matches_eager(graphs):
    """An AdamW step graph mutates every parameter and moment: the replay hands those new values
    out of its pool uncloned (write_back copies them into the inputs at once)."""
    made = graphs
    torch.manual_seed(0)
    ref_model = _model().train()
    model = _model().train()
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ref_model, model)]
    step = torch.compile(opts[1].step, backend="ember")
    for i in range(6):
        for m in (ref_model, model):
            torch.manual_seed(i)
            x = torch.randn(32, 64, device="cuda")
            m(x).square().mean().backward()
        opts[0].step()
        step()
        for m in (ref_model, model):
            m.zero_grad(set_to_none=True)
    # Rounding differences of the fused step grow over six steps to ~1e-4; a value not written
    # back (or a stale one) would be off by about lr = 1e-2.
    for p, q in zip(ref_model.parameters(), model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=5e-4)
    graphed = [g for g in made if g.captured]
    assert graphed and any(len(g._lent) >= 3 * len(list(model.parameters())) for g in graphed)


def test_batchnorm_statistics_are_written_back_inside_the_forwards_graph(graphs):
    """A training forward's BatchNorm running statistics (new values of buffers the graph reads
    in place) are copied into the buffers by the replay itself, at its end, and the buffers
    handed out in their place: write_back finds nothing left to copy. They match eager's after
    every step, read between steps as a user would (a statistic not written, or written twice,
    is off by about its step's change, 10% of the batch statistic: tens of percent here; TF32
    off, so that rounding stays far below that)."""
    from ember.frontend import compile as ec
    made = graphs
    torch.manual_seed(0)
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8)).cuda().train()
    ref_model, model = net(), net()
    ember.clear_reports()
    compiled = torch.compile(model, backend="ember")
    copied = []
    orig = ec.write_back

    def spy(mutations, args, outs):
        copied.append(sum(args[i] is not outs[k] for i, k in mutations.targets))
        return orig(mutations, args, outs)
    ec.write_back = spy
    try:
        for step in range(6):
            x = torch.randn(4, 3, 16, 16, device="cuda")
            compiled(x).square().mean().backward()
            ref_model(x).square().mean().backward()
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                for bn, ref_bn in ((model[1], ref_model[1]), (model[4], ref_model[4])):
                    got, want = getattr(bn, name), getattr(ref_bn, name)
                    torch.testing.assert_close(
                        got, want, rtol=1e-3, atol=1e-4,
                        msg=lambda m: f"{name} after step {step}: {m}\n{got}\n{want}")
    finally:
        ec.write_back = orig
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    into = [g for g in made if g.captured and g._into]
    assert into and {len(g._into) for g in into} == {4}, [g._into for g in made]
    assert copied[-1] == 0 and copied[0] == 4, copied
    check_fallbacks()


def test_training_forward_outputs_that_are_views_alias_as_eager():
    """Training-forward outputs that are views (saved activations) come back as one as_strided
    of the computed base, with eager's strides, through the replays."""
    torch.manual_seed(0)
    m = _model().train()
    ref = _model().train()
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend="ember")
    for i in range(5):
        x = torch.randn(32, 64, device="cuda")
        f(x).square().mean().backward()
        ref(x).square().mean().backward()
    for p, q in zip(ref.parameters(), m.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)


def test_backward_reads_saved_activations_in_the_forwards_pool(graphs):
    """A plain training loop: the graphed forward lends its saved activations (guarded), the
    graphed backward reads them in place (no clone out, no copy in), every step replays both
    graphs, and the gradients match eager's. Two forwards before their backwards: the second
    runs without its graph and the gradients are still eager's."""
    made = graphs
    torch.manual_seed(0)
    model, ref = _model().train(), _model().train()
    ref.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="ember")
    for i in range(6):
        x = torch.randn(32, 64, device="cuda")
        f(x).square().mean().backward()
        ref(x).square().mean().backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    fwd = [g for g in made if g._guarded and not g._pooled]
    bwd = [g for g in made if g._pooled]
    assert len(fwd) == 1 and len(bwd) == 1 and fwd[0].captured and bwd[0].captured
    assert fwd[0].ungraphed_calls == bwd[0].ungraphed_calls == 0
    assert len(bwd[0]._pooled) >= len(fwd[0]._guard) > 0
    # two forwards, then both backwards: the second forward must not overwrite the first's
    x1, x2 = torch.randn(32, 64, device="cuda"), torch.randn(32, 64, device="cuda")
    (f(x1).square().mean() + f(x2).mean()).backward()
    (ref(x1).square().mean() + ref(x2).mean()).backward()
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    assert fwd[0].ungraphed_calls == 1


def test_forward_kept_alive_without_backward_is_not_overwritten():
    """Training-mode forwards whose outputs are kept (no backward yet, e.g. an evaluation loop
    without no_grad): each later forward finds the earlier saved activations alive and runs
    without its graph; backwards taken later, in any order, give eager's gradients."""
    torch.manual_seed(0)
    model, ref = _model().train(), _model().train()
    ref.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="ember")
    for _ in range(4):          # warm up and capture
        f(torch.randn(32, 64, device="cuda")).sum().backward()
    model.zero_grad(set_to_none=True)
    xs = [torch.randn(32, 64, device="cuda") for _ in range(3)]
    outs = [f(x) for x in xs]
    for k in (2, 0, 1):
        outs[k].square().mean().backward()
        ref(xs[k]).square().mean().backward()
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)


def test_gradient_accumulation_over_lent_gradients_matches_eager(graphs):
    """The graphed backward hands its gradients out of its pool (autograd may keep them as
    `.grad`): accumulating over micro-batches without zeroing must not let a replay overwrite
    a `.grad` still held, and plain steps with zero_grad keep replaying."""
    made = graphs
    torch.manual_seed(0)
    model, ref = _model().train(), _model().train()
    ref.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="ember")
    for step in range(8):
        for micro in range(3 if step % 2 else 1):
            x = torch.randn(32, 64, device="cuda")
            f(x).square().mean().backward()
            ref(x).square().mean().backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
        model.zero_grad()
        ref.zero_grad()
    # the second micro-batch finds the first's gradients kept as .grad: no replay over
    # them; from the third in a row on, the backward clones its gradients (a new capture)
    bwd = [g for g in made if g._pooled or g._no_pool]
    assert len(bwd) == 1 and bwd[0].captured and bwd[0].ungraphed_calls >= 2
    assert not bwd[0]._guarded and bwd[0]._recaptures >= 1


def _deep_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                               torch.nn.GELU(), torch.nn.Linear(256, 64),
                               torch.nn.LayerNorm(64)).cuda().train()


def test_backward_writing_into_its_donated_saved_activations_matches_eager(graphs):
    """The graphed backward places its intermediates in the memory of the saved activations
    only it reads (AOTAutograd's donated buffers), once read: in the forward's pool, which its
    captured kernels overwrite on every replay. Its warm-up before the capture runs on copies of
    them (else the capture would read what the warm-up wrote). Over plain steps (warm-up,
    capture, replays), two forwards before their backwards (the second forward runs without
    its graph, so its backward writes into fresh activations without its graph) and the
    gradients of every step are eager's; `donate_saved=False` gives the same gradients."""
    made = graphs
    model, ref = _deep_model(), _deep_model()
    ref.load_state_dict(model.state_dict())
    ember.clear_reports()
    f = torch.compile(model, backend="ember")
    for step in range(8):
        x = torch.randn(64, 64, device="cuda")
        f(x).square().mean().backward()
        ref(x).square().mean().backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    bwd_report = [r for r in ember.last_reports() if r["graph_id"].endswith("-backward")][-1]
    assert bwd_report.get("inputs_reused", 0) > 0, bwd_report
    assert bwd_report.get("cudagraphs")
    bwd = [g for g in made if g._pooled]
    assert len(bwd) == 1 and bwd[0].captured and bwd[0].ungraphed_calls == 0
    # the donated inputs the program writes are among those the warm-up copies
    reused = {v.in_input for v in bwd[0]._run.program.values if v.in_input is not None}
    assert reused and reused <= set(bwd[0]._written)
    for step in range(3):
        x1, x2 = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        (f(x1).square().mean() + f(x2).mean()).backward()
        (ref(x1).square().mean() + ref(x2).mean()).backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    assert bwd[0].ungraphed_calls >= 1

    # without CUDA graphs the backward also frees the donated inputs it is done with (and
    # hands out gradients in their memory); without donation nothing changes
    for opts in ({"donate_saved": False}, {"cudagraphs": False}):
        torch._dynamo.reset()
        ember.clear_reports()
        other = _deep_model()
        other.load_state_dict(ref.state_dict())
        g = torch.compile(other, backend="ember", options=opts)
        for step in range(5):
            x = torch.randn(64, 64, device="cuda")
            g(x).square().mean().backward()
            ref(x).square().mean().backward()
            for p, q in zip(ref.parameters(), other.parameters()):
                torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
                p.grad = q.grad = None
        bwd_report = [r for r in ember.last_reports() if r["graph_id"].endswith("-backward")][-1]
        assert bool(bwd_report.get("inputs_reused")) == opts.get("donate_saved", True)
        assert not bwd_report.get("cudagraphs") or opts.get("cudagraphs", True)


def test_graphed_backward_hands_gradients_out_in_the_forwards_pool(graphs):
    """Gradients planned in the memory of donated saved activations (ember-buffer-reuse's
    `donated-outputs`) stay there when the backward is graphed: in the forward's pool, as views
    the backward rebuilds per replay and does not hold (`_in_pool`), so they cost no memory of
    their own. Plain steps replay both graphs (the gradients are dropped before the next
    forward); the values are eager's; a kept gradient makes the next forward run without its
    graph instead of overwriting it."""
    from ember.runtime.cuda_graphs import pooled_storage
    made = graphs
    model, ref = _deep_model(), _deep_model()
    ref.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="ember")
    for step in range(6):
        x = torch.randn(64, 64, device="cuda")
        f(x).square().mean().backward()
        ref(x).square().mean().backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
        if step >= 3:
            assert any(pooled_storage(q.grad) for q in model.parameters())
        for p, q in zip(ref.parameters(), model.parameters()):
            p.grad = q.grad = None
    bwd = [g for g in made if g._pooled]
    fwd = [g for g in made if g._guarded and not g._pooled]
    assert len(bwd) == 1 and len(fwd) == 1 and bwd[0].captured
    assert bwd[0]._in_pool and all(bwd[0]._static_out[j] is None for j in bwd[0]._in_pool)
    assert fwd[0].ungraphed_calls == bwd[0].ungraphed_calls == 0
    for step in range(2):       # gradients kept: accumulated, never overwritten
        x = torch.randn(64, 64, device="cuda")
        f(x).square().mean().backward()
        ref(x).square().mean().backward()
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    assert fwd[0].ungraphed_calls >= 1


def test_training_graphs_survive_inductors_cudagraph_trees_in_one_process():
    """The harness's mlp / llama training rows died with `unspecified launch failure` in
    ember's graphed backward when Inductor's reduce-overhead mode ran in the same process on
    the same model (ember first, then Inductor's cudagraph trees, then both in turn; H200,
    2026-11-26): each ember capture now gets its cuBLAS workspace in its own pool
    (cuda_graphs._clear_blas_workspaces), as Inductor's own captures do."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                torch.nn.Linear(1024, 256), torch.nn.LayerNorm(256)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                              torch.nn.Linear(1024, 256), torch.nn.LayerNorm(256)).cuda()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(512, 256, device="cuda")
    torch._dynamo.reset()
    em = torch.compile(model, backend="ember")
    ro = torch.compile(model, mode="reduce-overhead")

    def step(f, mark=False):
        if mark:
            torch.compiler.cudagraph_mark_step_begin()
        for p in model.parameters():
            p.grad = None
        with torch.autocast("cuda", torch.bfloat16):
            loss = f(x)[:, ::2].float().square().mean()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    for _ in range(6):
        step(em)
    for _ in range(6):
        step(ro, mark=True)
    for p in ref.parameters():
        p.grad = None
    with torch.autocast("cuda", torch.bfloat16):
        ref(x)[:, ::2].float().square().mean().backward()
    for _ in range(10):
        grads = step(em)
        step(ro, mark=True)
        torch.cuda.synchronize()
        for g, p in zip(grads, ref.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("rows", [16384, 32])
@pytest.mark.parametrize("threshold", ["default", "0", "4MiB"])
def test_last_kernel_runs_after_the_replay_into_new_memory(graphs, rows, threshold):
    """An inference graph's last generated kernel (by default from TAIL_KERNEL_MIN_BYTES of
    outputs: its launch from Python after a short graph's replay is what the call waits for;
    with `graph_tail_min_bytes` = 0 whatever their size, with TAIL_MIN_BYTES from that much)
    launches after each replay into new memory (no copy out of the pool); outputs of earlier
    calls survive, and match eager. Below the threshold (32 rows of 64 floats) the output
    stays in the graph and is copied out."""
    from ember.runtime.cuda_graphs import GraphedProgram
    assert GraphedProgram.TAIL_KERNEL_MIN_BYTES == GraphedProgram.TAIL_MIN_BYTES == 4 << 20
    model = _model()
    options = ({} if threshold == "default" else {"graph_tail_min_bytes": 0} if threshold == "0"
               else {"graph_tail_min_bytes": GraphedProgram.TAIL_MIN_BYTES})
    compiled = torch.compile(model, backend="ember", options=options)
    xs = [torch.randn(rows, 64, device="cuda") for _ in range(6)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        for x, out in zip(xs, outs):
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    (g,) = [g for g in graphs if g.captured]
    big = threshold == "0" or rows * 64 * 4 >= GraphedProgram.TAIL_MIN_BYTES
    assert (g._tail is not None) == big
    if big:     # the output lies in new memory each call, not in the graph's pool
        assert len({o.data_ptr() for o in outs[3:]}) == 3
        assert g._static_out[0] is None


def test_training_forward_runs_its_logits_matmul_after_the_replay(graphs):
    """A training forward ending in a language model head (autocast: the bf16 copy of the
    head's weight, then the matmul writing the logits, >= TAIL_MIN_BYTES) runs that cast and
    matmul after each replay into new memory: the logits are not held in the graph's pool
    (and cloned out per call besides), the graph keeps nothing of its arena for them, and the
    step matches eager over several steps, logits of earlier steps kept intact."""
    from ember.runtime.cuda_graphs import GraphedProgram

    def lm():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Embedding(512, 64), torch.nn.LayerNorm(64),
                                   torch.nn.Linear(64, 8192, bias=False)).cuda()
    model, ref = lm(), lm()
    compiled = torch.compile(model, backend="ember")
    ids = torch.randint(0, 512, (4, 256), device="cuda")
    kept = []
    for _ in range(6):
        for m, fn in ((model, compiled), (ref, ref)):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = fn(ids)
            logits.float().square().mean().backward()
            if m is model:
                kept.append((logits, logits.clone()))
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=1e-4)
            p.grad = q.grad = None
    for a, b in kept:
        assert torch.equal(a, b)
    fwd = [g for g in graphs if g.captured and g.stats is not None
           and str(g.stats.get("graph_id", "")).endswith("forward")]
    assert len(fwd) == 1 and fwd[0]._tail is not None, [g._tail for g in graphs]
    (fwd,) = fwd
    assert fwd._static_out[0] is None       # the logits: not in the pool
    assert 4 * 256 * 8192 * 2 >= GraphedProgram.TAIL_MIN_BYTES
    assert len({a.data_ptr() for a, _ in kept[3:]}) == 3


class _NormChain(torch.nn.Module):
    """Eight bf16 LayerNorms in a row (each eager's own kernel under exact_low_precision: a
    library call whose result is its own tensor), each result read by one kernel."""

    def __init__(self, width):
        super().__init__()
        torch.manual_seed(0)
        self.norms = torch.nn.ModuleList([torch.nn.LayerNorm(width) for _ in range(8)])

    def forward(self, x):
        for norm in self.norms:
            x = torch.tanh(norm(x)) * 2.0
        return x


def test_capture_lets_go_of_library_results_after_their_last_use(graphs):
    """A library call's result is dropped after its last reader in a captured run too, so a
    later allocation of the capture reuses its block: the graph's pool holds a few of the
    eight 32 MiB LayerNorm results, not all of them (a capture that kept them: >= 256 MiB;
    swin_t's bf16 inference pool was 808 MB against eager's 222 MB peak). Replays match
    eager bit for bit, for new inputs too."""
    model = _NormChain(4096).cuda().to(torch.bfloat16).eval()
    compiled = torch.compile(model, backend="ember")
    xs = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(5)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        for x, out in zip(xs, outs):
            assert torch.equal(out, model(x))
    check_fallbacks()
    (g,) = [g for g in graphs if g.captured]
    one = 4096 * 4096 * 2
    assert g.pool_bytes < 4 * one, (g.pool_bytes, one)


def test_backward_runs_its_embedding_gradient_after_the_replay(graphs):
    """A training step's backward ending in the embedding gradient (a fill and an in-place
    scatter_add, >= TAIL_MIN_BYTES) runs those after each replay into new memory
    (CompiledProgram._fill_tail, GraphedProgram's `tail_guarded`): the gradient is not held
    in the shared pool between steps (issue 11: Llama's 62.5 MB while the loss's backward
    runs), what the tail reads in the forward's pool is rebuilt per replay (neither graph
    ever runs without its graph), and the forward's tail keeps no arena. Gradients eager's
    over 6 steps, and over 2 more that accumulate into `.grad`."""
    from ember.runtime.cuda_graphs import GraphedProgram, pooled_storage

    def lm():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Embedding(32768, 64), torch.nn.LayerNorm(64),
                                   torch.nn.Linear(64, 8192, bias=False)).cuda()
    model, ref = lm(), lm()
    compiled = torch.compile(model, backend="ember", options={"backward_tail": True})
    assert 32768 * 64 * 4 >= GraphedProgram.TAIL_MIN_BYTES

    def step():
        ids = torch.randint(0, 32768, (4, 256), device="cuda")
        for fn in (compiled, ref):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = fn(ids)
            logits.float().square().mean().backward()

    for _ in range(6):
        step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=1e-4)
        assert not pooled_storage(model[0].weight.grad)
        for p, q in zip(model.parameters(), ref.parameters()):
            p.grad = q.grad = None
    bwd = [g for g in graphs if g._pooled and g.captured]
    fwd = [g for g in graphs if g._guarded and not g._pooled and g.captured]
    assert len(bwd) == 1 and len(fwd) == 1, [(g._pooled, g._guarded) for g in graphs]
    (bwd,), (fwd,) = bwd, fwd
    assert bwd._tail is not None
    assert not any(pooled_storage(t) for t in bwd._static_vals if isinstance(t, torch.Tensor))
    assert all(bwd._static_out[j] is None for j in bwd._tail[1])
    assert bwd.stats["graph_static_output_bytes"] < 32768 * 64 * 4
    assert fwd.ungraphed_calls == bwd.ungraphed_calls == 0
    if fwd._tail is not None:       # the logits: what it keeps for them is not the arena
        # (the LayerNorm's bf16 output, 4 x 256 x 64, not the arena it was planned in)
        assert fwd.stats["graph_tail_held_bytes"] <= 4 * 256 * 64 * 4
    for _ in range(2):              # accumulated: the tail's gradient is added to, intact
        step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=2e-2, atol=1e-4)


class _Layer(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        return x + self.norm(self.fc2(torch.nn.functional.gelu(self.fc1(x))))


class _LoopedLayers(torch.nn.Module):
    """Layers run by a Python loop with a graph break in it (transformers' encoder loop under
    older versions' LayerDrop draw): Dynamo compiles the layer's forward as a frame of its own,
    one graph for the first layer (an input without grad) and one for all the others, called
    once per layer, each call with that layer's weights (a torch.nn container's forward would
    not be compiled at all: Dynamo skips torch.nn's frames)."""

    def __init__(self, d=256, layers=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(_Layer(d) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            torch._dynamo.graph_break()
            x = layer(x)
        return x


@pytest.mark.parametrize("d, shape, copy_max_bytes, dropped", [
    (1024, (16, 512), 0, True),         # ~3 ms of GEMMs a layer hide its launches: no graph
    (1024, (16, 512), None, False),     # the option off: captured again, cloning and copying
    (64, (4, 8), 0, False),             # launch-bound: keeps its graph, cloning and copying
], ids=["device-bound", "option-off", "launch-bound"])
def test_a_graph_called_per_layer_runs_without_its_graph_where_that_is_faster(
        graphs, d, shape, copy_max_bytes, dropped):
    """The per-layer forward finds the previous layer's saved activations alive, and its weights
    are other tensors each call; its backward finds its pooled inputs elsewhere. Where a
    replay's device time hides the launches the program makes without its graph (fp32 GEMMs
    of 8192x1024x4096), both run without their graphs after STREAK calls, copying nothing
    (the report says why); a launch-bound layer, or the option off, captures again, cloning
    and copying. Gradients match eager's over SGD steps every way."""
    made = graphs
    ember.clear_reports()
    torch.manual_seed(0)
    model, ref = _LoopedLayers(d).cuda(), _LoopedLayers(d).cuda()
    ref.load_state_dict(model.state_dict())
    f = torch.compile(model, backend="ember",
                      options={"graph_copy_max_bytes": copy_max_bytes})
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=1e-2, momentum=0.9)
    x = torch.randn(*shape, d, device="cuda")
    for step in range(6):
        for fn, o in ((f, opt), (ref, ref_opt)):
            o.zero_grad(set_to_none=True)
            fn(x).square().mean().backward()
        for p, q in zip(ref.parameters(), model.parameters()):
            err = ((q.grad - p.grad).double().norm() / p.grad.double().norm()).item()
            assert err < 1e-4, (step, err)
        opt.step()
        ref_opt.step()
    check_fallbacks()
    kinds = {}
    for r in ember.last_reports():
        kinds.setdefault(r.get("graph_id", "").rsplit("-", 1)[-1], []).append(r)
    assert len(kinds.get("forward", [])) == 2, kinds   # the first layer's, the others'
    layered = [g for g in made if (g.stats or {}).get("graph_id", "").endswith(("forward",
                                                                               "backward"))]
    assert layered, kinds
    if dropped:
        out = [g for g in layered if g.dropped]
        assert out and all(not g.captured for g in out)
        assert any("alive from call to call" in g.dropped for g in out), [g.dropped for g in out]
        assert all(g.stats["graph_dropped"] == g.dropped for g in out)
    else:
        assert not any(g.dropped for g in layered), [g.dropped for g in layered]
        assert any(g._recaptures for g in layered)
