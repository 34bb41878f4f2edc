"""What every ember pass is: a frozen dataclass whose fields are its options.

`ember-fuse{max-group-size=8}` builds `EmberFuse(max_group_size=8)`: option names are the field
names with '-' for '_', values are parsed by the field's type and checked against the range or
choices the field declares with `option(...)` (an int option without a declared range must be
in [0, 2**31 - 1]). A pass reports a user-facing problem by raising `PassError(message,
location)`; the pass manager glue turns it into a located diagnostic (`file:line:col: error:
...`) and a pass failure, never a traceback. Inputs a pass does not handle (dynamic shapes,
scalar kernel arguments; see `Pass.dynamic_shapes`) are rejected before it runs, with the
location of the first offending op.
"""
import dataclasses
from typing import Any, ClassVar

from torch_mlir import ir

from ..dialects.contract import ContractError, verify as verify_contract_of
from .errors import OptionError, PassError, Reported  # noqa: F401  (the passes' API)
from .input_checks import unsupported_input
from .ir_queries import attribute_memo


# ember-opt --show-traceback sets this: pass bugs then propagate with their traceback.
reraise_internal_errors = False


INT_MAX = 2**31 - 1


def option(default: Any, *, min: int | None = None, max: int | None = None,
           choices: tuple[str, ...] | None = None) -> Any:
    """A pass option field with its valid values (checked by `Pass.from_options`)."""
    return dataclasses.field(default=default,
                             metadata={"min": min, "max": max, "choices": choices})


def _check_value(field: dataclasses.Field, value, flag: str, option_name: str) -> None:
    meta = field.metadata
    if isinstance(value, bool) or not isinstance(value, int):
        choices = meta.get("choices")
        if choices is not None and value not in choices:
            raise OptionError(f"{flag}: option '{option_name}' must be one of "
                              f"{', '.join(choices)}; got '{value}'")
        return
    lo = meta.get("min")
    hi = meta.get("max")
    lo = 0 if lo is None else lo
    hi = INT_MAX if hi is None else hi
    if not lo <= value <= hi:
        raise OptionError(f"{flag}: option '{option_name}' must be an integer in "
                          f"[{lo}, {hi}]; got {value}")


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
    # What the pass handles; anything else is refused before run() with a located error.
    dynamic_shapes: ClassVar[bool] = False      # tensors with '?' dims anywhere in the module
    scalar_kernel_args: ClassVar[bool] = True   # ember kernels taking non-tensor arguments

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
            kwargs[field.name] = value = _parse_value(field.type, text, cls.name, key)
            _check_value(field, value, cls.name, key)
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

    def as_callable(self, verify_contract: bool = True):
        """The (op, pass_) callable that `PassManager.add` runs; with `verify_contract`, the
        IR it leaves is checked against ember's stage contract (dialects/contract.py), so a
        pass that breaks it fails at once, at the op's location."""

        def run(op, pass_):
            try:
                problem = unsupported_input(op, self)
                if problem is not None:
                    raise problem
                with attribute_memo():      # one context throughout the pass
                    self.run(op)
                if verify_contract:
                    try:
                        verify_contract_of(op, after=self.name)
                    except ContractError:
                        raise Reported() from None
            except PassError as err:
                if not isinstance(err, Reported):
                    (err.location or op.location).emit_error(str(err))
                pass_.signal_pass_failure()
            except RecursionError:
                op.location.emit_error(f"{self.name}: the IR is nested too deeply for this pass")
                pass_.signal_pass_failure()
            except Exception as err:  # an ember bug: still one located line, not a traceback
                if reraise_internal_errors:
                    raise
                # Exceptions raised inside IR walk callbacks arrive wrapped, with the inner
                # traceback in the message: keep its last line only.
                lines = str(err).strip().splitlines()
                op.location.emit_error(
                    f"{self.name}: cannot process this IR ({lines[-1] if lines else type(err).__name__}); "
                    f"this is an ember bug, please report it with the input")
                pass_.signal_pass_failure()

        run.__name__ = type(self).__name__
        return run
