"""The one map from pass flag to pass class. A test asserts each flag has a lit test file."""
from .base import Pass

_PASSES: dict[str, type[Pass]] = {}


def register(cls: type[Pass]) -> type[Pass]:
    if not cls.name or cls.name in _PASSES:
        raise ValueError(f"pass flag '{cls.name}' is empty or registered twice")
    _PASSES[cls.name] = cls
    return cls


def _load_builtin() -> None:
    # Importing a pass module registers it; kept here so that `registry` is the single entry.
    # The lowerings only print source text, so none of them needs triton or a compiler here.
    from . import ember_buffer_reuse, ember_fuse, ember_lower_to_cpp, ember_lower_to_triton  # noqa: F401


def all_passes() -> dict[str, type[Pass]]:
    if not _PASSES:
        _load_builtin()
    return dict(sorted(_PASSES.items()))


def lookup(flag: str) -> "type[Pass] | None":
    return all_passes().get(flag)
