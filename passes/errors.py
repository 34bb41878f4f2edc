"""The errors ember's passes raise, shared by every pass module (nothing here imports a pass).

`PassError(message, location)`: a problem in the input IR that the user must fix; the pass
manager glue (base.Pass.as_callable) turns it into a located diagnostic and a pass failure.
`Reported`: the diagnostic was emitted already; only fail the pass. `OptionError`: a bad pass
option in a pipeline string.
"""
from torch_mlir import ir


class PassError(Exception):
    """A problem in the input IR that the user must fix; `location` names the place."""

    def __init__(self, message: str, location: "ir.Location | None" = None):
        super().__init__(message)
        self.location = location


class Reported(PassError):
    """A problem already emitted as a located diagnostic: only fail the pass."""

    def __init__(self):
        super().__init__("")


class OptionError(ValueError):
    """A bad pass option in a pipeline string."""
