"""The one map from pass flag to pass class. A test asserts each flag has a lit test file.

Pass modules do not register themselves (they would import this module, which imports them):
the list below is the registry. Adding a pass: its module, one line here (docs/adding.md).
"""
from .base import Pass

_PASSES: dict[str, type[Pass]] = {}


def _load_builtin() -> dict[str, type[Pass]]:
    # The lowerings only print source text, so none of them needs a compiler here.
    from .ember_buffer_reuse import EmberBufferReuse
    from .ember_channels_last import EmberChannelsLast
    from .ember_convert_externs import EmberConvertExterns
    from .ember_fuse import EmberFuse
    from .ember_library_views import EmberLibraryViews
    from .ember_lower_to_cpp import EmberLowerToCpp
    from .ember_lower_to_triton import EmberLowerToTriton
    from .ember_matmul_template import EmberMatmulTemplate
    from .ember_shifted_variance import EmberShiftedVariance
    from .ember_split_reductions import EmberSplitReductions
    passes = {}
    for cls in (EmberLibraryViews, EmberConvertExterns, EmberChannelsLast, EmberFuse, EmberBufferReuse,
                EmberLowerToCpp, EmberLowerToTriton, EmberMatmulTemplate, EmberSplitReductions,
                EmberShiftedVariance):
        if not cls.name or cls.name in passes:
            raise ValueError(f"pass flag '{cls.name}' is empty or registered twice")
        passes[cls.name] = cls
    return passes


def all_passes() -> dict[str, type[Pass]]:
    if not _PASSES:
        _PASSES.update(_load_builtin())
    return dict(sorted(_PASSES.items()))


def lookup(flag: str) -> "type[Pass] | None":
    return all_passes().get(flag)
