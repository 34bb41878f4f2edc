"""Complex tensors and FFTs (issue 8, item 5; frontend/complex_values.py): every op on complex
values is an ATen call inside the compiled program, `view_as_real` / `view_as_complex` are
views, and the real arithmetic around them is generated code. Values are checked against
eager (complex results compared as their real views), and that nothing fell back."""
import warnings

import pytest
import torch

import ember
from conftest import assert_close, check_fallbacks, ember_compile


def _close(out, ref, tol=1e-4):
    if isinstance(ref, (tuple, list)):
        for o, r in zip(out, ref, strict=True):
            _close(o, r, tol)
        return
    assert out.dtype == ref.dtype, (out.dtype, ref.dtype)
    if ref.is_complex():
        out, ref = torch.view_as_real(out.resolve_conj()), torch.view_as_real(ref.resolve_conj())
    assert_close(out, ref, tol=tol)


def _reports():
    return ember.last_reports()


def _library_calls() -> set:
    return {c for r in _reports() for c in r.get("library_calls", [])}


def _kernels() -> int:
    return sum(r.get("num_kernels", 0) for r in _reports())


def _check(fn, args, target, grad=False):
    """Compiles `fn`, compares the output (and with `grad`, the gradients of every input that
    requires grad for a fixed upstream gradient) with eager; nothing may fall back."""
    ref = fn(*args)
    out = ember_compile(fn, target)(*args)
    _close(out, ref)
    if grad:
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        g = torch.randn(ref.shape, dtype=ref.dtype, generator=torch.Generator().manual_seed(1))
        _close(torch.autograd.grad(out, leaves, g), torch.autograd.grad(ref, leaves, g))
    check_fallbacks()
    return out


def _rand(*shape, dtype=torch.float32, grad=False):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(0)) \
        .requires_grad_(grad)


FFTS = {
    "fft": (lambda x: torch.fft.fft(x * 2, n=10).abs() + 1, (5, 8), False),
    "ifft": (lambda x: torch.fft.ifft(x, norm="ortho") * 3, (4, 8), True),
    "rfft": (lambda x: torch.view_as_real(torch.fft.rfft(x + 1)) * 2, (4, 8), False),
    "irfft": (lambda x: torch.fft.irfft(x, n=8) + 1, (4, 5), True),
    "fft2": (lambda x: torch.fft.fft2(x).abs() - x.sum(), (3, 4, 6), False),
    "fftn": (lambda x: torch.fft.fftn(x.exp(), dim=(0, 2)), (3, 4, 6), False),
    "hfft": (lambda x: torch.fft.hfft(x, n=10) - 1, (4, 6), True),
}


@pytest.mark.parametrize("name", sorted(FFTS))
def test_fft(name, target):
    fn, shape, complex_in = FFTS[name]
    x = _rand(*shape, dtype=torch.complex64 if complex_in else torch.float32)
    _check(fn, (x,), target)
    assert any(c.startswith("aten._fft_") for c in _library_calls()), _library_calls()


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft"])
def test_fft_backward(name, target):
    fn, shape, complex_in = FFTS[name]
    x = _rand(*shape, dtype=torch.complex64 if complex_in else torch.float32, grad=True)
    _check(lambda x: fn(x).sum(-1), (x,), target, grad=True)


def test_stft(target):
    x = _rand(200, grad=True)
    window = torch.hann_window(16)

    def fn(x, w):
        return torch.stft(x * 2, 16, hop_length=4, window=w, return_complex=True).abs().sum(0)
    _check(fn, (x, window), target, grad=True)


def test_view_as_real_is_a_view_and_the_arithmetic_is_generated(target):
    """view_as_real / view_as_complex are calls that return views; the real arithmetic on
    either side runs in ember's kernels (not as more ATen calls)."""
    def fn(x):
        z = torch.view_as_complex((x * 3).reshape(4, 6, 2))
        r = torch.view_as_real(torch.fft.fft(z))
        return r.pow(2).sum(-1).sqrt() + 1
    _check(fn, (_rand(4, 12),), target)
    calls = _library_calls()
    assert {"aten.view_as_complex.default", "aten.view_as_real.default"} <= calls, calls
    assert not calls & {"aten.mul.Tensor", "aten.pow.Tensor_Scalar", "aten.sum.dim_IntList",
                        "aten.sqrt.default"}, calls
    assert _kernels() >= 2


def test_view_keeps_its_buffer_alive(target):
    """The kernel result view_as_complex views must outlive the kernel `k` between the view
    and the view's last reader: ember-buffer-reuse would otherwise put `k`'s result in its
    bytes (the view is the buffer's only direct use)."""
    def fn(x):
        z = torch.view_as_complex((x * 3).reshape(4, 6, 2))
        k = torch.view_as_real(torch.fft.fft(z)).pow(2).sum(-1)
        return z * k
    _check(fn, (_rand(4, 12),), target)


def test_complex_pointwise(target):
    a, b = _rand(4, 8, dtype=torch.complex64), _rand(4, 8, dtype=torch.complex64) * 0.5

    def fn(a, b):
        m = a * b + 1j
        return m, m.abs() * 2, torch.angle(m) - 1
    _check(fn, (a, b), target)


def test_complex_mul_abs_backward(target):
    a = _rand(3, 5, dtype=torch.complex64, grad=True)
    b = _rand(3, 5, dtype=torch.complex64, grad=True)
    _check(lambda a, b: (a * b.conj()).abs() + torch.angle(a), (a, b), target, grad=True)


@pytest.mark.targets("cpu")
def test_complex_and_polar_from_real(target):
    r, t = _rand(6).abs().requires_grad_(True), _rand(6, grad=True)
    _check(lambda r, t: torch.view_as_real(torch.polar(r, t) * torch.complex(t, r)).sum(-1),
           (r, t), target, grad=True)
    _check(lambda x: x.to(torch.complex128) * 2, (_rand(5),), target)


@pytest.mark.targets("cpu")
def test_eig(target):
    x = _rand(5, 5)
    ref = torch.linalg.eigvals(x)
    out = ember_compile(lambda x: torch.linalg.eigvals(x * 1), target)(x)
    check_fallbacks()
    # the same LAPACK call on the same matrix: the same eigenvalues in the same order
    _close(out, ref)
    assert "aten.linalg_eig.default" in _library_calls()


@pytest.mark.targets("cpu")
def test_dynamic_shapes_one_compile(target):
    fn = lambda x: torch.fft.rfft(x * 2).abs() + 1  # noqa: E731
    compiled = ember_compile(fn, target, dynamic=True)
    for n in (8, 12, 16):
        x = _rand(3, n)
        _close(compiled(x), fn(x))
    check_fallbacks()
    reports = _reports()
    assert len(reports) == 1 and reports[0].get("symbolic"), reports


@pytest.mark.targets("cpu")
def test_symbolic_complex_view_compiles_per_shape_with_one_warning(target):
    """What stays unsupported: a view of a complex tensor whose sizes are symbolic (its size
    arguments cannot be a library call's attributes). The graph is compiled once per input
    shape, with one warning; nothing runs eagerly and the values match."""
    fn = lambda z: (z * 2).reshape(-1) + 1  # noqa: E731
    compiled = ember_compile(fn, target, dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (4, 6, 8):
            z = _rand(3, n, dtype=torch.complex64)
            _close(compiled(z), fn(z))
    ours = [str(w.message) for w in caught if str(w.message).startswith("ember:")]
    assert len(ours) == 1 and "compiled for each input shape" in ours[0], ours
    assert check_fallbacks() == []
    assert len(_reports()) == 3


@pytest.mark.targets("cpu")
def test_fft_of_empty_raises_as_eager(target):
    """MKL/pocketfft reject an empty transform: the call is kept (not folded to an empty
    result by fold_zero_size), with its readers as calls too (no kernel reads an empty
    tensor), so the compiled program raises eager's error instead of returning a tensor."""
    fn = lambda x: torch.fft.rfft(x, 10, 1).abs() * 2  # noqa: E731
    x = torch.randn(0, 6, 7)
    with pytest.raises(RuntimeError) as eager:
        fn(x)
    with pytest.raises(RuntimeError) as ours, warnings.catch_warnings():
        warnings.simplefilter("error")      # no fallback warning either
        ember_compile(fn, target)(x)
    assert str(ours.value) == str(eager.value)
    check_fallbacks()


class _FNetBlock(torch.nn.Module):
    """FNet's token mixing (the real part of a 2-d FFT) between layer norms and an MLP."""

    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(),
                                      torch.nn.Linear(2 * d, d))

    def forward(self, x):
        x = self.ln1(x + torch.fft.fft(torch.fft.fft(x, dim=-1), dim=-2).real)
        return self.ln2(x + self.ff(x))


def test_fnet_block_training(target):
    torch.manual_seed(0)
    model, ours = _FNetBlock(16), _FNetBlock(16)
    ours.load_state_dict(model.state_dict())
    x = _rand(2, 8, 16, grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    g = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
    ref = model(x)
    out = ember_compile(ours, target)(x2)
    _close(out, ref)
    (ref * g).sum().backward()
    (out * g).sum().backward()
    _close(x2.grad, x.grad)
    for (name, p), q in zip(model.named_parameters(), ours.parameters()):
        assert_close(q.grad, p.grad, what=name)
    check_fallbacks()
    calls = [c for r in _reports() for c in r.get("library_calls", [])]
    assert calls.count("aten._fft_c2c.default") >= 3, calls      # forward and backward
