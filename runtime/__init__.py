"""Runtime: builds and caches generated code, runs a Program's steps. Knows nothing of MLIR or
of ember's passes (see docs/internals.md)."""
from .cache import ArtifactCache
from .cpp_build import BuildError, vectorization_report
from .env import RuntimeEnv, get_env, read_env
from .executor import CompiledProgram, load
from .program import Program, Step, ValueInfo

__all__ = ["ArtifactCache", "BuildError", "CompiledProgram", "Program", "RuntimeEnv", "Step",
           "ValueInfo", "get_env", "load", "read_env", "vectorization_report"]
