"""The package's shape, checked from its source (no imports run, so this is fast):

* imports go downwards only (frontend -> passes -> dialects; runtime used by frontend alone)
  and no modules import each other in a cycle, at module level or inside functions;
* no `ember.*` attribute or op name is spelled as a string outside dialects/contract.py;
* every pass file has a docstring and registers one pass whose flag is its file name.
"""
import ast
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAYERS = ("frontend", "passes", "dialects", "runtime")
# layer -> the layers it may import
ALLOWED = {
    "frontend": {"frontend", "passes", "dialects", "runtime"},
    "passes": {"passes", "dialects"},
    "dialects": {"dialects"},
    "runtime": {"runtime"},
}


def _modules():
    for layer in LAYERS:
        for path in sorted((ROOT / layer).glob("*.py")):
            yield f"{layer}.{path.stem}", path


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """ember modules `name` imports (anywhere in the file), as 'layer.module'."""
    tree = ast.parse(path.read_text(), str(path))
    package = name.split(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if not (node.module or "").startswith("ember."):
                    continue
                parts = node.module.split(".")[1:]
            else:
                base = [package] if node.level == 1 else []
                parts = base + (node.module.split(".") if node.module else [])
            if len(parts) == 1:             # `from . import x` / `from ..dialects import x`
                for alias in node.names:
                    cand = f"{parts[0]}.{alias.name}"
                    found.add(cand if (ROOT / parts[0] / f"{alias.name}.py").exists()
                              else f"{parts[0]}.__init__")
            elif len(parts) >= 2:
                found.add(f"{parts[0]}.{parts[1]}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "ember" and len(parts) >= 3:
                    found.add(f"{parts[1]}.{parts[2]}")
    found.discard(name)
    return {m for m in found if m.split(".")[0] in LAYERS}


GRAPH = {name: _imports(name, path) for name, path in _modules()}


def test_imports_go_downwards():
    bad = [f"{m} imports {d}" for m, deps in GRAPH.items() for d in sorted(deps)
           if d.split(".")[0] not in ALLOWED[m.split(".")[0]]]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(GRAPH.get(m, ())):
            if d.endswith(".__init__"):
                continue
            if state.get(d) == "open":
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in GRAPH:
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


_EMBER_LITERAL = re.compile(r"""^[A-Za-z]*(\"\"\"|'''|"|')ember\.""")


def _ember_strings(path: pathlib.Path):
    """(line, text) of each string literal (f-strings too) whose text starts with 'ember.'
    (docstrings and messages that merely mention a name start with other text)."""
    with open(path, "rb") as f:
        tokens = list(tokenize.tokenize(f.readline))
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.STRING and _EMBER_LITERAL.match(tok.string):
            yield tok.start[0], tok.string
        elif getattr(tokenize, "FSTRING_START", None) == tok.type and i + 1 < len(tokens) \
                and tokens[i + 1].string.startswith("ember."):     # Python >= 3.12
            yield tok.start[0], tok.string + tokens[i + 1].string


def test_ember_names_only_in_the_contract():
    hits = []
    for layer in ("frontend", "passes", "dialects"):
        for path in sorted((ROOT / layer).glob("*.py")):
            if path == ROOT / "dialects" / "contract.py":
                continue
            hits += [f"{path.relative_to(ROOT)}:{line}: {text}"
                     for line, text in _ember_strings(path)]
    assert not hits, ("spell ember.* names through dialects/contract.py:\n" + "\n".join(hits))


def test_the_name_check_finds_a_literal(tmp_path):
    p = tmp_path / "x.py"
    p.write_text('"""Mentions ember.kernel in prose."""\nA = "ember.kernel"\nB = f"ember.{A}"\n')
    assert [line for line, _ in _ember_strings(p)] == [2, 3]


def test_target_vocabulary_agrees_with_the_runtime():
    from ember.passes.backends import BACKENDS, Target
    from ember.runtime import env
    assert tuple(Target) == env.TARGETS
    assert {b.lang for b in BACKENDS.values()} == {"cpp", "python"}


@pytest.mark.parametrize("flag", ["ember-fuse", "ember-convert-externs", "ember-buffer-reuse",
                                  "ember-lower-to-cpp", "ember-lower-to-triton",
                                  "ember-matmul-template", "ember-library-views"])
def test_pass_files_are_named_after_their_flag(flag):
    from ember.passes.registry import all_passes
    cls = all_passes()[flag]
    path = ROOT / "passes" / (flag.replace("-", "_") + ".py")
    assert path.exists(), f"{flag} lives in {cls.__module__}, not {path.name}"
    assert cls.__module__.endswith("." + path.stem)
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree)
    assert doc and len(doc) > 80, f"{path.name} needs a docstring stating its invariant"


def test_every_registered_pass_is_checked_here():
    from ember.passes.registry import all_passes
    names = set(all_passes())
    listed = {"ember-fuse", "ember-convert-externs", "ember-buffer-reuse",
              "ember-lower-to-cpp", "ember-lower-to-triton", "ember-matmul-template",
              "ember-library-views"}
    assert names == listed


def test_each_target_maps_to_one_backend():
    from ember.frontend.options import CompileOptions, default_pipeline
    from ember.passes.backends import CPP, TRITON, Target, backend_for, backend_named
    assert backend_for("cpu") is CPP and backend_named("cpu") is CPP
    assert all(backend_for(t) is TRITON for t in (Target.CUDA, Target.ROCM, "triton"))
    with pytest.raises(ValueError, match="resolved"):
        backend_for(Target.AUTO)
    for target, backend in (("cpu", CPP), ("rocm", TRITON)):
        pipeline = default_pipeline(CompileOptions(target=target), target)
        assert f"target={backend.name}" in pipeline and pipeline.endswith(f"{backend.lowering})")
