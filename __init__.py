"""ember: a deep-learning compiler on MLIR, shipped as a `torch.compile` backend.

    torch.compile(model, backend="ember", options={"target": "cpu"})

The backend is registered through the `torch_dynamo_backends` entry point, so no import is
needed for `backend="ember"`. Heavy modules (torch-mlir, the passes) load on first use.
"""
from .frontend.options import CompileOptions, OptionsError

__version__ = "0.1.0"

__all__ = ["CompileOptions", "OptionsError", "__version__", "clear_reports", "ember_backend",
           "last_reports"]


def _ember_backend(gm, example_inputs, options=None, **kwargs):
    """The `torch.compile` backend (see `CompileOptions` for `options`)."""
    from .frontend.backend import ember_backend as backend
    return backend(gm, example_inputs, options, **kwargs)


_ember_backend.__name__ = _ember_backend.__qualname__ = "ember_backend"


def __getattr__(name):
    # `ember.ember_backend`, which the `torch_dynamo_backends` entry point names: looked up by
    # torch.compile(backend="ember") when it is called, before Dynamo traces anything, so
    # Triton's key of itself (read by every first launch of a warm start) starts computing
    # in a thread then (runtime/triton_warm.start_triton_key_early).
    if name == "ember_backend":
        from .runtime.triton_warm import start_triton_key_early
        start_triton_key_early()
        return _ember_backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def last_reports(n=None):
    """The most recent compile reports (dicts, as written to report.json), oldest first."""
    from .frontend.report import last_reports as reports
    return reports(n)


def clear_reports():
    """Forgets the kept compile reports (tests call this between cases)."""
    from .frontend.report import clear_reports as clear
    clear()
