"""Every registered pass is pinned by a lit test named after its flag (docs/design.md)."""
import dataclasses
from pathlib import Path

import pytest

from ember.passes.base import Pass
from ember.passes.registry import all_passes

TEST_ROOT = Path(__file__).resolve().parents[1]
PASSES = all_passes()


def test_some_passes_are_registered():
    assert "ember-buffer-reuse" in PASSES


@pytest.mark.parametrize("flag", sorted(PASSES))
def test_pass_has_lit_test(flag):
    path = TEST_ROOT / "passes" / f"{flag}.mlir"
    assert path.is_file(), f"pass '{flag}' has no lit test {path.relative_to(TEST_ROOT.parent)}"
    text = path.read_text()
    assert "RUN:" in text and flag in text, f"{path.name} has no RUN line that runs {flag}"


@pytest.mark.parametrize("flag", sorted(PASSES))
def test_pass_is_a_documented_frozen_dataclass(flag):
    cls = PASSES[flag]
    assert issubclass(cls, Pass) and cls.name == flag
    assert cls.summary and cls.__doc__, f"{flag}: needs a summary and a docstring"
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    # The default spelling round-trips through the option parser.
    assert cls.from_options({}) == cls()
