"""`ember-lower-to-cpp`: every ember kernel func gets its C++ source.

Invariant after the pass: every `func.func` carrying `ember.kernel` also carries
`ember.source` (an `extern "C"` function with the C++ kernel ABI of docs/internals.md, Stage 4:
inputs, outputs as `__restrict__` pointers, then `const int64_t* sizes`) and `ember.symbol`
(its name, the func's symbol); the module carries `ember.target = "cpu"` and `ember.prelude`,
so that `prelude + "\\n".join(sources)` is one translation unit. Kernel bodies are kept.
"""
import dataclasses

from torch_mlir import ir

from .backends import CPP
from .base import Pass, PassError, option
from .cpp_emitter import PRELUDE, emit_kernel
from .kernel_schedule import Unschedulable
from .graph_utils import attach_kernel_sources


@dataclasses.dataclass(frozen=True)
class EmberLowerToCpp(Pass):
    """Lowers ember kernels to OpenMP C++ source text (attributes; IR otherwise unchanged)."""

    name = CPP.lowering
    summary = "Attach OpenMP C++ source (ember.source/ember.symbol) to each ember kernel"

    dynamic_shapes = True       # '?' dims are read from the sizes array at run time
    scalar_kernel_args = False

    # Kernels with fewer (static) elements of work than this run on one thread.
    omp_min_elements: int = option(32768, min=0, max=2**62)
    # Emit `#pragma omp simd` on inner loops and simd reductions.
    vectorize: bool = True

    def run(self, module: ir.Operation) -> None:
        def lower(op, name):
            try:
                return emit_kernel(op, name, self.omp_min_elements, self.vectorize)
            except Unschedulable as err:
                raise PassError(f"cannot lower kernel @{name} to C++: {err.reason}",
                                err.location or op.location) from None

        attach_kernel_sources(module, CPP.name, PRELUDE, lower)
