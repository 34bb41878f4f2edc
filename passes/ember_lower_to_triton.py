"""ember-lower-to-triton: every ember kernel func gets Triton source (docs/internals.md, Stage 4).

Invariant established: each `func.func` carrying `ember.kernel` has `ember.source` (one or more
`@triton.jit` functions plus the launcher `def NAME(*tensors)`) and `ember.symbol = NAME`; the
module has `ember.target = "triton"` and `ember.prelude` (imports and helpers), so that
`prelude + "\\n".join(sources)` is one Python module.

Code shapes (loop structure from kernel_schedule, expressions from kernel_expr's ExprBuilder,
the jit body from triton_writer, block shapes from triton_blocks, text from triton_source):
* pointwise: 1-D tiles over the flattened result space, masked tail;
* reduction: 2-D tiles [XBLOCK, RBLOCK] (x = flattened outer space P, r = reduced space).
  "Persistent" when the reduced extent is static and <= max-rblock: the whole row sits in
  registers, so softmax/layer_norm read their input once and the broadcast consumers reuse it;
  otherwise one loop over r per reduction and one per output with inner dims.
* window: a reduction over a small static strided window (channels-last pooling: the
  contiguous axis is a kept one; triton_blocks.window_rnumel) is 1-D over the outputs like a
  pointwise kernel, the window an unrolled `tl.static_range` folded in window order (general
  bodies too: max_pool2d_with_indices' value and index).
Launchers compute the grid from the tensors at run time; dynamic dims are kernel arguments.
"""
from __future__ import annotations

import dataclasses

from torch_mlir import ir

from .backends import TRITON
from .base import Pass, PassError, option
from .graph_utils import attach_kernel_sources
from .kernel_schedule import Unschedulable, schedule_kernel
from .triton_lang import UnsupportedOp
from .triton_prelude import PRELUDE
from .triton_source import kernel_source, matmul_source
from .triton_writer import KernelWriter
from . import triton_matmul
from ..dialects.contract import KERNEL


@dataclasses.dataclass(frozen=True)
class EmberLowerToTriton(Pass):
    """Attaches Triton source to every ember kernel (see the module docstring)."""

    name = TRITON.lowering
    summary = "Emit Triton @triton.jit kernels plus Python launchers for every ember kernel"

    dynamic_shapes = True
    scalar_kernel_args = False

    max_rblock: int = option(8192, min=1, max=1 << 20)   # Triton's largest block (2^20 elements)
    autotune: bool = True
    # torch.compile(mode="max-autotune"): a wider configuration search per kernel (block sizes,
    # warps); the first configuration, what the interpreter and AOT builds use, is unchanged
    max_autotune: bool = False
    # `matmul` kernels (ember-matmul-template): auto = time the template against the library
    # call + epilogue on the first call on a GPU and keep the faster; or always one of them
    matmul_choice: str = option("auto", choices=triton_matmul.CHOICES)
    # an unrolled window reduction whose body would repeat more loads than this becomes a
    # `tl.range` loop (same order of operations; Triton compiles it in a fraction of the
    # time: triton_writer.KernelWriter); 0: every window unrolled
    max_unrolled_loads: int = option(0, min=0)

    def run(self, module: ir.Operation) -> None:
        with module.context, ir.Location.unknown():
            attach_kernel_sources(module, TRITON.name, PRELUDE + triton_matmul.PRELUDE,
                                  lambda op, name: self.lower(op))

    def lower(self, fn) -> str:
        try:
            if KERNEL.get(fn) == "matmul":
                return matmul_source(fn, self.autotune, self.max_autotune, self.matmul_choice)
            sched = schedule_kernel(fn)
            w = KernelWriter(fn, sched, self.max_rblock, self.autotune, self.max_autotune,
                             self.max_unrolled_loads)
            k = w.pointwise() if sched.kind == "pointwise" else w.reduction()
            return kernel_source(k, sched, w)
        except Unschedulable as err:
            raise PassError(f"ember-lower-to-triton: {err.reason}",
                            err.location or fn.location) from None
        except UnsupportedOp as err:
            raise PassError(f"ember-lower-to-triton: {err}", fn.location) from None
