"""Model builders shared by the benchmarks (`python -m ember.benchmarks`, model_zoo.py).

`build(name, device, small, tiny)` returns `(model, inputs, loss)`: an fp32 `nn.Module` with
random weights (nothing is downloaded), its input tuple and `output -> scalar tensor` for a
training step. Three models need only torch (`mlp`, `transformer_block`, `cnn`); the torchvision
ones come through `common.import_torchvision()` and the transformers ones need that package; a
missing package raises ImportError, which the callers report as a skipped model.

Sizes: the default is the GPU machine's (the figures in docs/design.md and issue 12: resnet18
batch 32 at 224, BERT-base 16x128, GPT-2 small 8x256, the MLP block on 64x128 tokens);
`small` is for the 2-core CPU machine, `tiny` the Triton interpreter's.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from .common import import_torchvision
except ImportError:         # run as a script from benchmarks/ (model_zoo.py, gpu_bench.py)
    from common import import_torchvision

TORCH_ONLY = ("mlp", "transformer_block", "cnn")
TORCHVISION = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "regnet_y_400mf",
               "swin_t", "densenet121")
TRANSFORMERS = ("bert", "gpt2", "distilbert", "llama", "whisper_encoder")
# built without torchvision from resnet.py / efficientnet.py where torchvision is missing
PLAIN_TORCH = ("resnet18", "resnet50", "efficientnet_b0")
ALL = TORCH_ONLY + TORCHVISION + TRANSFORMERS

# Text models' (batch, sequence) at full size where it is not model_zoo's (8, 128): the shapes of
# the reference tables (docs/design.md, issue 12).
FULL_TEXT_SHAPE = {"bert": (16, 128), "gpt2": (8, 256)}


class MLPBlock(nn.Module):
    """Linear(d, h) - GELU - Linear(h, d) - LayerNorm(d): the MLP block of the reference tables
    (1024 -> 4096 -> 1024)."""

    def __init__(self, d=1024, h=4096):
        super().__init__()
        self.fc1, self.fc2, self.norm = nn.Linear(d, h), nn.Linear(h, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(self.fc2(F.gelu(self.fc1(x))))


class SmallCNN(nn.Module):
    """conv-BN-ReLU stem, two residual blocks (one strided), global pooling and a classifier:
    the shape of a ResNet, small enough for the CPU machine."""

    def __init__(self, width=32, classes=10):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                                  nn.ReLU())
        self.block1 = nn.Sequential(nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                                    nn.ReLU(), nn.Conv2d(w, w, 3, padding=1, bias=False),
                                    nn.BatchNorm2d(w))
        self.block2 = nn.Sequential(nn.Conv2d(w, 2 * w, 3, stride=2, padding=1, bias=False),
                                    nn.BatchNorm2d(2 * w), nn.ReLU(),
                                    nn.Conv2d(2 * w, 2 * w, 3, padding=1, bias=False),
                                    nn.BatchNorm2d(2 * w))
        self.down = nn.Sequential(nn.Conv2d(w, 2 * w, 1, stride=2, bias=False),
                                  nn.BatchNorm2d(2 * w))
        self.fc = nn.Linear(2 * w, classes)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.block1(x))
        x = F.relu(self.down(x) + self.block2(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class TransformerBlock(nn.Module):
    """A pre-norm decoder block as GPT-2 writes it: LayerNorm, fused QKV projection, causal
    scaled-dot-product attention, output projection, residual; LayerNorm, MLP (GELU), residual.
    (torch's nn.TransformerEncoderLayer runs one fused op, _transformer_encoder_layer_fwd, in
    inference, which no compiler sees inside.)"""

    def __init__(self, d=768, heads=12, ff=3072):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _at_least_fp32(out):
    """bf16 outputs in float32; a float64 step's (the zoo's reference) stays float64."""
    return out.to(torch.promote_types(out.dtype, torch.float32))


def _mean_square(out):
    return _at_least_fp32(out).square().mean()


def _half_mean_square(out):
    """The training loss of a model that ends in a LayerNorm: over every other feature. Over all
    of them the mean square of a freshly initialised LayerNorm's output is 1 whatever its input,
    so every gradient before it would be rounding noise (relative errors above 1 between two
    correct runs)."""
    return _at_least_fp32(out)[..., ::2].square().mean()


def _torch_only(name, small, tiny, g):
    if name == "mlp":
        d, h, rows = (64, 256, 16) if tiny else (256, 1024, 256) if small else (1024, 4096, None)
        model = MLPBlock(d, h)
        x = torch.randn(rows, d, generator=g) if rows else torch.randn(64, 128, d, generator=g)
        return model, (x,)
    if name == "transformer_block":
        d, heads, ff, batch, seq = ((32, 2, 64, 1, 8) if tiny else (128, 4, 512, 4, 32) if small
                                    else (768, 12, 3072, 16, 128))
        model = TransformerBlock(d, heads, ff)
        return model, (torch.randn(batch, seq, d, generator=g),)
    width, batch, res = (8, 2, 16) if tiny else (16, 4, 32) if small else (64, 32, 128)
    return SmallCNN(width), (torch.randn(batch, 3, res, res, generator=g),)


def _torchvision_model(name: str):
    """torchvision's model builder; without torchvision, resnet.py's ResNets and
    efficientnet.py's EfficientNet-B0."""
    try:
        return getattr(import_torchvision().models, name)
    except ImportError:
        if name not in PLAIN_TORCH:
            raise
    try:
        from . import efficientnet, resnet
    except ImportError:
        import efficientnet
        import resnet
    return getattr(resnet if name.startswith("resnet") else efficientnet, name)


def build(name: str, device: str, small: bool = False, tiny: bool = False,
          text_shape: tuple[int, int] | None = None):
    """(model, inputs tuple, output -> tensor used as the training loss). `tiny`: the smallest
    sizes (the Triton interpreter; vision models batch 4 at 32x32, for BatchNorm).
    `text_shape`: (batch, sequence) of a transformers model, instead of the size's default."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)        # the weights: the same model in every process
    if name in TORCH_ONLY:
        model, inputs = _torch_only(name, small, tiny, g)
        loss = _half_mean_square if name == "mlp" else _mean_square
        return model.to(device), tuple(t.to(device) for t in inputs), loss
    if name in TORCHVISION:
        # BatchNorm over batch x the last stage's spatial size (stride 32): at 2x32 it saw 2
        # values a channel, whose normalized output is +-1 whatever they are (every gradient
        # before it zero but for eps); 4x32 gives 4, 2x64 8, 32x224 1568
        batch, res = (4, 32) if tiny else (2, 64) if small else (32, 224)
        model = _torchvision_model(name)(num_classes=10 if tiny else 1000)
        x = torch.randn(batch, 3, res, res, generator=g)
        return model.to(device), (x.to(device),), _mean_square
    if name not in TRANSFORMERS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(ALL)}")
    try:
        import_torchvision()    # transformers imports torchvision where it is installed
    except ImportError:
        pass
    import transformers as tf
    batch, seq = (1, 8) if tiny else (2, 32) if small else (8, 128)
    if text_shape:
        batch, seq = text_shape
    small = small or tiny
    if name == "bert":
        cfg = tf.BertConfig(attn_implementation="sdpa", hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
        if small:
            cfg.num_hidden_layers = 2
        model, vocab = tf.BertModel(cfg), cfg.vocab_size
    elif name == "distilbert":
        cfg = tf.DistilBertConfig(dropout=0.0, attention_dropout=0.0)
        if small:
            cfg.n_layers = 2
        model, vocab = tf.DistilBertModel(cfg), cfg.vocab_size
    elif name == "gpt2":
        cfg = tf.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
        if small:
            cfg.n_layer = 2
        model, vocab = tf.GPT2Model(cfg), cfg.vocab_size
    elif name == "llama":
        cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1376,
                             num_hidden_layers=2 if small else 4, num_attention_heads=8,
                             num_key_value_heads=2, max_position_embeddings=1024,
                             use_cache=False)
        model, vocab = tf.LlamaForCausalLM(cfg), cfg.vocab_size
    else:   # whisper_encoder
        cfg = tf.WhisperConfig.from_dict(dict(
            d_model=384, encoder_layers=4, encoder_attention_heads=6, decoder_layers=4,
            decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536,
            num_mel_bins=80, max_source_positions=1500, dropout=0.0))
        model = tf.WhisperModel(cfg).get_encoder()
        frames = 3000
        if tiny:    # fewer positions: the encoder slices its position table to the length
            cfg.max_source_positions, frames = 16, 32
            model = tf.WhisperModel(cfg).get_encoder()
        x = torch.randn(batch if not (small or tiny) else 1, 80, frames, generator=g)
        return model.to(device), (x.to(device),), lambda out: _half_mean_square(
            out.last_hidden_state)
    if tiny:    # the same layers with a small vocabulary (the optimizer step over the embeddings)
        vocab = cfg.vocab_size = 512
        model = type(model)(cfg)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)

    def loss(out):
        if hasattr(out, "logits"):
            return _mean_square(out.logits)
        return _half_mean_square(out.last_hidden_state)     # after the final LayerNorm
    return model.to(device), (ids.to(device),), loss


def label(name: str, inputs) -> str:
    """The model and its input shape as the tables show them: `bert (16x128)`, `resnet18 (32)`,
    `mlp (64x128)` (tokens)."""
    x = inputs[0]
    if name == "mlp":
        dims = x.shape[:-1]
    elif name == "transformer_block" or not x.is_floating_point():
        dims = x.shape[:2]      # batch x sequence
    else:
        dims = x.shape[:1]      # images: the batch
    return f"{name} ({'x'.join(str(d) for d in dims)})"


def available(name: str) -> str | None:
    """None when `name` can be built here, else why not (the package that is missing)."""
    import importlib.util
    if name in TORCH_ONLY:
        return None
    if name in TORCHVISION:
        return None if importlib.util.find_spec("torchvision") or name in PLAIN_TORCH \
            else "torchvision is not installed"
    if name in TRANSFORMERS:
        return None if importlib.util.find_spec("transformers") else \
            "transformers is not installed"
    return f"unknown model {name!r}"
