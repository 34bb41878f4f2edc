"""What every ember pass is: a frozen dataclass whose fields are its options.

`ember-fuse{max-group-size=8}` builds `EmberFuse(max_group_size=8)`: option names are the field
names with '-' for '_', values are parsed by the field's type. A pass reports a user-facing
problem by raising `PassError(message, location)`; the pass manager glue turns it into a
located diagnostic (`file:line:col: error: ...`) and a pass failure, never a traceback.
"""
import dataclasses
from typing import ClassVar

from torch_mlir import ir


class PassError(Exception):
    """A problem in the input IR that the user must fix; `location` names the place."""

    def __init__(self, message: str, location: "ir.Location | None" = None):
        super().__init__(message)
        self.location = location


class OptionError(ValueError):
    """A bad pass option in a pipeline string."""


def _parse_value(kind, text: str, flag: str, option: str):
    if kind in (bool, "bool"):
        if text in ("1", "true", "True"):
            return True
        if text in ("0", "false", "False"):
            return False
        raise OptionError(f"{flag}: option '{option}' expects true/false, got '{text}'")
    if kind in (int, "int"):
        try:
            return int(text, 0)
        except ValueError:
            raise OptionError(f"{flag}: option '{option}' expects an integer, got '{text}'") from None
    if kind in (float, "float"):
        try:
            return float(text)
        except ValueError:
            raise OptionError(f"{flag}: option '{option}' expects a number, got '{text}'") from None
    return text


@dataclasses.dataclass(frozen=True)
class Pass:
    """Base of ember's passes. Subclasses set `name` (the flag) and `summary`, and define run()."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def run(self, module: ir.Operation) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def options(cls) -> dict[str, dataclasses.Field]:
        return {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "Pass":
        known = cls.options()
        kwargs = {}
        for key, text in options.items():
            if key not in known:
                names = ", ".join(known) or "none"
                raise OptionError(f"{cls.name}: unknown option '{key}' (options: {names})")
            field = known[key]
            kwargs[field.name] = _parse_value(field.type, text, cls.name, key)
        return cls(**kwargs)

    def spelling(self) -> str:
        """The pipeline spelling of this pass with its options, e.g. `ember-fuse{max-group-size=8}`."""
        opts = []
        for flag, field in self.options().items():
            value = getattr(self, field.name)
            if isinstance(value, bool):
                value = "true" if value else "false"
            opts.append(f"{flag}={value}")
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")

    def as_callable(self):
        """The (op, pass_) callable that `PassManager.add` runs."""

        def run(op, pass_):
            try:
                self.run(op)
            except PassError as err:
                loc = err.location or op.location
                loc.emit_error(str(err))
                pass_.signal_pass_failure()

        run.__name__ = type(self).__name__
        return run
