"""Every option of every registered pass is validated: its type, and its declared range or
choices (passes/base.py `option`); the error names the pass, the option and what is valid."""
import pytest

from ember.passes.base import OptionError
from ember.passes.registry import all_passes

OPTIONS = [(flag, opt, field) for flag, cls in sorted(all_passes().items())
           for opt, field in cls.options().items()]


@pytest.mark.parametrize("flag,opt,field", OPTIONS, ids=[f"{f}:{o}" for f, o, _ in OPTIONS])
def test_option_is_validated(flag, opt, field):
    cls = all_passes()[flag]
    kind = getattr(field.type, "__name__", str(field.type))
    if kind == "int":
        lo, hi = field.metadata.get("min"), field.metadata.get("max")
        assert lo is not None, f"{flag}: int option '{opt}' declares no minimum"
        assert cls.from_options({opt: str(lo)}) is not None
        for bad in (lo - 1, (hi if hi is not None else 2**31 - 1) + 1, -3):
            if bad >= lo and (hi is None or bad <= hi):
                continue
            with pytest.raises(OptionError, match=rf"{flag}: option '{opt}' must be an integer in \["):
                cls.from_options({opt: str(bad)})
        with pytest.raises(OptionError, match=f"option '{opt}' expects an integer"):
            cls.from_options({opt: "1.5"})
    elif kind == "bool":
        assert cls.from_options({opt: "false"}) is not None
        with pytest.raises(OptionError, match=f"option '{opt}' expects true/false"):
            cls.from_options({opt: "maybe"})
    else:
        choices = field.metadata.get("choices")
        assert choices, f"{flag}: string option '{opt}' declares no choices"
        for c in choices:
            assert getattr(cls.from_options({opt: c}), field.name) == c
        with pytest.raises(OptionError, match=f"option '{opt}' must be one of"):
            cls.from_options({opt: "no-such-value"})
