"""End-to-end models through torch.compile(backend="ember"): forward against eager, and one SGD
training step whose updated parameters must match eager's."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import assert_close, check_fallbacks, ember_compile


class MLPBlock(nn.Module):
    def __init__(self, d=1024, h=4096):
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(d, h), nn.Linear(h, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(self.fc2(F.gelu(self.fc1(x))))


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock, with a strided 1x1 downsample when shapes change."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class EncoderLayer(nn.Module):
    """Post-LN transformer encoder layer in plain torch: attention with an explicit softmax."""

    def __init__(self, d=64, heads=4, hidden=128):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        att = torch.softmax((q @ k.transpose(-2, -1)) * hd ** -0.5, dim=-1)
        x = self.ln1(x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


def _randn(shape, device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


def _build(name, device, interpreted):
    torch.manual_seed(0)
    if name == "mlp_block":
        return MLPBlock(), _randn((4 if interpreted else 16, 1024), device)
    if name == "resnet_block":
        return BasicBlock(8, 16, stride=2), _randn((2, 8, 8 if interpreted else 16,
                                                    8 if interpreted else 16), device)
    if name == "resnet_block_identity":
        return BasicBlock(16, 16), _randn((2, 16, 8, 8), device)
    if name == "encoder_layer":
        return EncoderLayer(), _randn((2, 8 if interpreted else 16, 64), device)
    raise KeyError(name)


def _randomize_bn(model):
    """Non-trivial running stats and affine params so eval-mode BatchNorm is really checked."""
    g = torch.Generator().manual_seed(3)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                for t in (m.running_mean, m.weight, m.bias):
                    t.copy_(torch.randn(t.shape, generator=g) * 0.5)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


MODELS = ["mlp_block", "resnet_block", "resnet_block_identity", "encoder_layer"]


@pytest.mark.parametrize("name", MODELS)
def test_forward_fp32(name, target, device, interpreted):
    model, x = _build(name, device, interpreted)
    _randomize_bn(model)
    model = model.to(device).eval()
    with torch.no_grad():
        ref = model(x)
        out = ember_compile(model, target)(x)
    assert_close(out, ref, matmul=True)
    check_fallbacks()


@pytest.mark.targets("cpu", "cuda")
@pytest.mark.parametrize("name", ["mlp_block", "encoder_layer"])
def test_forward_bf16(name, target, device, interpreted):
    model, x = _build(name, device, interpreted)
    model = model.to(device=device, dtype=torch.bfloat16).eval()
    x = x.to(torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        out = ember_compile(model, target)(x)
    assert_close(out, ref)
    check_fallbacks()


@pytest.mark.parametrize("name", ["mlp_block", "resnet_block", "encoder_layer"])
def test_sgd_step(name, target, device, interpreted):
    """One training step: compiled forward + loss, backward, SGD update; parameters, BatchNorm
    running stats and the loss must match eager's."""
    model, x = _build(name, device, interpreted)
    model = model.to(device).train()
    ref_model = copy.deepcopy(model)
    with torch.no_grad():
        y = _randn(model(x).shape, device, seed=9)
    model.load_state_dict(ref_model.state_dict())  # undo the BatchNorm stats update above

    def loss_fn(m, inp, tgt):
        return F.mse_loss(m(inp), tgt)

    def step(m, fn):
        opt = torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.0)
        opt.zero_grad()
        loss = fn(m, x, y)
        loss.backward()
        opt.step()
        return loss.detach()

    ref_loss = step(ref_model, loss_fn)
    loss = step(model, ember_compile(loss_fn, target))
    assert_close(loss, ref_loss, matmul=True, what="loss")
    changed = 0
    for (n, p), (_, rp), p0 in zip(model.named_parameters(), ref_model.named_parameters(),
                                   _build(name, device, interpreted)[0].to(device).parameters()):
        assert_close(p.detach(), rp.detach(), matmul=True, what=f"updated {n}")
        changed += int(not torch.equal(rp.detach().cpu(), p0.detach().cpu()))
    assert changed > 0, "the SGD step changed no parameter: the test checks nothing"
    for (n, b), (_, rb) in zip(model.named_buffers(), ref_model.named_buffers()):
        assert_close(b, rb, matmul=True, what=f"buffer {n}")
    check_fallbacks()
