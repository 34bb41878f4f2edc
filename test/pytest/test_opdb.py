"""CI shard of the operator conformance suite (issue 8, item 5) and of the zero-size sweep.

A fixed, representative subset of PyTorch's OpInfo database (op_db) runs through
`torch.compile(backend="ember", options={"target": "cpu"})` against eager, float32, forward and
backward, at most 2 samples per op; then zero-size, 0-dim and broadcast-to-zero versions of
each op's samples (forward), for OPS and for ZERO_OPS (zero-size mode only). Every case runs
in a child process (opdb_pool.py), so a crash or a hang is a failed test here, never the end of the test session. The full sweep over op_db, bf16
and Inductor's figures from the same harness: benchmarks/opdb_sweep.py.

Each case asserts: no crash, values / dtypes / shapes / NaN positions as eager's (a relative
norm under 1e-4), the same errors as eager, at least one graph compiled by ember, and no eager
fallback unless the case is listed in EXPECTED_FALLBACK. Known bugs are xfail(strict=True), so a
fix flips the test and the entry must go; a fallback that disappears fails too (remove it from
EXPECTED_FALLBACK: ember now compiles the op).
"""
import pytest

import opdb_harness as H
from opdb_pool import Pool

SAMPLES = 2
# The cases start as soon as the module's first test asks for one and run 2 at a time in the
# background; a case that takes longer than this is a hang (each normally takes 0.2-3 s).
CASE_TIMEOUT_S = 30

# op[:variant]: pointwise unary / binary, reductions, views, indexing, casts, matmuls, the
# normalisations, joins and scans that models are made of.
OPS = """
abs neg exp log sqrt rsqrt sin tanh sigmoid erf reciprocal floor clamp
nn.functional.gelu nn.functional.relu nn.functional.silu
add sub mul div:no_rounding_mode div:floor_rounding pow maximum atan2 where lerp
sum mean amax prod var std logsumexp max:reduction_with_dim argmax
view reshape permute transpose unsqueeze squeeze expand flatten narrow select split
gather index_select masked_fill take_along_dim __getitem__ nn.functional.embedding
bfloat16 int bool double
mm bmm addmm matmul nn.functional.linear
softmax log_softmax nn.functional.layer_norm cat stack cumsum
sort topk
""".split()

# Zero-size mode only: ops in which the full zero-size sweep (2026-11-27, benchmarks/RESULTS.md)
# found ember returning a result where eager raises (eager's kernels check shapes the meta
# functions do not: eager_rejects' exact-shape probes, on Dynamo's graph for upsampling) or
# falling back on an index into an empty tensor (partition.is_library_node); and the 0-dim
# samples that fell back (fb17): flip of a 0-dim tensor, index_fill with an empty index, a
# 0-dim tensor as tensor_split's sections (narrow's start: narrow is in OPS).
ZERO_OPS = """
_batch_norm_with_update _softmax_backward_data diagonal_scatter select_scatter slice_scatter
index_put nn.functional.interpolate:linear nn.functional.interpolate:nearest
nn.functional.upsample_nearest
flip index_fill tensor_split
""".split()

NO_GRAD = {"argmax", "int", "bool"}  # integer / boolean results: no backward case
# Zero-size cases in which every derived input is one eager rejects too (a view/reshape target
# shape fixed by the sample; addmm's bias cannot broadcast to zero rows): they check that ember
# raises the same error and does not crash, but no graph gets compiled.
ZERO_NO_GRAPH = {"view-float32-zero", "reshape-float32-zero", "addmm-float32-zero"}

# Cases that fall back to eager today (results checked, and correct): ember does not compile
# these ops yet. A new fallback fails its test; so does a fallback that goes away (delete the
# entry).
EXPECTED_FALLBACK: dict[str, str] = {}

# Known bugs (strict xfail: the test flips to XPASS, a failure, once fixed). Reason = the
# status and cause the harness recorded.
KNOWN_BUGS: dict[str, str] = {}


def _split(name):
    op, _, variant = name.partition(":")
    return op, variant


def _cases():
    out = []
    for name in OPS:
        op, variant = _split(name)
        for mode in ("fwd", "bwd", "zero"):
            if mode == "bwd" and name in NO_GRAD:
                continue
            out.append(dict(backend="ember", op=op, variant=variant, dtype="float32",
                            mode=mode, limit=SAMPLES))
    for name in ZERO_OPS:
        op, variant = _split(name)
        out.append(dict(backend="ember", op=op, variant=variant, dtype="float32",
                        mode="zero", limit=SAMPLES))
    return out


CASES = _cases()


def _param(case):
    cid = H.case_id(case)
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[cid])] if cid in KNOWN_BUGS else []
    return pytest.param(case, id=cid, marks=marks)


@pytest.fixture(scope="module")
def pool(request, tmp_path_factory):
    # Only the cases this session selected (-k, node ids), in the order pytest will ask for them.
    selected = [item.callspec.params["case"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_opdb"
                and hasattr(item, "callspec")]
    # Worker logs in pytest's temporary directory (kept for the last runs), not one more
    # directory in $TMPDIR per run.
    p = Pool(jobs=2, timeout=CASE_TIMEOUT_S, log_dir=str(tmp_path_factory.mktemp("opdb-logs")))
    p.start(selected)
    return p


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_opdb(pool, case):
    r = pool.get(case, timeout=CASE_TIMEOUT_S * len(CASES))
    cid = H.case_id(case)
    assert r["status"] not in ("crash", "timeout"), f"{cid}: {r['status']}: {r['reason']}"
    assert r["status"] not in ("mismatch", "error"), f"{cid}: {r['status']}: {r['reason']}"
    assert r["samples"] > 0, f"{cid}: no sample ran ({r['reason']}): the case tests nothing"
    if cid in ZERO_NO_GRAPH:
        assert r["graphs"] == 0, f"{cid} now compiles a graph: delete it from ZERO_NO_GRAPH"
    else:
        assert r["graphs"] > 0, f"{cid}: ember compiled no graph (Dynamo ran the op eagerly)"
    if cid in EXPECTED_FALLBACK:
        assert r["status"] == "fallback", \
            f"{cid} no longer falls back: delete it from EXPECTED_FALLBACK"
    else:
        assert r["status"] == "pass", f"{cid}: {r['status']}: {r['reason']}"


def test_opdb_expectations_are_cases():
    """A stale expectation (a renamed op, a typo) would silently test nothing."""
    ids = {H.case_id(c) for c in CASES}
    stale = sorted((set(EXPECTED_FALLBACK) | set(KNOWN_BUGS) | ZERO_NO_GRAPH) - ids)
    assert not stale, f"expectations for cases that do not exist: {stale}"
