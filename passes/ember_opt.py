"""`ember-opt`: mlir-opt for ember. Parses a .mlir file, runs a pipeline that mixes ember's
Python passes and upstream passes, verifies, prints.

    ember-opt in.mlir --pass-pipeline='builtin.module(ember-fuse{max-group-size=8},canonicalize)'
    ember-opt --split-input-file --verify-diagnostics invalid.mlir
    ember-opt --list-passes
    ember-opt in.mlir --pass-pipeline='builtin.module(ember-lower-to-cpp)' --emit-source

Diagnostics read `FILE:LINE:COL: error: MESSAGE` with FILE as given on the command line; a
user mistake (bad IR, bytes that are not UTF-8, nesting deeper than --max-nesting, unknown
pass, bad option, unreadable input, unwritable output) exits 1 without a Python traceback.
"""
import argparse
import dataclasses
import io
import os
import re
import sys
import tempfile

from torch_mlir import ir

from ..dialects import make_context, verify_module
from ..dialects.contract import PRELUDE, SOURCE, SYMBOL, TARGET, is_kernel
from ..dialects.contract import describe as describe_contract
from . import base, forked, remarks
from .pipeline import PipelineError, build_pass_manager
from .registry import all_passes

SPLIT_MARKER = "// -----"
# The parser only takes a buffer name through Module.parse's fixed "-"; locations that carry
# it are renamed to the real file name (see _rename_locations).
_PARSE_BUFFER = "-"
_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
# MLIR's parser recurses natively per nesting level and overflows the stack (a segfault) at a
# few thousand levels; no real IR comes close to this default. The cap keeps --max-nesting safe.
DEFAULT_MAX_NESTING = 256
MAX_NESTING_CAP = 1000
# Brackets outside string literals and comments; "->" is an arrow, not a closing '>'. A run
# of '-' nests too: each unary minus of an affine expression is one level of recursion.
_NESTING_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//[^\n]*|->|-(?:\s*-)+|[\[({<\])}>]')
_EXPECTED = re.compile(
    r"expected-(error|warning|note|remark)(-re)?\s*(?:@([+-]\d+|above|below))?\s*\{\{(.*?)\}\}")


@dataclasses.dataclass
class Diag:
    severity: str            # error | warning | note | remark
    file: str | None
    line: int
    col: int
    message: str
    notes: list["Diag"] = dataclasses.field(default_factory=list)

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.file is not None else "ember-opt: "
        text = f"{where}{self.severity}: {self.message}"
        return "\n".join([text] + [n.render() for n in self.notes])


def _diag_from_dict(d: dict) -> Diag:
    return Diag(d["severity"], d["file"], d["line"], d["col"], d["message"],
                [_diag_from_dict(n) for n in d["notes"]])


def _located(severity: str, location, message: str, filename: str,
             notes: list[Diag] | None = None) -> Diag:
    m = _FILE_LOC.search(str(location))
    if m:
        file = filename if m.group(1) == _PARSE_BUFFER else m.group(1)
        line, col = int(m.group(2)), int(m.group(3))
    else:
        file, line, col = None, 0, 0
    return Diag(severity, file, line, col, message.strip(), notes or [])


def _convert(diag, filename: str) -> Diag:
    severity = str(diag.severity).rsplit(".", 1)[-1].lower()
    notes = [_convert(n, filename) for n in diag.notes]
    return _located(severity, diag.location, diag.message, filename, notes)


def _rename_locations(module: ir.Module, filename: str) -> None:
    """Gives every parsed location the real file name (Module.parse names the buffer "-")."""

    def renamed(loc):
        m = _FILE_LOC.fullmatch(str(loc)[4:-1]) if str(loc).startswith("loc(") else None
        if m and m.group(1) == _PARSE_BUFFER:
            return ir.Location.file(filename, int(m.group(2)), int(m.group(3)))
        return None

    def visit(op):
        new = renamed(op.location)
        if new is not None:
            op.location = new
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    new = renamed(arg.location)
                    if new is not None:
                        arg.set_location(new)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _line_col(text, pos: int) -> tuple[int, int]:
    """1-based line and column of offset `pos` in `text` (str or bytes)."""
    nl = "\n" if isinstance(text, str) else b"\n"
    return text.count(nl, 0, pos) + 1, pos - (text.rfind(nl, 0, pos) + 1) + 1


def nesting_too_deep(text: str, limit: int) -> tuple[int, int] | None:
    """(line, col) of the first bracket nested deeper than `limit`, else None. A closing
    bracket only closes the innermost opener of its kind, so stray '>'s cannot hide depth."""
    pairs = {")": "(", "]": "[", "}": "{", ">": "<"}
    stack: list[str] = []
    for m in _NESTING_TOKEN.finditer(text):
        tok = m.group()
        if tok[0] == "-" and tok != "->":
            if len(stack) + tok.count("-") > limit:
                return _line_col(text, m.start())
            continue
        if len(tok) != 1 or tok == '"':
            continue                                    # string, comment, arrow
        if tok in "([{<":
            stack.append(tok)
            if len(stack) > limit:
                return _line_col(text, m.start())
        elif stack and stack[-1] == pairs[tok]:
            stack.pop()
    return None


def decode_input(data: bytes, filename: str) -> tuple[str | None, "Diag | None"]:
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as err:
        line, col = _line_col(data, err.start)
        return None, Diag("error", filename, line, col,
                          f"invalid UTF-8 (byte 0x{data[err.start]:02x}); ember-opt reads "
                          f"UTF-8 text")


# --- --verify-diagnostics (mlir-opt's SourceMgrDiagnosticVerifierHandler semantics) ---------

@dataclasses.dataclass
class Expected:
    severity: str
    line: int           # where the diagnostic is expected
    directive: tuple[int, int]  # line, col of the directive: where an unmet one is reported
    text: str
    regex: bool
    matched: bool = False

    def matches(self, d: Diag) -> bool:
        if d.severity != self.severity or d.line != self.line:
            return False
        if self.regex:
            return re.search(self.text, d.message) is not None
        return self.text in d.message


def parse_expectations(text: str) -> list[Expected]:
    out, pending_below, last_plain = [], [], 0
    for lineno, line in enumerate(text.split("\n"), start=1):
        found = list(_EXPECTED.finditer(line))
        if not found:
            for e in pending_below:
                e.line = lineno
            pending_below = []
            last_plain = lineno
            continue
        for m in found:
            kind, regex, offset, body = m.groups()
            e = Expected(kind, lineno, (lineno, m.start() + 1), body, bool(regex))
            if offset == "above":
                e.line = last_plain
            elif offset == "below":
                pending_below.append(e)
            elif offset:
                e.line = lineno + int(offset)
            out.append(e)
        # A line holding only directives is no anchor for @above/@below.
        if line.split("//", 1)[0].strip():
            last_plain = lineno
    return out


def check_diagnostics(produced: list[Diag], text: str, filename: str) -> list[str]:
    """Failures (rendered) of matching `produced` against the chunk's expected-* directives."""
    expected = parse_expectations(text)
    flat = []
    for d in produced:
        flat.append(d)
        flat.extend(n for n in d.notes if not n.message.startswith("see current operation"))
    failures = []
    for d in flat:
        hit = next((e for e in expected if not e.matched and e.matches(d)), None)
        if hit is None:
            hit = next((e for e in expected if e.matches(d)), None)
        if hit is None:
            where = f"{d.file or filename}:{d.line}:{d.col}"
            failures.append(f"{where}: error: unexpected {d.severity}: {d.message}")
        else:
            hit.matched = True
    for e in expected:
        if not e.matched:
            line, col = e.directive
            failures.append(f'{filename}:{line}:{col}: error: expected {e.severity} '
                            f'"{e.text}" was not produced')
    return failures


# --- driver ----------------------------------------------------------------------------------

def split_chunks(text: str, split: bool) -> list[str]:
    """Chunks padded with newlines so that line numbers stay those of the whole file."""
    if not split:
        return [text]
    chunks, cur, start = [], [], 0
    for i, line in enumerate(text.split("\n")):
        if line.rstrip() == SPLIT_MARKER:
            chunks.append("\n" * start + "\n".join(cur))
            cur, start = [], i + 1
        else:
            cur.append(line)
    chunks.append("\n" * start + "\n".join(cur))
    return chunks


class Driver:
    def __init__(self, args: argparse.Namespace, filename: str):
        self.args = args
        self.filename = filename
        self.ctx = make_context()
        # Chunks run in forked children (forked.py), which have no thread pool.
        self.ctx.enable_multithreading(False)
        self.ctx.allow_unregistered_dialects = args.allow_unregistered_dialect
        self.diags: list[Diag] = []
        self._send = None           # in a forked child: streams each diagnostic to the parent
        self.ctx.attach_diagnostic_handler(self._handle)
        with self.ctx:
            # Built before any parsing: a bad pipeline is one error, not one per chunk.
            self.pm = build_pass_manager(args.pass_pipeline or "builtin.module()", self.ctx,
                                         print_ir_after_all=args.mlir_print_ir_after_all,
                                         verify_each=args.verify_each)

    def _handle(self, diag) -> bool:
        self._add(_convert(diag, self.filename))
        return True

    def _remark(self, remark: remarks.Remark) -> None:
        """A pass's remark (passes/remarks.py), as MLIR would print a diagnostic of it."""
        self._add(_located("remark", remark.location, remark.text(), self.filename))

    def _add(self, d: Diag) -> None:
        self.diags.append(d)
        if self._send is not None:
            self._send(dataclasses.asdict(d))

    def run_chunks(self, chunks: list[str]) -> list[tuple[str | None, list[Diag]]]:
        """(printed module or None, diagnostics) per chunk. The chunks run in one forked child
        (forked.py); when MLIR crashes natively on a chunk, that chunk gets an error (after the
        diagnostics it emitted before the crash) and a new child goes on with the next one."""
        results: list = [None] * len(chunks)
        if self.args.no_fork or not forked.available():
            for i, chunk in enumerate(chunks):
                self.diags = []
                results[i] = (self.run_chunk(chunk), self.diags)
            return results

        def work(send, start):
            for i in range(start, len(chunks)):
                self.diags = []
                self._send = lambda d, i=i: send({"chunk": i, "diag": d})
                printed = self.run_chunk(chunks[i])
                send({"chunk": i, "printed": printed,
                      "diags": [dataclasses.asdict(d) for d in self.diags]})

        start = 0
        while start < len(chunks):
            messages, _, crash = forked.run_forked(lambda send: work(send, start))
            for m in messages:
                if "printed" in m:
                    results[m["chunk"]] = (m["printed"], [_diag_from_dict(d) for d in m["diags"]])
            if crash is None:
                break
            bad = next(i for i in range(start, len(chunks)) if results[i] is None)
            diags = [_diag_from_dict(m["diag"]) for m in messages
                     if m.get("chunk") == bad and "diag" in m]
            last = next((d for d in reversed(diags) if d.file is not None), None)
            if last is not None:
                line, col = last.line, last.col
            else:                                   # the chunk's first non-blank line
                lines = chunks[bad].split("\n")
                line, col = next((i + 1 for i, t in enumerate(lines) if t.strip()), 1), 1
            diags.append(Diag("error", self.filename, line, col,
                              f"MLIR crashed ({crash}) while processing this input; no output "
                              f"for it"))
            results[bad] = (None, diags)
            start = bad + 1
        return results

    def _capture(self, err: ir.MLIRError) -> None:
        found = [_convert(d, self.filename) for d in err.error_diagnostics]
        self.diags.extend(found)
        if not found:
            self.diags.append(Diag("error", None, 0, 0, str(err).strip()))

    def run_chunk(self, text: str) -> str | None:
        """The printed module, or None after a failure (diagnostics are in self.diags)."""
        limit = self.args.max_nesting
        where = nesting_too_deep(text, limit)
        if where is not None:
            self.diags.append(Diag(
                "error", self.filename, where[0], where[1],
                f"nested deeper than {limit} levels (brackets, unary minus); not parsed (MLIR's parser would "
                f"overflow its stack); --max-nesting=N allows up to {MAX_NESTING_CAP}"))
            return None
        with self.ctx:
            try:
                module = ir.Module.parse(text)
            except ir.MLIRError as err:
                self._capture(err)
                return None
            _rename_locations(module, self.filename)
            if self.args.verify_each:
                # The input against the stage contract (each pass then checks its output).
                try:
                    verify_module(module.operation)
                except ValueError:
                    return None
            try:
                with remarks.handler(self.ctx, self._remark):
                    self.pm.run(module.operation)
            except ir.MLIRError as err:
                self._capture(err)
                return None
            try:
                module.operation.verify()
                verify_module(module.operation)
            except ir.MLIRError as err:
                self._capture(err)
                return None
            except (ValueError, RuntimeError):
                # verify_module has already emitted the located diagnostic.
                if not any(d.severity == "error" for d in self.diags):
                    self.diags.append(Diag("error", None, 0, 0, "module verification failed"))
                return None
            if self.args.emit_source:
                return emit_source(module.operation, self.args.emit_source == "all")
            out = io.StringIO()
            module.operation.print(file=out, enable_debug_info=self.args.mlir_print_debuginfo,
                                   print_generic_op_form=self.args.mlir_print_op_generic,
                                   assume_verified=True)
            return out.getvalue()


def emit_source(module_op, prelude: bool = False) -> str:
    """The kernels' generated code as plain text (what the lowering passes store in
    `ember.source`), one block per kernel under a `// kernel @NAME` header, so that FileCheck
    reads real lines. `prelude`: the module's `ember.prelude` first."""
    out = []
    if TARGET.has(module_op):
        out.append(f"// ember.target = {TARGET.get(module_op)}")
    if prelude and PRELUDE.has(module_op):
        out += ["// ----- prelude", PRELUDE.get(module_op).rstrip("\n")]
    kernels = [op for op in module_op.regions[0].blocks[0].operations if is_kernel(op)]
    for op in kernels:
        name = ir.StringAttr(op.attributes["sym_name"]).value
        symbol = SYMBOL.get(op, name)
        if not SOURCE.has(op):
            out.append(f"// ----- kernel @{name}: no source (run a lowering pass: "
                       f"ember-lower-to-cpp or ember-lower-to-triton)")
            continue
        source = SOURCE.get(op)
        if symbol != name:
            out.append(f"// ----- kernel @{name}: the code of @{symbol}")
            continue
        out += [f"// ----- kernel @{name}", source.rstrip("\n")]
    return "\n".join(out) + "\n"


def list_passes() -> str:
    lines = []
    for flag, cls in all_passes().items():
        lines.append(f"  {flag:<28} {cls.summary}")
        for opt, field in cls.options().items():
            kind = getattr(field.type, "__name__", str(field.type))
            default = field.default
            if isinstance(default, bool):
                default = "true" if default else "false"
            valid = ""
            if field.metadata.get("choices"):
                valid = " one of " + "|".join(field.metadata["choices"])
            elif kind == "int":
                lo, hi = field.metadata.get("min"), field.metadata.get("max")
                valid = f" in [{0 if lo is None else lo}, {base.INT_MAX if hi is None else hi}]"
            lines.append(f"      {opt}={kind:<8} (default {default}){valid}")
    return "\n".join(lines) + "\n"


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember-opt", description=__doc__.split("\n")[0])
    p.add_argument("input", nargs="?", default="-", help="input .mlir file ('-': stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file ('-': stdout)")
    p.add_argument("--pass-pipeline", default="",
                   help="e.g. 'builtin.module(ember-fuse{max-group-size=8},canonicalize)'")
    p.add_argument("--list-passes", action="store_true", help="list ember's passes and options")
    p.add_argument("--list-attributes", action="store_true",
                   help="list the ember.* attributes of the stage contract (dialects/contract.py)")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"process each '{SPLIT_MARKER}'-separated chunk on its own")
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check diagnostics against expected-error/warning/note directives")
    p.add_argument("--verify-each", action=argparse.BooleanOptionalAction, default=True,
                   help="run MLIR's verifier and ember's stage contract (dialects/contract.py) "
                        "after each pass (default on)")
    p.add_argument("--emit-source", nargs="?", const="kernels", choices=("kernels", "all"),
                   help="print the generated kernels' source text instead of the IR "
                        "('all': the prelude too)")
    p.add_argument("--allow-unregistered-dialect", action="store_true")
    p.add_argument("--mlir-print-ir-after-all", action="store_true", help="IR after each pass, to stderr")
    p.add_argument("--mlir-print-debuginfo", action="store_true")
    p.add_argument("--mlir-print-op-generic", action="store_true")
    p.add_argument("--max-nesting", type=_nesting_limit, default=DEFAULT_MAX_NESTING,
                   help=f"most nested brackets accepted (default {DEFAULT_MAX_NESTING}, "
                        f"at most {MAX_NESTING_CAP})")
    p.add_argument("--show-traceback", action="store_true", help=argparse.SUPPRESS)
    # Process chunks in this process (for debuggers); a native crash then kills ember-opt.
    p.add_argument("--no-fork", action="store_true", help=argparse.SUPPRESS)
    return p


def _nesting_limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
    if not 1 <= value <= MAX_NESTING_CAP:
        raise argparse.ArgumentTypeError(f"must be in [1, {MAX_NESTING_CAP}], got {value}")
    return value


def _read_input(path: str) -> tuple[bytes, str]:
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    with open(path, "rb") as f:
        return f.read(), path


def _write_output(path: str, text: str) -> str | None:
    """Writes the result; an error message (no exception) if it cannot. A regular file is
    replaced atomically (a failed write leaves the old file whole); anything else that exists
    (/dev/null, a FIFO, a symlink) is written through."""
    if path == "-":
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`| head`): not an error of ours; keep Python quiet at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return None
    tmp = None
    try:
        if os.path.lexists(path) and not (os.path.isfile(path) and not os.path.islink(path)):
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return None
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                   prefix=".ember-opt-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)        # mkstemp's 0600 is not what a user's file gets
        os.replace(tmp, path)
        tmp = None
        return None
    except OSError as err:
        return f"cannot write '{path}': {err.strerror or err}"
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def run(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.list_passes:
        sys.stdout.write(list_passes())
        return 0
    if args.list_attributes:
        sys.stdout.write(describe_contract())
        return 0
    try:
        data, filename = _read_input(args.input)
    except OSError as err:
        print(f"ember-opt: error: cannot read '{args.input}': {err.strerror or err}",
              file=sys.stderr)
        return 1
    text, bad = decode_input(data, filename)
    if bad is not None:
        print(bad.render(), file=sys.stderr)
        return 1
    try:
        driver = Driver(args, filename)
    except PipelineError as err:
        print(f"ember-opt: error: {err}", file=sys.stderr)
        return 1

    outputs, ok, chunks = [], True, split_chunks(text, args.split_input_file)
    for chunk, (printed, diags) in zip(chunks, driver.run_chunks(chunks)):
        if args.verify_diagnostics:
            failures = check_diagnostics(diags, chunk, filename)
            for f in failures:
                print(f, file=sys.stderr)
            ok = ok and not failures
        else:
            for d in diags:
                print(d.render(), file=sys.stderr)
            ok = ok and printed is not None
        if printed is not None:
            outputs.append(printed if printed.endswith("\n") else printed + "\n")
    result = (SPLIT_MARKER + "\n").join(outputs)
    problem = _write_output(args.output, result)
    if problem is not None:
        print(f"ember-opt: error: {problem}", file=sys.stderr)
        return 1
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> None:
    show = "--show-traceback" in (argv if argv is not None else sys.argv)
    base.reraise_internal_errors = show
    try:
        code = run(argv)
    except KeyboardInterrupt:
        code = 130
    except Exception as err:  # an ember bug, not a user mistake: one line unless asked
        if show:
            if isinstance(err, forked.ChildError):
                print(err.child_traceback, file=sys.stderr)
            raise
        print(f"ember-opt: internal error: {type(err).__name__}: {err} "
              "(rerun with --show-traceback)", file=sys.stderr)
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
