"""What the float32 op_db sweep of 2026-11-26 found (a crash), and the last ops the bf16 sweep
ran eagerly (benchmarks/results/opdb-2026-11-26b.md). Each test compares with eager and checks
that nothing fell back, except where falling back is the right answer."""
import pytest
import torch
import torch.nn.functional as F

import ember
from conftest import assert_close, check, check_fallbacks, ember_compile
from test_op_coverage_bf16 import _grads


def _library_calls():
    return {c for r in ember.last_reports() for c in r.get("library_calls") or []}


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_narrow_int_arange_does_not_crash(dtype, target):
    """torch-mlir crashed the process (SIGSEGV) on an int8/uint8 `arange`; op_db's
    `linalg.matrix_power(x, 0)` makes one (an identity matrix: eq of two uint8 aranges), as does
    `eye(n, dtype=int8)`. Now an int64 arange cast to the narrow type, wrapping as eager does."""
    x = torch.randn(3, 3)
    check(lambda x: x + torch.arange(0, 3, dtype=dtype), (x,), target)
    check(lambda x: x * torch.arange(1, 7, 2, dtype=dtype), (x,), target)
    check(lambda x: x + torch.eye(3, dtype=dtype), (x,), target)
    if dtype == torch.uint8:      # 250 .. 255, 0 .. 3: wrapped, as eager's arange
        check(lambda x: torch.arange(250, 260, dtype=dtype).float().sum() + x, (x,), target)
    check(lambda x: torch.linalg.matrix_power(x, 0) + x, (x,), target)
    check(lambda x: torch.linalg.matrix_power(x[:1, :1], 0) * 2, (x,), target)


# A user's custom op (torch.library) with a dtype argument: torch-mlir cannot import it. It
# was split out of the graph (a dtype argument did not travel to the runtime); now it is a call
# inside the one program, still reported as a fallback (ember cannot compile it).
@torch.library.custom_op("ember_test::scaled_tanh", mutates_args=())
def _scaled_tanh(x: torch.Tensor, scale: float, acc: torch.dtype) -> torch.Tensor:
    return (torch.tanh(x.to(acc)) * scale).to(x.dtype)


@_scaled_tanh.register_fake
def _(x, scale, acc):
    return torch.empty_like(x)


@pytest.mark.filterwarnings("ignore:ember. ember_test.scaled_tanh")
def test_custom_op_with_a_dtype_argument_is_a_call_in_the_program(target):
    x = torch.randn(4, 8)
    fn = lambda x: _scaled_tanh(x.sin() + 1, 3.0, torch.float64).exp() * 2   # noqa: E731
    check(fn, (x,), target, expect_fallback=True)
    (report,) = ember.last_reports()        # one program: no split into pieces
    assert report["eager_fallback_ops"] == ["ember_test.scaled_tanh.default"]
    assert report["num_kernels"] >= 2, report


@pytest.mark.skipif(not hasattr(torch.nn, "LinearCrossEntropyOptions"),
                    reason="torch.nn.functional.linear_cross_entropy's chunked form is newer "
                           "than this torch (2.11 on the GPU machine has none)")
@pytest.mark.parametrize("variant", ["chunked", "chunked_none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear_cross_entropy_chunked(variant, dtype):
    """The chunked `linear_cross_entropy` is torch's own custom op
    (`torch_nn::_linear_cross_entropy_batch_chunked[_no_reduction]`) and views: the whole
    graph ran eagerly ("no op of the graph compiles"), forward and backward."""
    torch.manual_seed(0)
    x, w = torch.randn(8, 3, dtype=dtype), torch.randn(4, 3, dtype=dtype)
    t = torch.tensor([0, 3, 1, 2, 2, 0, 1, 3])
    opts = torch.nn.LinearCrossEntropyOptions(allow_retain_graph=variant == "chunked",
                                              batch_chunk_size=2)
    red = "mean" if variant == "chunked" else "none"
    fn = lambda x, w: F.linear_cross_entropy(x, w, t, reduction=red, options=opts)  # noqa: E731
    ref, gref = _grads(fn, (x, w))
    out, g = _grads(ember_compile(fn, "cpu"), (x, w))
    assert_close(out, ref)
    assert_close(list(g), list(gref))
    check_fallbacks()
    assert any(c.startswith("torch_nn._linear_cross_entropy") for c in _library_calls())


def test_matmul_with_a_widened_operand(target):
    """`mm(x_f32, w_bf16.float())`: ember-fuse folds the widening into the matmul extern, whose
    f32 x bf16 call torch refused at run time ("expected m1 and m2 to have the same dtype"; the
    chunked linear_cross_entropy's backward). Now eager's f32 GEMM of the widened operand."""
    torch.manual_seed(0)
    x, w = torch.randn(6, 5), torch.randn(4, 5, dtype=torch.bfloat16)
    check(lambda x, w: (x @ w.float().t()) * 2, (x, w), target, matmul=True)
    check(lambda x, w: (w.float() @ x.t()).relu(), (x, w), target, matmul=True)


def test_hash_tensor_uint64_result(target):
    """`hash_tensor` returns uint64, a type torch-mlir has none of: a library call whose result
    is imported as int64 (the same bits) and returned as uint64. (Its inputs are exact here: a
    hash of an input one ulp away differs everywhere.)"""
    x = torch.randn(4, 5)
    for fn in (lambda x: torch.hash_tensor(x * 2),
               lambda x: torch.hash_tensor(x + 1, dim=1),
               lambda x: (torch.hash_tensor(x.neg(), dim=0, keepdim=True).t(), x * 3)):
        out, ref = ember_compile(fn, target)(x), fn(x)
        out, ref = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
        assert out[0].dtype == torch.uint64 and torch.equal(out[0].view(torch.int64),
                                                            ref[0].view(torch.int64))
        assert_close(list(out[1:]), list(ref[1:]))
        check_fallbacks()
        assert "aten.hash_tensor.default" in _library_calls()


@pytest.mark.filterwarnings("ignore:ember. prims.convert_element_type")
@pytest.mark.filterwarnings("ignore:ember. graph")
def test_hash_tensor_read_by_compiled_code_is_not_misread():
    """A uint64 result that a compiled op would read (as a signed int64: a wrong answer) is not
    imported: that part runs in eager torch, correctly."""
    x = torch.randn(4, 5)
    fn = lambda x: torch.hash_tensor(x, dim=1).to(torch.float64) + x.sum()   # noqa: E731
    out = ember_compile(fn, "cpu")(x)
    assert_close(out, fn(x))
    assert any(r["status"] == "partitioned" for r in ember.last_reports())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_bag_backward_empty_offset2bag(dtype):
    """CPU `_embedding_bag` (mode sum, per-sample weights) returns an empty offset2bag where its
    meta function says one element per index; the compiled backward refused the `[0]` input at
    run time and ran eagerly. Only eager's kernels read it (its backward rebuilds it when empty),
    so its declared shape is not binding there."""
    torch.manual_seed(0)
    w, psw = torch.randn(10, 5, dtype=dtype), torch.randn(5, dtype=dtype)
    idx, off = torch.tensor([1, 2, 4, 5, 4]), torch.tensor([0, 2])
    fn = lambda w, psw: F.embedding_bag(idx, w, off, mode="sum",   # noqa: E731
                                        per_sample_weights=psw) * 2
    ref, gref = _grads(fn, (w, psw))
    out, g = _grads(ember_compile(fn, "cpu"), (w, psw))
    assert_close(out, ref)
    assert_close(list(g), list(gref))
    check_fallbacks()
    assert "aten._embedding_bag_backward.default" in _library_calls()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vector_norm_over_one_element_is_its_magnitude(dtype):
    """Eager's norm over one element per result is |x|, not (|x|^p)^(1/p): the square of 1e-30
    underflowed to 0 in ember (3e19: inf), a wrong answer; Inductor matches eager."""
    for v in (1e-30, -3e19, 0.5):
        for shape, dim in (((1,), None), ((3, 1), -1), ((), None), ((), ()), ((1, 1), (0, 1))):
            x = torch.full(shape, v, dtype=dtype)
            for ord in (2, 3, float("inf"), 0):
                fn = lambda x: torch.linalg.vector_norm(x, ord, dim=dim) * 1   # noqa: E731
                out, ref = ember_compile(fn, "cpu")(x), fn(x)
                assert out.shape == ref.shape and torch.equal(out, ref), (shape, dim, ord, v)
                check_fallbacks()
    x = torch.full((3, 1), 1e-30, requires_grad=True)
    torch.linalg.vector_norm(x, dim=-1).sum().backward()
    y = x.detach().clone().requires_grad_()
    ember_compile(lambda y: torch.linalg.vector_norm(y, dim=-1), "cpu")(y).sum().backward()
    assert torch.equal(y.grad, x.grad)
