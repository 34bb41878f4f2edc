"""Builds one MLIR PassManager from a textual pipeline that mixes ember's Python passes and
upstream passes: `builtin.module(ember-fuse{max-group-size=8},canonicalize,func.func(cse))`.

Textual pipelines (`PassManager.parse`) know only upstream passes, so the top level is split
here; each element is either a registered ember pass (added as a Python callable) or handed to
`PassManager.add` as upstream text.
"""
from torch_mlir import ir, passmanager

from .base import OptionError
from .registry import lookup


class PipelineError(ValueError):
    """The pipeline string is malformed or names an unknown pass."""


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Splits at `sep` outside (), {} and quotes."""
    parts, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{ch}' in pass pipeline '{text}'")
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if depth != 0 or quote:
        raise PipelineError(f"unbalanced brackets or quotes in pass pipeline '{text}'")
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


def parse_options(text: str) -> dict[str, str]:
    """`a=1 b=x` (space separated, as mlir-opt) -> {'a': '1', 'b': 'x'}."""
    opts = {}
    for item in split_top_level(text.strip(), " "):
        if not item:
            continue
        if "=" not in item:
            opts[item] = "true"
            continue
        key, value = item.split("=", 1)
        opts[key.strip()] = value.strip().strip("\"'")
    return opts


def parse_element(element: str) -> tuple[str, dict[str, str] | None]:
    """`ember-fuse{max-group-size=8}` -> ('ember-fuse', {...}); plain name -> (name, None)."""
    if "{" in element and element.endswith("}"):
        name, rest = element.split("{", 1)
        return name.strip(), parse_options(rest[:-1])
    return element.strip(), None


def strip_anchor(pipeline: str) -> str:
    text = pipeline.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        return text[len("builtin.module("):-1]
    return text


def build_pass_manager(pipeline: str, context: ir.Context | None = None,
                       print_ir_after_all: bool = False,
                       verify_each: bool = True) -> passmanager.PassManager:
    """A PassManager on builtin.module running `pipeline` (anchor optional). With
    `verify_each`, MLIR's verifier runs after every pass and ember's stage contract
    (dialects/contract.py) after every ember pass."""
    ctx = context or ir.Context.current
    pm = passmanager.PassManager("builtin.module", context=ctx)
    pm.enable_verifier(verify_each)
    body = strip_anchor(pipeline)
    for element in split_top_level(body):
        name, options = parse_element(element)
        cls = lookup(name)
        if cls is not None:
            try:
                p = cls.from_options(options or {})
            except OptionError as err:
                raise PipelineError(str(err)) from None
            pm.add(p.as_callable(verify_contract=verify_each), name=type(p).__name__, argument=cls.name,
                   description=cls.summary)
        else:
            try:
                pm.add(element)
            except (ValueError, RuntimeError, ir.MLIRError) as err:
                raise PipelineError(f"'{element}' is neither an ember pass nor an upstream "
                                    f"pass ({str(err).strip()})") from None

    if print_ir_after_all:
        pm.enable_ir_printing(print_after_all=True)
    return pm
