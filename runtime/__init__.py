"""Runtime: builds and caches generated code, runs a Program's steps. Knows nothing of MLIR or
of ember's passes (see docs/internals.md)."""
from .program import Program, Step, ValueInfo

__all__ = ["Program", "Step", "ValueInfo"]
