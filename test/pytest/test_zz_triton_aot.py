"""Every Triton kernel that this pytest session generated compiles ahead of time for
GPUTarget("cuda", 90, 32) and GPUTarget("hip", "gfx942", 64) (CI without a GPU: the numerics
suite runs target "triton" through the interpreter, which neither lowers to LLVM nor checks
what only the real compiler rejects).

The runtime keeps every generated module it loaded (runtime/triton_aot.loaded_sources); this
test runs last (conftest.py moves it to the end of the session; the file name sorts last too)
and compiles each distinct kernel once, in fresh subprocesses (the interpreter patches triton
in place), failing on any error. Skipped when the session generated no Triton code.
"""
import os

import pytest

pytest.importorskip("triton")

from ember.runtime import triton_aot  # noqa: E402


@pytest.mark.aot_last
def test_triton_aot_all_generated_kernels():
    if os.environ.get("EMBER_TEST_AOT", "1") == "0":
        pytest.skip("EMBER_TEST_AOT=0")
    sources = triton_aot.loaded_sources()
    if not sources:
        pytest.skip("this session generated no Triton kernels")
    results = triton_aot.compile_sources_isolated(sources)
    print(f"AOT: {len(sources)} generated modules, {len(results)} distinct kernels, "
          f"targets cuda:90 and hip:gfx942")
    bad = triton_aot.failures(results)
    if bad:
        lines = []
        for label, per in sorted(bad.items()):
            i = int(label.split(":", 1)[0])
            for target, err in per.items():
                lines.append(f"{label} [{target}]: {err[:1500]}")
            lines.append(f"  (module {i}: {len(sources[i])} chars; first lines:\n"
                         + "\n".join(sources[i].splitlines()[-30:]) + ")")
        pytest.fail(f"{len(bad)} of {len(results)} Triton kernels do not compile ahead of "
                    "time:\n" + "\n".join(lines))
    assert all(set(per) == {"cuda:90", "hip:gfx942"} for per in results.values()), results
