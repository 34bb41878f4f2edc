"""Where ember's bf16 output departs from eager's, one BERT/GPT-2 piece at a time (GPU).

    python benchmarks/bf16_divergence.py [--model bert|gpt2]

Each piece (embeddings, the first layer's attention / MLP / output blocks, one whole layer,
the whole model) is compiled alone and fed the same bf16 input as eager; printed: the relative
error against eager bf16, against the same piece in fp32 (the precision bf16 can reach), and
eager bf16's own error against fp32, plus the fraction of output elements that differ from eager.
Last, eager alone: how far the whole model's bf16 output moves when 0.1% of the first block's
outputs move by one bf16 ulp (the floor for "error against eager bf16" of anything that is not
bit-identical to eager at every op).

    python benchmarks/bf16_divergence.py --model bert --device cpu --only-floor   # no GPU
"""
from __future__ import annotations

import argparse

import torch


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _first(x):
    if isinstance(x, (tuple, list)):
        return x[0]
    return getattr(x, "last_hidden_state", x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--only-floor", action="store_true", help="eager perturbation floor only")
    args = ap.parse_args(argv)
    import ember  # noqa: F401
    dev = args.device
    torch.manual_seed(0)
    if args.model == "bert":
        from transformers import BertConfig, BertModel
        m32 = BertModel(BertConfig()).eval().to(dev)
        ids = torch.randint(0, 30522, (16, 128), device=dev)
        first = lambda m: m.embeddings
        layer = lambda m: m.encoder.layer[0]
        pieces = {
            "embeddings": (lambda m: m.embeddings, "ids"),
            "layer0.attention": (lambda m: (lambda h: layer(m).attention(h)[0]), "hidden"),
            "layer0.intermediate": (lambda m: layer(m).intermediate, "hidden"),
            "layer0.output": (lambda m: (lambda h: layer(m).output(
                torch.cat([h, h, h, h], -1) * 0.5, h)), "hidden"),
            "layer0": (lambda m: (lambda h: _first(layer(m)(h))), "hidden"),
            "model": (lambda m: m, "ids"),
        }
    else:
        from transformers import GPT2Config, GPT2Model
        m32 = GPT2Model(GPT2Config()).eval().to(dev)
        ids = torch.randint(0, 50257, (8, 256), device=dev)
        first = lambda m: m.h[0]
        block = lambda m: m.h[0]
        pieces = {
            "block0.attn": (lambda m: (lambda h: block(m).attn(block(m).ln_1(h))[0]), "hidden"),
            "block0.mlp": (lambda m: (lambda h: block(m).mlp(block(m).ln_2(h))), "hidden"),
            "block0": (lambda m: (lambda h: _first(block(m)(h))), "hidden"),
            "model": (lambda m: m, "ids"),
        }
    m16 = type(m32)(m32.config).eval().to(dev).to(torch.bfloat16)
    m16.load_state_dict({k: v.to(torch.bfloat16) if v.is_floating_point() else v
                         for k, v in m32.state_dict().items()})
    m32.load_state_dict({k: v.float() if v.is_floating_point() else v
                         for k, v in m16.state_dict().items()})
    hidden16 = torch.randn(ids.shape[0], ids.shape[1], m32.config.hidden_size, device=dev,
                           dtype=torch.bfloat16)
    with torch.no_grad():
        for name, (get, kind) in ([] if args.only_floor else pieces.items()):
            x16 = ids if kind == "ids" else hidden16
            x32 = ids if kind == "ids" else hidden16.float()
            f16, f32 = get(m16), get(m32)
            ref16, ref32 = _first(f16(x16)), _first(f32(x32))
            torch._dynamo.reset()
            out = _first(torch.compile(f16, backend="ember")(x16))
            differ = float((out != ref16).float().mean())
            print(f"{name:22s} vs eager {_rel(out, ref16):.2e}  vs fp32 {_rel(out, ref32):.2e}  "
                  f"eager vs fp32 {_rel(ref16, ref32):.2e}  elements differing {differ:.3f}",
                  flush=True)
        ref = _first(m16(ids))
        g = torch.Generator(device=dev).manual_seed(1)

        def bump(mod, inp, out):
            t = _first(out)
            mask = torch.rand(t.shape, generator=g, device=dev) < 1e-3
            t2 = torch.where(mask, (t.float() * (1 + 2 ** -8)).to(t.dtype), t)
            return t2 if torch.is_tensor(out) else (t2,) + tuple(out[1:])
        hook = first(m16).register_forward_hook(bump)
        moved = _first(m16(ids))
        hook.remove()
        print(f"eager bf16, 0.1% of the first block's outputs moved by 1 ulp: the output moves "
              f"{_rel(moved, ref):.2e}", flush=True)


if __name__ == "__main__":
    main()
