"""The package's shape, checked from its source (no imports run, so this is fast):

* imports go downwards only (frontend -> passes -> dialects; runtime used by frontend alone)
  and no modules import each other in a cycle, at module level or inside functions;
* no `ember.*` attribute or op name is spelled as a string outside dialects/contract.py;
* every pass file has a docstring and registers one pass whose flag is its file name;
* no code generator reads emitted code back (no `re`, no comparison or string method on printed
  text, no loop-header text): decisions are made on passes/kernel_ir.py's tree.
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
                                  "ember-matmul-template", "ember-library-views",
                                  "ember-split-reductions", "ember-channels-last",
                                  "ember-shifted-variance"])
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
              "ember-library-views", "ember-split-reductions", "ember-channels-last",
              "ember-shifted-variance"}
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


# Every module of code generation (passes/): the schedule, the tree, the expression builder,
# both languages and their writers, the pass entries.
GENERATORS = ["kernel_ir.py", "kernel_expr.py", "kernel_schedule.py", "kernel_windows.py",
              "reduction_body.py",
              "ir_queries.py", "cpp_lang.py", "cpp_emitter.py", "cpp_column_blocks.py",
              "cpp_row_chunks.py", "cpp_row_values.py", "cpp_row_split.py", "cpp_row_scalars.py", "cpp_prelude.py", "triton_prelude.py",
              "triton_lang.py", "triton_combiners.py", "triton_blocks.py", "triton_writer.py",
              "triton_source.py", "triton_matmul.py", "ember_lower_to_triton.py",
              "ember_lower_to_cpp.py", "cpp_split_loops.py", "cpp_sweeps.py", "cpp_lane_sums.py",
              "softmax_sums.py"]
# functions that return code text (a printed node, a spelled constant or header)
_TEXT_FUNCS = {"identity", "round_to", "render_stmt", "render_loop", "literal", "show", "extent",
               "runtime_extent", "config_text", "render"}
_STR_METHODS = {"startswith", "endswith", "isdigit", "isnumeric", "isidentifier", "split",
                "rsplit", "partition", "rpartition", "strip", "lstrip", "rstrip", "find",
                "rfind", "index", "rindex", "count", "replace", "removeprefix",
                "removesuffix", "match"}


def _text_inspections(source: str) -> list:
    """(line, what) for each place that reads generated code text back: a comparison or
    membership test on a text value, a string method that looks into one (`.strip()`,
    `.startswith()`, `.split()`, ...), a loop's `header` text, or the `re` module. Text
    values: `.text` / `*_text`, and every local assigned from an f-string, a `.text` or a call
    of a function that returns code (`_TEXT_FUNCS`)."""
    tree = ast.parse(source)
    hits = set()
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def own(scope):
        """The nodes of `scope`, without those of the functions defined in it."""
        work = [scope]
        while work:
            n = work.pop()
            yield n
            work.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, funcs))

    def check(scope):
        texts = set()      # the scope's locals that hold text

        def texty(n):
            if isinstance(n, ast.Attribute):
                return n.attr == "text" or n.attr.endswith("_text")
            return isinstance(n, ast.Name) and (n.id.endswith("_text") or n.id in texts)

        def makes_text(v):
            if isinstance(v, ast.JoinedStr) or texty(v):
                return True
            if isinstance(v, ast.Call):
                f = v.func
                name = f.id if isinstance(f, ast.Name) else \
                    f.attr if isinstance(f, ast.Attribute) else None
                return name in _TEXT_FUNCS
            return False
        for n in own(scope):
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and \
                    makes_text(n.value):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    if isinstance(t, ast.Name):
                        texts.add(t.id)
        for n in own(scope):
            if isinstance(n, ast.Compare) and any(texty(x) for x in [n.left, *n.comparators]) \
                    and not all(isinstance(o, (ast.Is, ast.IsNot)) for o in n.ops):
                hits.add((n.lineno, "compares text"))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                    texty(n.func.value) and n.func.attr in _STR_METHODS:
                hits.add((n.lineno, f"calls .{n.func.attr}() on text"))
            elif isinstance(n, ast.Attribute) and n.attr == "header":
                hits.add((n.lineno, "reads a loop header's text"))
            elif isinstance(n, (ast.Import, ast.ImportFrom)) and any(
                    a.name == "re" for a in n.names) or \
                    isinstance(n, ast.ImportFrom) and n.module == "re":
                hits.add((n.lineno, "imports re"))
    # the module, then each function with its own locals
    check(tree)
    for n in ast.walk(tree):
        if isinstance(n, funcs):
            check(n)
    return sorted(hits)


def test_code_generators_do_not_read_emitted_text():
    root = ROOT / "passes"
    found = {f: _text_inspections((root / f).read_text()) for f in GENERATORS}
    assert not any(found.values()), found


def test_every_code_generation_module_is_checked():
    # a module that builds or prints kernel code (imports kernel_ir or a language) is listed
    root = ROOT / "passes"
    users = {p.name for p in root.glob("*.py")
             if any(m in p.read_text() for m in ("kernel_ir import", "from .kernel_expr",
                                                 "from .triton_lang", "from .cpp_lang"))}
    assert users <= set(GENERATORS), sorted(users - set(GENERATORS))


def test_the_text_check_finds_an_inspection():
    assert _text_inspections("import re\n") == [(1, "imports re")]
    assert _text_inspections("if e.text == '0':\n    pass\n") == [(1, "compares text")]
    assert _text_inspections("ok = 'RBLOCK' in shape_text\n") == [(1, "compares text")]
    assert _text_inspections("n = int(init.text.strip('()'))\n") == \
        [(1, "calls .strip() on text")]
    assert _text_inspections("s = f'{e.text} + 1'\n") == []
    # the places this check found after the tree landed (cpp_column_blocks, triton_writer)
    assert _text_inspections("ident = identity(kind, ty)\nif ident.startswith('float'):\n"
                             "    pass\n") == [(2, "calls .startswith() on text")]
    assert _text_inspections("m = HEADER.match(top.header)\n") == \
        [(1, "reads a loop header's text")]
    assert _text_inspections("t = f'{a} * {b}'\nok = 'RBLOCK' in t\nok = t is None\n") == \
        [(2, "compares text")]
