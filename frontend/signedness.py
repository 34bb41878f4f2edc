"""Unsigned integer dtypes put back on an exported Program (pure Python: a warm start, which
takes its Program from the program cache, runs it without loading MLIR)."""
from __future__ import annotations

import dataclasses

from ..runtime.program import Program, Step

_SIGNLESS = {"uint8": "int8", "uint16": "int16", "uint32": "int32", "uint64": "int64"}


def restore_signedness(program: Program, inputs, outputs) -> None:
    """linalg's integers are signless: torch-mlir turns uint8 into i8, which reads back as
    int8. The graph's own dtypes (`inputs`, `outputs`: torch dtypes of the Program's inputs
    and outputs, in order) put the unsigned ones back, so that the runtime accepts and returns
    uint8 tensors (kernels only see bytes; the ops' own signedness is in the IR: uitofp,
    divui, cmpi ult, ...). A value returned both as int8 and as uint8 (`x.to(torch.int8)` and
    `x.to(torch.uint8)` are one value after CSE) gets a reinterpreting view for the latter."""
    view_src = {s.outputs[0]: s.inputs[0] for s in program.steps if s.kind == "view"}

    def want(vid, dtype):
        name = str(dtype).replace("torch.", "")
        return name if _SIGNLESS.get(name) == program.values[vid].dtype else None

    def retype(vid, name):
        while vid is not None and _SIGNLESS.get(name) == program.values[vid].dtype:
            program.values[vid] = dataclasses.replace(program.values[vid], dtype=name)
            vid = view_src.get(vid)

    for vid, dt in zip(range(program.num_inputs), inputs):
        if want(vid, dt):
            retype(vid, want(vid, dt))
    asked: dict[int, set] = {}
    for vid, dt in zip(program.outputs, outputs):
        asked.setdefault(vid, set()).add(str(dt).replace("torch.", ""))
    for k, (vid, dt) in enumerate(zip(list(program.outputs), outputs)):
        name = str(dt).replace("torch.", "")
        cur = program.values[vid].dtype
        if name == cur or _SIGNLESS.get(name, name) != _SIGNLESS.get(cur, cur):
            continue
        if want(vid, dt) and len(asked[vid]) == 1 and vid >= program.num_inputs:
            retype(vid, name)
            continue
        # the value has the other signedness (an input's: `uint8_t.to(torch.int8)` folds to
        # the input itself, which came back as uint8), or is asked for with both
        program.values.append(dataclasses.replace(program.values[vid], dtype=name, offset=None,
                                                  in_input=None))
        program.steps.append(Step("view", "bitcast", (vid,), (len(program.values) - 1,)))
        program.outputs[k] = len(program.values) - 1
