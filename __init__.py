"""ember: a deep-learning compiler on MLIR, shipped as a `torch.compile` backend.

    torch.compile(model, backend="ember", options={"target": "cpu"})

The backend is registered through the `torch_dynamo_backends` entry point, so no import is
needed for `backend="ember"`. Heavy modules (torch-mlir, the passes) load on first use.
"""
from .frontend.options import CompileOptions, OptionsError

__version__ = "0.1.0"

__all__ = ["CompileOptions", "OptionsError", "__version__", "clear_reports", "ember_backend",
           "last_reports"]


def ember_backend(gm, example_inputs, options=None, **kwargs):
    """The `torch.compile` backend (see `CompileOptions` for `options`)."""
    from .frontend.backend import ember_backend as backend
    return backend(gm, example_inputs, options, **kwargs)


def last_reports(n=None):
    """The most recent compile reports (dicts, as written to report.json), oldest first."""
    from .frontend.report import last_reports as reports
    return reports(n)


def clear_reports():
    """Forgets the kept compile reports (tests call this between cases)."""
    from .frontend.report import clear_reports as clear
    clear()
