"""One training step (forward + backward) of torchvision resnet18 and transformers BERT-base
(built from its config, random weights) through ember on a GPU, compared with eager.

    python benchmarks/gpu_train_check.py --out train.json

Prints, per model: relative error of the loss, the worst relative error over all parameter
gradients (||g - g_eager|| / ||g_eager||, skipping gradients that are zero in exact arithmetic,
whose eager norm is below 1e-6 of the largest), compile seconds, and which ops ran eagerly.
"""
from __future__ import annotations

import argparse
import copy
import json
import time

import torch


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _step(model, run, make_inputs, loss_fn):
    """`run` is `model` or its compiled wrapper; gradients are read off `model` itself (the
    wrapper's parameter names carry an `_orig_mod.` prefix)."""
    model.zero_grad(set_to_none=True)
    out = run(*make_inputs())
    loss = loss_fn(out)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()
                           if p.grad is not None}


def check(name, model, make_inputs, loss_fn, results):
    import ember
    ember.clear_reports()
    ref_model = copy.deepcopy(model)
    torch.manual_seed(0)
    ref_loss, ref_grads = _step(ref_model, ref_model, make_inputs, loss_fn)
    compiled = torch.compile(model, backend="ember")
    t0 = time.perf_counter()
    torch.manual_seed(0)
    loss, grads = _step(model, compiled, make_inputs, loss_fn)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    biggest = max(g.double().norm().item() for g in ref_grads.values())
    errs = {n: (_rel(grads[n], g) if n in grads else float("inf"))
            for n, g in ref_grads.items() if g.double().norm().item() > 1e-6 * biggest}
    worst = max(errs, key=errs.get)
    reports = ember.last_reports()
    fallback = sorted({op for r in reports for op in r.get("eager_fallback_ops", [])})
    library = sorted({op for r in reports for op in r.get("library_calls", [])})
    missing = sorted(n for n in ref_grads if n not in grads)
    row = {"model": name, "missing_grads": missing, "loss_rel_err": _rel(loss, ref_loss), "worst_grad_rel_err": errs[worst],
           "worst_grad": worst, "grads_checked": len(errs), "first_step_s": round(first, 2),
           "kernels": sum(r.get("num_kernels", 0) for r in reports),
           "eager_fallback_ops": fallback, "library_calls": library}
    print(json.dumps(row), flush=True)
    results.append(row)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (default: off)")
    args = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    dev = "cuda"
    results = []

    import torchvision
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18().to(dev).train()
    images = torch.randn(8, 3, 224, 224, device=dev)
    labels = torch.randint(0, 1000, (8,), device=dev)
    check("resnet18", resnet, lambda: (images,),
          lambda out: torch.nn.functional.cross_entropy(out, labels), results)

    from transformers import BertConfig, BertModel
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = BertConfig(attn_implementation="eager", hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    bert = BertModel(cfg).to(dev).train()
    ids = torch.randint(0, cfg.vocab_size, (16, 128), device=dev)
    # A fixed random projection: the square of a LayerNorm output has (near) zero gradient.
    proj = torch.randn(16, 128, cfg.hidden_size, device=dev)
    check("bert-base", bert, lambda: (ids,),
          lambda out: (out.last_hidden_state * proj).sum(), results)

    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
