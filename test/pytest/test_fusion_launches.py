"""Launches that ember-fuse removes from training graphs (issue 11; benchmarks/kernel_count.py
counts them per model): forward and backward against eager on every target, the kernel count
of the graph, and no eager fallback.
"""
import pytest  # noqa: F401  (the target fixture)
import torch
import torch.nn.functional as F

import ember
from conftest import assert_close, check_fallbacks, clear_reports, ember_compile


def _randn(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g)


def _fwd_bwd(fn, args, target, device, tol):
    args = [a.to(device) for a in args]
    ref_in = [a.detach().clone().requires_grad_() for a in args]
    out_in = [a.detach().clone().requires_grad_() for a in args]
    ref = fn(*ref_in)
    clear_reports()
    out = ember_compile(fn, target)(*out_in)
    assert_close(out, ref, tol=tol)
    cot = _randn(ref.shape, seed=7).to(device, ref.dtype)
    (ref * cot).sum().backward()
    (out * cot).sum().backward()
    for a, b in zip(out_in, ref_in):
        assert_close(a.grad, b.grad, tol=tol, what="grad")
    check_fallbacks()
    return {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}


def _bf16_steps_match_eager(compiled, eager, model, ref, x, device):
    """One autocast-bf16 step of mean(out^2) through `compiled` (model's parameters) and
    `eager` (ref's): every gradient as eager's, and no eager fallback."""
    for f in (compiled, eager):
        with torch.autocast(device, dtype=torch.bfloat16):
            out = f(x)
        out.float().square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, tol=1e-2, what=f"{name}.grad")
    check_fallbacks()


def test_norm_and_its_bf16_copy_through_a_reshape_are_one_kernel(target, device):
    """A layer norm over (batch, seq) rows, reshaped to batch*seq rows and copied to bf16 for
    a matmul (GPT-2's Conv1D under autocast): the copy is computed in the norm's kernel and the
    reshape is a view (sink_reshapes.py, ember_fuse._tail_view); before, the copy was a launch
    of its own."""
    w, b, proj = _randn(16, 1), _randn(16, 2), _randn((16, 8), 3)

    def f(x, w, b, proj):
        y = F.layer_norm(x, (16,), w, b)
        z = y.reshape(-1, 16).to(torch.bfloat16) @ proj.to(torch.bfloat16)
        return z.float().reshape(2, 4, 8) + y[..., :8]

    reports = _fwd_bwd(f, [_randn((2, 4, 16)), w, b, proj], target, device, tol=1e-2)
    fwd = reports["forward"]
    norm = [g for g in fwd["fused_groups"] if "rsqrt" in g or "sum" in g]
    assert len(norm) == 1 and "convert" in norm[0], fwd["fused_groups"]
    # the norm with the activation's copy, the weight's copy, the epilogue (was 4)
    assert fwd["num_kernels"] == 3, fwd["fused_groups"]


def test_layer_norm_backward_row_sums_share_a_kernel(target, device):
    """A layer norm after a linear layer, backward: the two row sums over the norm's rows read
    two different products, which the kernel of dgamma's and dbeta's column sums computes; they
    are one kernel (kernel_schedule._share_reduction_loops, and horizontal fusion trying each
    reader with every earlier cluster); before, a launch each."""
    def f(x, w, b, g, beta):
        return F.layer_norm(x @ w + b, (32,), g, beta)

    args = [_randn((16, 24)), _randn((24, 32), 1), _randn(32, 2), _randn(32, 3), _randn(32, 4)]
    reports = _fwd_bwd(f, args, target, device, tol=1e-4)
    bwd = reports["backward"]
    sums_only = [g for g in bwd["fused_groups"] if set(g) == {"sum"}]
    assert len(sums_only) <= 1, bwd["fused_groups"]


def _train_step_matches_eager(fn, model, ref_model, x, tol):
    """One step of `fn` (compiled `model`) beside `ref_model` in eager: output and the state
    (running statistics, counters) to `tol`, gradients to 1e-4; no fallback."""
    out, ref = fn(x), ref_model(x)
    assert_close(out, ref, tol=tol)
    out.square().mean().backward()
    ref.square().mean().backward()
    for (name, a), b in zip(model.state_dict().items(), ref_model.state_dict().values()):
        assert_close(a, b, tol=tol, what=name)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert_close(p.grad, q.grad, tol=1e-4, what=f"{name}.grad")
    check_fallbacks()


def test_batch_norm_counters_share_one_kernel(target, device):
    """Training-mode batch norms each add 1 to their `num_batches_tracked`: independent scalar
    kernels, all returned. They are one kernel now (horizontal fusion tries each result of the
    return with every earlier cluster; before, only with the first, which had joined a batch
    norm's statistics): one launch per batch norm less in a resnet's forward. Running
    statistics, counters, outputs and gradients as eager's."""
    torch.manual_seed(0)
    chans = [4, 6, 8]

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[m for i, c in enumerate(chans) for m in (
            torch.nn.Conv2d(chans[i - 1] if i else 3, c, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(c), torch.nn.ReLU())]).to(device).train()

    model, ref_model = make(), make()
    x = _randn((2, 3, 8, 8)).to(device)
    clear_reports()
    _train_step_matches_eager(ember_compile(model, target), model, ref_model, x, 1e-4)
    fwd = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}["forward"]
    adds = [g for g in fwd["fused_groups"] if g == ["add"]]
    assert len(adds) <= 1, fwd["fused_groups"]


def _masked_attention(x, w):
    """A causal mask built as transformers builds it (aranges, a cumsum of ones, comparisons):
    nothing of it reads an input."""
    b, s, _ = x.shape
    i = torch.arange(s, device=x.device)
    ids = torch.ones(b, s, dtype=torch.long, device=x.device).cumsum(-1) - 1
    mask = (i[:, None] >= i[None, :])[None] & (ids[:, None, :] >= 0)
    h = x @ w
    att = (h @ h.transpose(-1, -2)).masked_fill(~mask, float("-inf")).softmax(-1)
    return att @ h + ids[..., None].to(x.dtype)


def test_input_free_values_are_computed_once(target, device):
    """Values computed from no input (the mask above, `ids`) are computed when the graph
    compiles and read by each call as an input (const_fold.py); before, the forward ran the
    aranges and comparisons as kernels and the cumsum as a library call on every call (GPT-2:
    7 kernels and a cumsum a forward). Forward and backward as eager's; with
    fold_constants=False the launches come back."""
    args = [_randn((2, 6, 8)), _randn((8, 8), 1)]
    reports = _fwd_bwd(_masked_attention, args, target, device, tol=1e-4)
    fwd = reports["forward"]
    # the mask and `ids` read by the forward's kernels; the mask saved for the backward too
    assert fwd.get("folded_constants", 0) >= 2, fwd.get("folded_constants")
    assert not any("cumsum" in c for c in fwd.get("library_calls", [])), fwd["library_calls"]
    assert not any("iota" in g or "index" in g for g in fwd["fused_groups"]), fwd["fused_groups"]
    folded_launches = fwd["num_kernels"] + len(fwd.get("library_calls", []))

    torch._dynamo.reset()
    clear_reports()
    x = args[0].to(device).requires_grad_()
    fn = torch.compile(_masked_attention, backend="ember",
                       options={"target": target, "fold_constants": False})
    assert_close(fn(x, args[1].to(device)), _masked_attention(x, args[1].to(device)), tol=1e-4)
    plain = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}["forward"]
    assert "folded_constants" not in plain
    assert any("cumsum" in c for c in plain.get("library_calls", [])), plain
    assert plain["num_kernels"] + len(plain["library_calls"]) > folded_launches


def _expanded_mask_scores(x):
    """The causal mask above as memory-efficient attention takes it on a GPU: a float bias
    [B, 1, S, S] expanded to [B, H, S, S] (SDPA's `preprocess_mask`), added to the scores."""
    b, h, s, _ = x.shape
    i = torch.arange(s, device=x.device)
    ids = torch.ones(b, s, dtype=torch.long, device=x.device).cumsum(-1) - 1
    mask = (i[:, None] >= i[None, :])[None] & (ids[:, None, :] >= 0)
    bias = torch.zeros(b, 1, s, s, device=x.device).masked_fill(~mask[:, None], float("-inf"))
    return (x + bias.expand(b, h, s, s)).softmax(-1)


def test_input_free_value_too_large_folds_what_it_is_computed_from(target, device,
                                                                    monkeypatch):
    """A value over const_fold.FOLD_BYTES (here the bias expanded over the heads: 8 KB against
    a 4 KB limit; GPT-2 fp32 on a GPU: 25 MB against 4 MB) is not folded, but the smaller
    input-free values it is computed from are (the [B, 1, S, S] bias), and only the expand
    runs per call, inside the softmax's kernel. Before, nothing of the mask folded: its
    aranges and comparisons ran as kernels and its cumsum as a library call on every call
    (GPT-2's fp32 inference on the H200: three kernels and a cumsum, where Inductor ran four
    kernels)."""
    from ember.frontend import const_fold
    monkeypatch.setattr(const_fold, "FOLD_BYTES", 4096)
    reports = _fwd_bwd(_expanded_mask_scores, [_randn((2, 4, 16, 16))], target, device,
                       tol=1e-5)
    fwd = reports["forward"]
    assert fwd.get("folded_constants", 0) >= 1, fwd
    assert not any("cumsum" in c for c in fwd.get("library_calls", [])), fwd["library_calls"]
    assert not any("iota" in g or "index" in g for g in fwd["fused_groups"]), fwd["fused_groups"]
    assert fwd["num_kernels"] == 1, fwd["fused_groups"]


def test_attention_bias_broadcast_over_heads_is_a_view(target, device):
    """An attention bias [B, 1, S, S] expanded over the heads (what SDPA's `preprocess_mask`
    hands memory-efficient attention on a GPU: GPT-2's causal mask) reaches the library call
    as a stride-0 view of the bias (ember-library-views, BIAS_OPERANDS), as eager hands it;
    before, a copy kernel wrote [B, H, S, S] for it in the forward and again in the backward
    (GPT-2 fp32: 25 MB a layer). Outputs and q/k/v gradients as eager's."""
    b, h, s, d = 2, 4, 16, 8
    q, k, v = (_randn((b, h, s, d), seed).to(device) for seed in range(3))
    bias = torch.zeros(b, 1, s, s).masked_fill(
        torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf")).to(device)

    def f(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.expand(b, h, s, s))

    ref_in = [t.clone().requires_grad_() for t in (q, k, v)]
    out_in = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = f(*ref_in, bias)
    clear_reports()
    out = ember_compile(f, target)(*out_in, bias)
    assert_close(out, ref, tol=1e-5)
    ref.square().sum().backward()
    out.square().sum().backward()
    for a, r in zip(out_in, ref_in):
        assert_close(a.grad, r.grad, tol=1e-4, what="grad")
    check_fallbacks()
    reports = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}
    # the forward: the attention alone; the backward: no copy of the bias either
    assert reports["forward"]["num_kernels"] == 0, reports["forward"]["fused_groups"]
    assert ["copy"] not in reports["backward"]["fused_groups"], reports["backward"]


def test_equal_folded_values_are_one_input(target, device, monkeypatch):
    """Two layers that each build the causal mask's bias (GPT-2's 12 SDPA calls each convert
    the one mask to a bias of their own): the equal folded values are one input of the
    graph, not one per layer (GPT-2 fp32 on a GPU: 2 MB instead of 12 x 2 MB held)."""
    from ember.frontend import const_fold
    monkeypatch.setattr(const_fold, "FOLD_BYTES", 4096)

    def two_layers(x):
        return _expanded_mask_scores(_expanded_mask_scores(x) * x)

    x = _randn((2, 4, 16, 16)).to(device)
    clear_reports()
    with torch.no_grad():   # (an inference graph: a training one's AOTAutograd CSE merges them)
        assert_close(ember_compile(two_layers, target)(x), two_layers(x), tol=1e-5)
    check_fallbacks()
    (report,) = ember.last_reports()
    assert report.get("folded_constants", 0) == 1, report.get("folded_constants")
    assert report["num_kernels"] == 1, report["fused_groups"]


def test_folded_values_equal_but_for_zero_signs_stay_two(target, device):
    """Folded values equal under `==` but not bit for bit (-0.0 and 0.0: an additive mask of
    `0 * finfo.min` holds -0.0) are two inputs: each reader sees its own value's bits."""
    def two_masks(x):
        m1 = torch.arange(4.0, device=x.device) * -1.0      # -0.0, -1, -2, -3
        m2 = m1 + 0.0                                       # 0.0, -1, -2, -3
        return x * m1, x * m2

    x = (_randn((8, 4)).abs() + 1).to(device)
    clear_reports()
    with torch.no_grad():
        outs = ember_compile(two_masks, target)(x)
    check_fallbacks()
    refs = two_masks(x)
    for out, ref in zip(outs, refs):
        assert torch.equal(out, ref) and torch.equal(torch.signbit(out), torch.signbit(ref))
    (report,) = ember.last_reports()
    assert report.get("folded_constants", 0) == 2, report.get("folded_constants")


def test_f32_batch_norm_variance_in_one_pass(target, device):
    """A training BatchNorm's f32 statistics with `one_pass_variance` (the GPU targets'
    default): the variance's sums run beside the mean's in one split reduction, two kernels
    less in the forward than the two-pass form (resnet18's fp32 training step for the cuda
    target: 217 -> 180 launches, Inductor 180). Output, running statistics and gradients as
    eager's to f32 tolerance."""
    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.ReLU()).to(device).train()
    x = (_randn((32, 4, 48, 48)) * 3 + 1).to(device)
    kernels = {}
    for one_pass in (False, True):
        model, ref_model = make(), make()
        clear_reports()
        torch._dynamo.reset()
        fn = torch.compile(model, backend="ember",
                           options={"target": target, "one_pass_variance": one_pass})
        _train_step_matches_eager(fn, model, ref_model, x, 1e-5)
        fwd = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}["forward"]
        kernels[one_pass] = fwd["num_kernels"]
    if target == "cpu":     # (the C++ code generator splits no reduction: nothing to save)
        return
    assert kernels[True] == kernels[False] - 2, kernels


def _shifted_window_mask(scores):
    """swin_t's shifted-window attention mask as torchvision builds it: regions numbered by
    item assignment (`mask[h, w] = count`: Dynamo lifts each count to a tensor constant, a
    `get_attr` of the graph), windowed, compared, filled; then added to the scores."""
    mask = scores.new_zeros((8, 8))
    count = 0
    for h in ((0, -4), (-4, -2), (-2, None)):
        for w in ((0, -4), (-4, -2), (-2, None)):
            mask[h[0]:h[1], w[0]:w[1]] = count
            count += 1
    mask = mask.view(2, 4, 2, 4).permute(0, 2, 1, 3).reshape(4, 16)
    mask = mask.unsqueeze(1) - mask.unsqueeze(2)
    mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
    return (scores + mask[None]).softmax(-1)


def test_mask_from_lifted_tensor_constants_is_computed_once(target, device):
    """A value computed from the graph's tensor constants (`get_attr`) and factories alone is
    input-free too: swin_t's shifted-window mask is folded into one input read by the softmax
    kernel. Before, every forward recomputed it inside the attention kernel through nine
    nested slice-scatters of clamped indices (swin_t fp32 inference on the H200: its three
    such kernels took 0.098 ms a call against Inductor's 0.047)."""
    reports = _fwd_bwd(_shifted_window_mask, [_randn((3, 4, 16, 16))], target, device,
                       tol=1e-5)
    fwd = reports["forward"]
    assert fwd.get("folded_constants", 0) >= 1, fwd
    # (not folded: 18 pieces folded around nine pad / where / extract_slice chains per call)
    assert not any(op in ("pad", "where", "extract_slice") for g in fwd["fused_groups"]
                   for op in g), fwd["fused_groups"]


def test_last_weight_cast_is_saved_the_others_recomputed(target, device, tmp_path):
    """Autocast's bf16 copies of the weights are recomputed in the backward (less memory
    saved), except the copy the backward's first matmul reads (the last layer's weight): a
    recomputed copy would be made at the start of the backward, where every saved activation
    is alive, so saving it costs no peak memory, and the backward one cast kernel
    (backend._first_backward_casts; the MLP block: 20 -> 19 launches with Inductor's 19).
    Gradients as eager's."""
    import re
    torch.manual_seed(0)

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                   torch.nn.Linear(32, 16)).to(device)
    model, ref = make(), make()
    x = _randn((8, 16)).to(device)
    torch._dynamo.reset()
    clear_reports()
    fn = torch.compile(model, backend="ember", options={"target": target,
                                                        "debug_dir": str(tmp_path)})
    _bf16_steps_match_eager(fn, ref, model, ref, x, device)
    backward = next(p for p in tmp_path.iterdir() if p.name.endswith("backward"))
    code = (backward / "fx_graph.txt").read_text()
    recast = re.findall(r"convert_element_type\.default\((primals_\d+), torch\.bfloat16\)", code)
    # the first weight's cast is recomputed, the last one's is saved (a backward input)
    assert len(recast) == 1, recast



def _casts(x, y, u, v):
    """Two bf16 matmul products cast to f32 (a backward's weight gradients under autocast)."""
    return [(x @ y).float(), (u @ v).float()]


def _casts_after_a_product(p, q, x, y, u, v):
    """The same casts after a larger product that a row sum reads."""
    return [(p @ q).sum(1)] + _casts(x, y, u, v)


def test_horizontal_merge_below_the_peak_is_made():
    """Horizontal fusion of the two casts keeps the first product (1024x640, over 1 MiB)
    alive across the second matmul. After the 16 MiB product the function's peak is there, so the merge
    raises no peak and is made: one cast kernel of two results (a flat 1 MiB bound on held
    bytes refused it). Without the larger product the casts' region is the peak, and the merge
    is refused (passes/fusion_liveness.py). Values are eager's. The decision is ember-fuse's,
    the same for every target: the C++ one runs it (megabytes through Triton's interpreter
    took 30 s)."""
    x, u = (_randn((1024, 64), s).to(torch.bfloat16) for s in (1, 2))
    y, v = (_randn((64, 640), s).to(torch.bfloat16) for s in (3, 4))
    p, q = _randn((4096, 64), 5), _randn((64, 1024), 6)
    for fn, args, cast_kernels in ((_casts_after_a_product, [p, q, x, y, u, v], 1),
                                   (_casts, [x, y, u, v], 2)):
        ref = fn(*args)
        out = ember_compile(fn, "cpu")(*args)
        for o, r in zip(out, ref):
            assert_close(o, r, tol=1e-4)
        check_fallbacks()
        report = ember.last_reports()[-1]
        casts = [g for g in report["fused_groups"] if "convert" in g]
        assert len(casts) == cast_kernels, report["fused_groups"]
        assert report["num_kernels"] == 2, report["fused_groups"]


def _gpt2_inference_launches(layers: int) -> list[tuple[str, str]]:
    """(kind, name) of every launch of a tiny GPT-2's inference graph with `layers` layers,
    compiled for the Triton target and not run (benchmarks/kernel_count.py's compile_only)."""
    tf = pytest.importorskip("transformers")
    from ember.benchmarks import kernel_count as kc
    cfg = tf.GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_head=4, n_layer=layers,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                        bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = tf.GPT2Model(cfg).eval()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    clear_reports()
    records = []
    with kc.compile_only(records), torch.no_grad():
        torch.compile(model, backend="ember", options={"target": "triton"})(ids)
    check_fallbacks()
    (record,) = records
    return [(kc.step_kind(s), s.name) for s in record["program"].steps if kc.step_kind(s)]


def test_gpt2_layer_launches_as_inductor():
    """A GPT-2 layer's fp32 inference is 8 launches, Inductor's GPU schedule: addmm for c_attn,
    attention, mm + (bias, residual, layer norm), mm + (bias, GELU), mm + (bias, residual,
    layer norm). c_attn's bias add was a kernel of its own that also copied q, k and v out
    transposed (9 a layer): it is now the library's addmm (ember-convert-externs), whose
    buffer the attention call reads as strided views (ember-library-views)."""
    one, two = _gpt2_inference_launches(1), _gpt2_inference_launches(2)
    layer = two[len(one) - 1:-1]    # the second layer's launches: after the first's, before
    assert len(two) - len(one) == 8, (one, two)     # the final layer norm
    assert [k for k, _ in layer].count("library") == 5, layer
    assert [k for k, _ in layer].count("copies") == 0, layer
    assert sum(name == "aten.addmm" for _, name in layer) == 1, layer
    assert not any("slice" in name or "transpose" in name for _, name in layer), layer


def test_bias_add_of_a_widened_bf16_product_stays_an_add(target, device):
    """`a.float() @ b.float() + bias` of bf16 a, b, returned: the product is mm's widening
    overload of the narrow operands, so its bias add, though only returned, is not folded into
    an addmm (which has no such overload: it would be handed bf16 operands and an f32 bias)."""
    a = _randn((8, 16)).to(torch.bfloat16).to(device)
    b = _randn((16, 32), 1).to(torch.bfloat16).to(device)
    bias = _randn(32, 2).to(device)

    def f(a, b, bias):
        return a.float() @ b.float() + bias

    clear_reports()
    assert_close(ember_compile(f, target)(a, b, bias), f(a, b, bias), tol=1e-4)
    check_fallbacks()
    (report,) = ember.last_reports()
    assert report["num_kernels"] == 1, report["fused_groups"]


def _attention_block(x, w_qkv, w_o):
    """bf16 self-attention as GPT-2 computes it: one projection split into q, k, v, a causal
    attention, the heads merged and projected."""
    b, s, d = x.shape
    q, k, v = (x @ w_qkv).split(d, dim=-1)
    q, k, v = (t.reshape(b, s, 2, d // 2).transpose(1, 2) for t in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return o.transpose(1, 2).reshape(b, s, d) @ w_o


def test_input_gradient_of_a_bf16_product_is_read_as_a_view(target, device):
    """The backward's `grad @ w_o.T` of bf16 operands, rounded back to bf16, is eager's bf16
    aten.mm (ember-convert-externs `_narrow_product`), and the attention backward reads the
    incoming gradient as a transposed view of its buffer. Before, the product was an f32 mm
    whose rounding and transpose were a copy kernel of their own (one launch a layer in GPT-2's
    bf16 training). Gradients are eager's bit for bit (the same library calls; the f32 product
    rounded after differed from eager's bf16 mm by 1e-5 on the CPU)."""
    args = [_randn((2, 8, 16)).to(torch.bfloat16), (_randn((16, 48), 1) / 4).to(torch.bfloat16),
            (_randn((16, 16), 2) / 4).to(torch.bfloat16)]
    reports = _fwd_bwd(_attention_block, args, target, device, tol=1e-12)   # exact
    bwd = reports["backward"]
    # the product's rounding (a convert) is cuBLAS's; left: the copy of q/k/v's gradients into
    # one buffer, and on the CPU the transpose of the saved logsumexp
    assert not any("convert" in g for g in bwd["fused_groups"]), bwd["fused_groups"]
    assert len(bwd["fused_groups"]) <= 2, bwd["fused_groups"]


def test_gate_and_up_weight_copies_are_one_kernel(target, device):
    """A gated MLP (Llama's) under autocast: the bf16 copies of the gate and up weights, both
    multiplied with one activation, are made by one kernel (ember-fuse's horizontal fusion
    beside a library call's shared operand); before, a launch each (Llama bf16 training: 2
    launches a layer less in the forward, with k's and v's copies). Gradients as eager's."""
    torch.manual_seed(0)

    def make():
        torch.manual_seed(0)
        return torch.nn.ModuleDict({"gate": torch.nn.Linear(16, 32, bias=False),
                                    "up": torch.nn.Linear(16, 32, bias=False),
                                    "down": torch.nn.Linear(32, 16, bias=False)}).to(device)

    def mlp(m, x):
        return m["down"](F.silu(m["gate"](x)) * m["up"](x))

    model, ref = make(), make()
    x = _randn((8, 16)).to(device)
    torch._dynamo.reset()
    clear_reports()
    fn = torch.compile(lambda t: mlp(model, t), backend="ember", options={"target": target})
    _bf16_steps_match_eager(fn, lambda t: mlp(ref, t), model, ref, x, device)
    fwd = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}["forward"]
    casts = [g for g in fwd["fused_groups"] if g == ["convert"]]
    # x's copy, gate's and up's in one kernel, down's (read by another product)
    assert len(casts) == 3, fwd["fused_groups"]


class _GQAttention(torch.nn.Module):
    """Llama's attention: q/k/v projections, rotary embeddings (rotate_half: slices, neg,
    concat, products with cos and sin), k and v repeated over the query heads (grouped-query
    attention: expand and reshape), causal SDPA, the output projection."""

    def __init__(self, d=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, self.hd, 2) / self.hd))

    @staticmethod
    def _rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def forward(self, x):
        b, s, _ = x.shape
        pos = torch.arange(s, device=x.device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        q = self.q(x).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + self._rotate_half(q) * sin
        k = k * cos + self._rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k[:, :, None].expand(b, self.kv_heads, rep, s, self.hd).reshape(b, self.heads, s,
                                                                              self.hd)
        v = v[:, :, None].expand(b, self.kv_heads, rep, s, self.hd).reshape(b, self.heads, s,
                                                                              self.hd)
        y = F.scaled_dot_product_attention(q.to(v.dtype), k.to(v.dtype), v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


def test_grouped_query_attention_k_and_v_kernels_are_one(target, device):
    """Llama's attention under autocast: the kernel repeating v over the query heads and the
    one rotating and repeating k are one kernel (attention reads both through host reshapes:
    ember-fuse's horizontal fusion of one op's operands looks through them). Before, a launch
    each. (The backward's k and v weight copies beside the k and v gradients, which that
    round fuses: lit, ember-fuse.mlir.) Gradients as eager's."""
    def make():
        torch.manual_seed(0)
        return _GQAttention().to(device)

    model, ref = make(), make()
    x = _randn((2, 8, 32)).to(device)
    torch._dynamo.reset()
    clear_reports()
    fn = torch.compile(model, backend="ember", options={"target": target})
    _bf16_steps_match_eager(fn, ref, model, ref, x, device)
    graphs = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}
    fwd = graphs["forward"]["fused_groups"]
    # the repeats of k and v: one kernel, with k's rotation (none of v's alone)
    assert not any(set(g) <= {"transpose", "copy", "broadcast", "expand"} for g in fwd), fwd
    rotations = [g for g in fwd if "concat" in g and "cos" in g]
    assert len(rotations) == 2, fwd          # q's, and k's with v's repeat
    assert graphs["forward"]["num_kernels"] == 7, fwd      # was 8


class _ConvBlock(torch.nn.Module):
    """A resnet basic block without downsampling: conv-bn-relu-conv-bn + residual, relu."""

    def __init__(self, c=16):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


def test_conv_block_training_launches():
    """A bf16 conv block's training step for the GPU (channels-last, compiled for the Triton
    target, not run), at a size whose batch statistics are split reductions (4 x 64 x 64 rows
    of 16 channels). A BatchNorm's forward is 3 launches, as Inductor's (a partial kernel
    for both sums, their final kernel, the normalisation): the variance is a shifted one-pass
    sum beside the mean's (ember-shifted-variance), where the two-pass form needed the mean's
    final kernel before the square's partial one (5 launches). The backward: per BatchNorm
    a partial kernel (ReLU mask and residual sum inside), a final one and the input
    gradient's."""
    from ember.benchmarks import kernel_count as kc
    torch.manual_seed(0)
    model = _ConvBlock().to(torch.bfloat16).train()
    x = _randn((4, 16, 64, 64)).to(torch.bfloat16).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    clear_reports()
    records = []
    with kc.compile_only(records):
        out = torch.compile(model, backend="ember",
                            options={"target": "triton", "channels_last": True})(x)
        out.float().square().mean().backward()
    check_fallbacks()
    launches = {r["kind"]: [(kc.step_kind(s), s.name) for s in r["program"].steps
                            if kc.step_kind(s)] for r in records}
    fwd, bwd = launches["forward"], launches["backward"]
    # the two weights' OHWI copies and the batch counters' add, and 3 per BatchNorm (5 before)
    assert [k for k, _ in fwd].count("generated") == 9, fwd     # was 13
    assert [k for k, _ in fwd].count("library") == 2, fwd
    assert [k for k, _ in bwd].count("generated") == 7, bwd


def test_shifted_variance_far_from_zero(target, device):
    """BatchNorm's training statistics of bf16 data whose mean is 100 times its deviation, the
    shift sample (the first element of each channel) an outlier (30 deviations out), over
    4 x 64 x 64 rows: long enough to be split on the Triton target, where the variance is the
    shifted one-pass sum (ember-shifted-variance). Outputs, running statistics and gradients
    as eager's. (The shifted sums lose digits with ((mean - k) / std)^2, as the two-pass form
    does not; the textbook sum(x^2) - sum(x)^2 / n would lose most of them here.)"""
    def make():
        torch.manual_seed(0)
        return torch.nn.BatchNorm2d(16).to(device).train()

    model, ref_model = make(), make()
    x = 10.0 + 0.1 * _randn((4, 16, 64, 64))
    x[0, :, 0, 0] += 3.0 * _randn(16, seed=3)
    x = x.to(device, torch.bfloat16)     # as under autocast: f32 data keeps the two-pass form
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = ember_compile(model, target)(xa)
    ref = ref_model(xb)
    assert_close(out.float(), ref.float(), tol=1e-2)
    cot = _randn(ref.shape, seed=7).to(device, torch.bfloat16)
    (out * cot).sum().backward()
    (ref * cot).sum().backward()
    assert_close(xa.grad.float(), xb.grad.float(), tol=1e-2, what="grad")
    for (name, a), b in zip(model.state_dict().items(), ref_model.state_dict().values()):
        assert_close(a, b, tol=1e-4, what=name)
    check_fallbacks()
    if target != "cpu":     # the shifted sums ran: their kernels read the sample k (a slice)
        fwd = {r["graph_id"].rsplit("-", 1)[-1]: r for r in ember.last_reports()}["forward"]
        assert any("extract_slice" in g for g in fwd["fused_groups"]), fwd["fused_groups"]
