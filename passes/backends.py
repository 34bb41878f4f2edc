"""ember's code generators, one `Backend` record each, and the one map from what a user asks
for (`Target`) to the generator that serves it.

Three vocabularies meet here and nowhere else:

* `Target` (`torch.compile(options={"target": ...})`, `EMBER_TARGET`): auto | cpu | cuda |
  rocm | triton, where the device is meant; "auto" is resolved from the inputs' devices by
  the frontend (frontend/options.py `resolve_target`).
* `Backend.name`: the code generator, cpu | triton; ember-fuse's `target` option (whose
  legality limits apply), the module's `ember.target` and `Program.target`.
* `Backend.lang`: the language of the generated sources, cpp | python (`Program.lang`: how
  the runtime builds them).

A backend's `limits` are what its lowering needs of a kernel schedule beyond what
`kernel_schedule` already guarantees; fusion legality asks the record, so it never imports a
lowering. Adding a code generator: one record here, plus its lowering pass (docs/adding.md).
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Callable


class Target(enum.StrEnum):
    """What the user asks to compile for."""

    AUTO = "auto"       # cuda / rocm when the inputs live on a GPU, else cpu
    CPU = "cpu"
    CUDA = "cuda"
    ROCM = "rocm"
    TRITON = "triton"   # the Triton code path on any device (CPU: TRITON_INTERPRET=1)


def _no_limits(schedule) -> None:
    return None


def _one_reduced_space(s) -> None:
    """Triton: every reduction of a kernel reduces the same dims, because one program tiles
    one [XBLOCK, RBLOCK] space."""
    if s.kind != "reduction":
        return
    from .kernel_schedule import TARGET_LIMIT, Unschedulable   # (MLIR: not on a warm start)
    rdims = {g for g in s.reductions[0].reduced if not s.unit(g)}
    for r in s.reductions[1:]:
        if {g for g in r.reduced if not s.unit(g)} != rdims:
            raise Unschedulable("reductions over different dims in one kernel", r.op.location,
                               TARGET_LIMIT)


@dataclasses.dataclass(frozen=True)
class Backend:
    """One code generator."""

    name: str                       # ember-fuse{target=NAME}, `ember.target`, Program.target
    lowering: str                   # the flag of its lowering pass
    lang: str                       # Program.lang: "cpp" (built by a C++ compiler), "python"
    source_file: str                # the name its sources get in a debug dump
    # Raises Unschedulable when the lowering cannot handle a schedule kernel_schedule accepts.
    limits: Callable[[object], None] = _no_limits

    def __str__(self) -> str:
        return self.name


CPP = Backend("cpu", "ember-lower-to-cpp", "cpp", "kernels.cpp")
TRITON = Backend("triton", "ember-lower-to-triton", "python", "kernels.py", _one_reduced_space)

BACKENDS: dict[str, Backend] = {b.name: b for b in (CPP, TRITON)}

# Which generator serves each concrete target (Target.AUTO is resolved first).
_FOR_TARGET = {Target.CPU: CPP, Target.CUDA: TRITON, Target.ROCM: TRITON, Target.TRITON: TRITON}


def backend_for(target: "Target | str") -> Backend:
    """The code generator of a concrete target (cpu, cuda, rocm, triton)."""
    t = Target(target)
    if t not in _FOR_TARGET:
        raise ValueError(f"target '{t}' must be resolved to a device first")
    return _FOR_TARGET[t]


def backend_named(name: str) -> Backend:
    """The backend whose `name` is `name` (an `ember.target` value, a `target` option)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown code generator '{name}' (one of {', '.join(BACKENDS)})")
    return BACKENDS[name]
