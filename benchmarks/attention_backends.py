"""Gradients of a model's bf16 training step under each SDPA backend, ember against eager
(issue 8: the whisper encoder's q/k gradients were wrong through cuDNN attention).

    python benchmarks/attention_backends.py [MODEL]      # a GPU; MODEL from models.py (whisper_encoder)

For the default choice and for each of flash, memory-efficient, cuDNN and math attention
(`torch.nn.attention.sdpa_kernel` around both eager's and ember's two steps), prints the autograd
attention node eager ran, the loss's relative error, the four worst parameter gradients and
ember's fallback ops.
"""
from __future__ import annotations

import contextlib
import copy
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import rel_err  # noqa: E402
from models import build  # noqa: E402


def _attention_nodes(loss) -> list[str]:
    seen, stack, names = set(), [loss.grad_fn], set()
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        names.add(type(n).__name__)
        stack.extend(f for f, _ in n.next_functions)
    return sorted(x for x in names if "ttention" in x)


def _grads(base, inputs, loss_fn, compiled: bool):
    import ember  # noqa: F401  (registers the backend)
    torch._dynamo.reset()
    m = copy.deepcopy(base).train()
    f = torch.compile(m, backend="ember") if compiled else m
    for _ in range(2):
        m.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(f(*inputs))
        nodes = _attention_nodes(loss)
        loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}
    return loss.detach().float(), grads, nodes


def main() -> None:
    import ember
    from torch.nn.attention import SDPBackend, sdpa_kernel
    name = sys.argv[1] if len(sys.argv) > 1 else "whisper_encoder"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    base, inputs, loss_fn = build(name, "cuda", False, False)
    for label in ("default", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        ctx = (contextlib.nullcontext() if label == "default"
               else sdpa_kernel(getattr(SDPBackend, label)))
        t = time.time()
        with ctx:
            ref_loss, ref, nodes = _grads(base, inputs, loss_fn, False)
            loss, got, _ = _grads(base, inputs, loss_fn, True)
        worst = sorted(((rel_err(got[n], ref[n]), n) for n in ref if ref[n].norm() > 0),
                       reverse=True)[:4]
        print(f"{label}: eager ran {nodes}; loss err {rel_err(loss, ref_loss):.2e}; worst "
              + ", ".join(f"{n} {e:.2e}" for e, n in worst) + f" ({time.time() - t:.0f} s)")
        print("  fallback ops:", [r.get("eager_fallback_ops") for r in ember.last_reports()])


if __name__ == "__main__":
    main()
