"""Compiled-vs-eager numerics through the public API: torch.compile(fn, backend="ember").

Every case runs on each selected target (see conftest.py), compares with eager (dtype, shape,
relative error under docs/design.md's tolerances, NaN never passes) and checks that ember's compile
report lists no op that fell back to eager.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import assert_close, check, check_fallbacks, ember_compile


def shape2(interpreted):
    return (5, 12) if interpreted else (37, 130)


def shape3(interpreted):
    return (2, 5, 12) if interpreted else (4, 19, 70)


def randn(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)


def positive(shape, device, seed=1):
    return randn(shape, device, seed=seed).abs() + 0.1


# --------------------------------------------------------------------------- pointwise

UNARY = {
    "exp": torch.exp,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu_erf": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": torch.relu,
    "silu": F.silu,
    "abs": torch.abs,
    "neg": torch.neg,
    "pow_scalar": lambda x: x ** 3,
    "square": lambda x: x * x + 1.0,
    "clamp": lambda x: torch.clamp(x, -0.5, 0.7),
    "clamp_min": lambda x: torch.clamp(x, min=0.1),
    "chain": lambda x: F.gelu(x * 1.7 + 0.3) * torch.sigmoid(x),
}
UNARY_POSITIVE = {
    "log": torch.log,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "pow_tensor": lambda x: torch.pow(x, x * 0.5),
}
BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "add_alpha": lambda x, y: torch.add(x, y, alpha=2.5),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "where_gt": lambda x, y: torch.where(x > y, x, y * 2.0),
    "where_scalar": lambda x, y: torch.where(x < 0.0, 0.0, y),
}
COMPARE = {
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, target, device, interpreted):
    check(UNARY[name], (randn(shape2(interpreted), device),), target)


@pytest.mark.parametrize("name", sorted(UNARY_POSITIVE))
def test_unary_positive(name, target, device, interpreted):
    check(UNARY_POSITIVE[name], (positive(shape2(interpreted), device),), target)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, target, device, interpreted):
    s = shape2(interpreted)
    y = randn(s, device, seed=2)
    if name == "div":
        y = y.sign() * (y.abs() + 0.5)
    check(BINARY[name], (randn(s, device), y), target)


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_compare_to_bool(name, target, device, interpreted):
    s = shape2(interpreted)
    x = torch.round(randn(s, device) * 2)  # rounded: ties exercise eq/le/ge
    y = torch.round(randn(s, device, seed=3) * 2)
    check(COMPARE[name], (x, y), target)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_chain(dtype, target, device, interpreted):
    fn = UNARY["chain"]
    check(lambda x, y: fn(x) + y, (randn(shape2(interpreted), device, dtype),
                                   randn(shape2(interpreted), device, dtype, seed=4)), target)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_int_arith(dtype, target, device, interpreted):
    s = shape2(interpreted)
    x = torch.randint(-50, 50, s, generator=torch.Generator().manual_seed(0)).to(device, dtype)
    y = torch.randint(1, 9, s, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    check(lambda a, b: (a + b) * 3 - a * b + torch.maximum(a, b), (x, y), target)


def test_bool_logic(target, device, interpreted):
    s = shape2(interpreted)
    x, y = randn(s, device), randn(s, device, seed=5)
    check(lambda a, b: ((a > 0) & (b < 0.5)) | ~(a > b), (x, y), target)


CASTS = {
    "f32_to_i32": lambda x: (x * 10).to(torch.int32),
    "f32_to_i64": lambda x: (x * 10).to(torch.int64) + 1,
    "i32_to_f32": lambda x: (x * 10).to(torch.int32).to(torch.float32) * 0.5,
    "f32_to_bf16": lambda x: (x * 1.5).to(torch.bfloat16),
    "f32_to_f16": lambda x: (x * 1.5).to(torch.float16),
    "bf16_to_f32": lambda x: x.to(torch.bfloat16).to(torch.float32) + 1.0,
    "bool_to_f32": lambda x: (x > 0).to(torch.float32) * x,
}


@pytest.mark.parametrize("name", sorted(CASTS))
def test_cast(name, target, device, interpreted):
    # The Triton interpreter rounds f32 -> bf16 toward zero (torch and GPUs: to nearest even), so
    # a value that went through bf16 is only held to bf16's tolerance there.
    tol = 1e-2 if interpreted and name == "bf16_to_f32" else None
    check(CASTS[name], (randn(shape2(interpreted), device),), target, tol=tol)


# --------------------------------------------------------------------------- broadcasting

def test_broadcast_scalar(target, device, interpreted):
    check(lambda x: x * 2.5 - 1.0, (randn(shape2(interpreted), device),), target)


def test_broadcast_row(target, device, interpreted):
    m, n = shape2(interpreted)
    check(torch.add, (randn((m, n), device), randn((n,), device, seed=1)), target)


def test_broadcast_column(target, device, interpreted):
    m, n = shape2(interpreted)
    check(torch.mul, (randn((m, n), device), randn((m, 1), device, seed=1)), target)


def test_broadcast_3d(target, device, interpreted):
    b, m, n = shape3(interpreted)
    check(lambda x, y, z: x * y + z,
          (randn((b, 1, n), device), randn((1, m, 1), device, seed=1),
           randn((b, m, n), device, seed=2)), target)


# --------------------------------------------------------------------------- reductions

REDUCE = {
    "sum": lambda x, d: x.sum(d),
    "mean": lambda x, d: x.mean(d, keepdim=True),
    "amax": lambda x, d: x.amax(d),
    "amin": lambda x, d: x.amin(d),
    "var": lambda x, d: x.var(d),
}
AXES = [(2, 0), (2, 1), (3, 0), (3, 1), (3, 2)]


@pytest.mark.parametrize("rank,dim", AXES, ids=[f"{r}d-dim{d}" for r, d in AXES])
@pytest.mark.parametrize("op", sorted(REDUCE))
def test_reduction(op, rank, dim, target, device, interpreted):
    s = shape2(interpreted) if rank == 2 else shape3(interpreted)
    fn = REDUCE[op]
    check(lambda x: fn(x, dim), (randn(s, device),), target)


def test_reduce_all_and_multi_axis(target, device, interpreted):
    x = randn(shape3(interpreted), device)
    check(lambda x: (x.sum(), x.mean((0, 2)), (x * x).sum(-1).sqrt()), (x,), target)


@pytest.mark.parametrize("rank,dim", AXES, ids=[f"{r}d-dim{d}" for r, d in AXES])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op, rank, dim, target, device, interpreted):
    s = shape2(interpreted) if rank == 2 else shape3(interpreted)
    fn = getattr(torch, op)
    check(lambda x: fn(x * 3.0, dim), (randn(s, device),), target)


@pytest.mark.parametrize("last_dims", [1, 2])
def test_layer_norm(last_dims, target, device, interpreted):
    s = shape3(interpreted)
    ns = s[-last_dims:]
    w, b = randn(ns, device, seed=1), randn(ns, device, seed=2)
    check(lambda x, w, b: F.layer_norm(x, ns, w, b, eps=1e-5), (randn(s, device), w, b), target)


# --------------------------------------------------------------------------- shapes

SHAPES = {
    "transpose": lambda x: x.transpose(1, 2) + 1.0,
    "permute": lambda x: x.permute(2, 0, 1) * 2.0,
    "transpose_contiguous": lambda x: torch.sigmoid(x.transpose(0, 2).contiguous()),
    "view": lambda x: (x + 1.0).view(x.shape[0], -1) * 3.0,
    "reshape_after_transpose": lambda x: x.transpose(1, 2).reshape(-1, x.shape[1]) - 1.0,
    "slice": lambda x: x[:, 1:4, 2:] * 2.0,
    "slice_step": lambda x: x[:, 0:4:2] * 2.0 + x[:, 1:5:2, ::3].sum(-1, keepdim=True),
    "cat_dim0": lambda x: torch.cat([x, x * 2.0], 0),
    "cat_dim2": lambda x: torch.cat([x.exp(), x[..., :3]], 2),
    "unsqueeze_expand": lambda x: x.sum(-1).unsqueeze(-1).expand_as(x) + x,
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shape_ops(name, target, device, interpreted):
    check(SHAPES[name], (randn(shape3(interpreted), device),), target)


def _key_cache(x):
    """GPT-2's attention keys: heads split off, appended to an empty cache, used transposed."""
    k = x.view(2, 4, 3, 4).permute(0, 2, 1, 3)
    cache = torch.cat([torch.tensor([], device=x.device), k], -2)  # an empty cache: a copy
    return cache, cache.transpose(-1, -2) * 0.5


SQUARE = {
    # two layouts of one tensor whose results share a shape (GPT-2's key cache and its transpose)
    "two_permutes": lambda x: (x.transpose(1, 2) * 1.0, x.permute(0, 2, 3, 1) * 1.0),
    "two_permuted_copies": lambda x: (x.transpose(1, 2).contiguous(),
                                      x.permute(0, 2, 3, 1).contiguous()),
    "key_cache": lambda x: _key_cache(x),
    "plus_own_transpose": lambda x: x + x.transpose(1, 3),
}


@pytest.mark.parametrize("name", sorted(SQUARE))
def test_square_layouts(name, target, device, interpreted):
    check(SQUARE[name], (randn((2, 4, 3, 4), device),), target)


# --------------------------------------------------------------------------- matmul family

def test_matmul_bias_gelu(target, device, interpreted):
    m, k, n = (8, 16, 24) if interpreted else (64, 96, 80)
    args = (randn((m, k), device), randn((k, n), device, seed=1), randn((n,), device, seed=2))
    check(lambda a, w, b: F.gelu(a @ w + b), args, target, matmul=True)


def test_bmm(target, device, interpreted):
    b, m, k, n = (2, 8, 16, 12) if interpreted else (4, 32, 48, 40)
    args = (randn((b, m, k), device), randn((b, k, n), device, seed=1))
    check(lambda x, y: torch.bmm(x, y) * 0.5, args, target, matmul=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_linear(dtype, target, device, interpreted):
    # The library GEMM reads the narrow operands and keeps the f32 accumulator for the bias
    # and GELU; the result is rounded once, as eager's epilogue does.
    m, k, n = (8, 16, 24) if interpreted else (64, 96, 80)
    args = (randn((m, k), device, dtype), randn((n, k), device, dtype, seed=1),
            randn((n,), device, dtype, seed=2))
    check(lambda a, w, b: F.gelu(F.linear(a, w, b)), args, target, matmul=True)


def test_bf16_conv_with_bias(target, device, interpreted):
    dt = torch.bfloat16
    args = (randn((2, 4, 8, 8), device, dt), randn((6, 4, 3, 3), device, dt, seed=1),
            randn((6,), device, dt, seed=2))
    check(lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)), args, target, matmul=True)


def mlp(d, h):
    return nn.Sequential(nn.Linear(d, h), nn.GELU(), nn.Linear(h, d), nn.LayerNorm(d))


def cnn(c=8, classes=10):
    """Conv-BN-ReLU twice (the second strided), global average pool, Linear.

    Convs before BN have no bias: train-mode BN makes that gradient zero up to rounding, which
    no relative error can judge. MaxPool2d has its own test (test_maxpool2d), so that a missing
    pooling lowering doesn't hide the conv/BN results."""
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Conv2d(c, c, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))


def _model_args(kind, device, interpreted):
    torch.manual_seed(0)
    if kind == "mlp":
        d, h, rows = (16, 32, 6) if interpreted else (64, 256, 24)
        return mlp(d, h).to(device), randn((rows, d), device)
    n, hw = (2, 8) if interpreted else (4, 16)
    return cnn().to(device), randn((n, 3, hw, hw), device)


def test_mlp_forward(target, device, interpreted):
    model, x = _model_args("mlp", device, interpreted)
    model.eval()
    with torch.no_grad():
        check(model, (x,), target, matmul=True)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_cnn_forward(mode, target, device, interpreted):
    model, x = _model_args("cnn", device, interpreted)
    model.train(mode == "train")
    ref_model = copy.deepcopy(model)
    with torch.no_grad():
        ref = ref_model(x)
        out = ember_compile(model, target)(x)
    assert_close(out, ref, matmul=True)
    # train-mode BatchNorm updates running statistics: they must match eager's too
    for (name, b), (_, rb) in zip(model.named_buffers(), ref_model.named_buffers()):
        assert_close(b, rb, matmul=True, what=f"buffer {name}")
    check_fallbacks()


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_forward_backward(kind, target, device, interpreted):
    model, x = _model_args(kind, device, interpreted)
    model.train()
    ref_model = copy.deepcopy(model)
    x_ref = x.clone().requires_grad_(True)
    x = x.clone().requires_grad_(True)

    ref_out = ref_model(x_ref)
    grad_out = randn(ref_out.shape, device, seed=7)
    (ref_out * grad_out).sum().backward()

    out = ember_compile(model, target)(x)
    (out * grad_out).sum().backward()

    assert_close(out, ref_out, matmul=True, what="forward")
    assert_close(x.grad, x_ref.grad, matmul=True, what="input grad")
    for (name, p), (_, rp) in zip(model.named_parameters(), ref_model.named_parameters()):
        assert p.grad is not None, f"no grad for {name}"
        assert_close(p.grad, rp.grad, matmul=True, what=f"grad {name}")
    check_fallbacks()


@pytest.mark.parametrize("kernel,stride,padding", [(2, 2, 0), (3, 2, 1)])
def test_maxpool2d(kernel, stride, padding, target, device, interpreted):
    x = randn((2, 4, 8, 8) if interpreted else (2, 8, 16, 16), device)
    check(lambda x: F.max_pool2d(x, kernel, stride, padding) + 1.0, (x,), target)


def test_gather_expanded(target, device, interpreted):
    # BERT's token type ids: a gather from an expanded buffer along an expanded index, whose
    # generic writes into a zero fill it never reads.
    table = randn((1, 40), device)
    idx = torch.arange(0, 24, 2, device=device).unsqueeze(0)
    check(lambda t, i: torch.gather(t.expand(3, 40), 1, i.expand(3, 12)) * 2.0, (table, idx),
          target)


def test_embedding(target, device, interpreted):
    vocab, d = (20, 8) if interpreted else (100, 32)
    torch.manual_seed(0)
    emb = nn.Embedding(vocab, d).to(device)
    idx = torch.randint(0, vocab, (3, 7), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        check(lambda i: emb(i) * 2.0 + 1.0, (idx,), target)


@pytest.mark.parametrize("correction,keepdim", [(0, True), (1, False)])
def test_var_mean(correction, keepdim, target, device, interpreted):
    # ember's own var_mean decomposition: two-pass in f32 (torch-mlir's accumulates in f64)
    x = randn(shape3(interpreted), device) * 3.0 + 5.0
    check(lambda x: torch.var_mean(x, (0, 2), correction=correction, keepdim=keepdim), (x,),
          target)
