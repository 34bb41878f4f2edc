"""Targeted random cases for ember-split-reductions and ember-channels-last (fuzz9f, issue 9):
long column/row reductions with few results (f32/bf16/f16/int, NaN/inf sprinkled) and
conv-bn-act-pool chains, through the fuzzer's comparator on target triton (interpreter); conv
chains also with channels_last=True on triton and cpu.

    TRITON_INTERPRET=1 python benchmarks/results/fuzz9f/targeted_new_passes.py red|conv FIRST COUNT [DEADLINE_EPOCH]
"""
import random, sys, time, json, os, traceback
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "test"))
os.environ.setdefault("TRITON_INTERPRET", "1")
import torch
from fuzz import compare
from fuzz.compare import check
_vo = compare.variant_options
compare.variant_options = lambda v, t: {"channels_last": True} if v == "cl" else _vo(v, t)
import ember

HEADER = "import torch\nimport torch.nn.functional as F\nnan, inf = float('nan'), float('inf')\n"

def case(inputs, body, exact):
    args = ", ".join(f"a{i}" for i in range(inputs.count("\n") + 1))
    ind = lambda t: "\n".join("    " + l for l in t.strip().splitlines())
    return (f"{HEADER}EXACT = {list(exact)!r}\n\ndef make_inputs():\n{ind(inputs)}\n"
            f"    return [{args}]\n\ndef fn({args}):\n{ind(body)}\n")

def tensor_expr(rng, shape, dtype, seed, special):
    e = f"torch.randn({shape}, generator=torch.Generator().manual_seed({seed}))"
    if rng.random() < 0.3:
        e = f"({e} * 1000)"
    if dtype in ("int32", "int64", "int8"):
        e = f"({e} * 50).to(torch.{dtype})"
    else:
        e = f"{e}.to(torch.{dtype})"
    if special and dtype not in ("int32", "int64", "int8"):
        vals = rng.sample(["nan", "inf", "-inf", "-0.0", "0.0"], k=rng.randint(1, 3))
        e = f"_sprinkle({e}, {vals!r}, {seed})"
    return e

SPRINKLE = """def _sprinkle(t, vals, seed):
    g = torch.Generator().manual_seed(seed + 7)
    flat = t.reshape(-1).clone()
    for v in vals:
        idx = torch.randint(0, flat.numel(), (max(1, flat.numel() // 5000),), generator=g)
        flat[idx] = float(v)
    return flat.reshape(t.shape)
"""

def red_case(rng, seed):
    dtype = rng.choice(["float32", "float32", "bfloat16", "float16", "int32", "int64"])
    kind = rng.choice(["col", "col", "row", "whole", "3d"])
    if kind == "col":
        shape = (rng.choice([4096, 8192, 2048 * 3]), rng.choice([1, 3, 16, 64])); dim = "0"
        if shape[0] * shape[1] < (1 << 18):
            shape = (max(shape[0], (1 << 18) // shape[1]), shape[1])
    elif kind == "row":
        shape = (rng.choice([1, 2, 4, 8]), rng.choice([65536, 65536 * 2])); dim = "-1"
    elif kind == "whole":
        shape = (rng.choice([512, 1024]), rng.choice([512, 1024])); dim = None
    else:
        shape = (rng.choice([16, 32]), rng.choice([512, 1024]), rng.choice([8, 64])); dim = "(0, 1)"
    isint = dtype.startswith("int")
    ops = ["sum", "amax", "amin"] + ([] if isint else ["mean", "max", "min", "logsumexp", "var", "norm", "nansum", "sum_f32"])
    op = rng.choice(ops)
    special = (not isint) and rng.random() < 0.4
    producer = rng.choice(["x", "x * y + 1", "(x - y).abs()", "torch.relu(x) * 2", "x.exp()" if not isint else "x * y"])
    two = "y" in producer
    inputs = [f"a0 = {tensor_expr(rng, shape, dtype, seed, special)}"]
    if two:
        inputs.append(f"a1 = {tensor_expr(rng, shape, dtype, seed + 1, False)}")
    body = "x = a0\n" + ("y = a1\n" if two else "") + f"t = {producer}\n"
    d = dim
    if op == "sum_f32":
        expr = f"t.sum({d + ', ' if d else ''}dtype=torch.float32)"
    elif op in ("max", "min"):
        dd = d if d and d[0] != "(" else "0"
        expr = f"tuple(t.{op}({dd}))"
    elif op == "logsumexp":
        expr = f"torch.logsumexp(t, {d if d else '(0, 1)'})"
    elif op == "var":
        expr = f"t.var({d if d else ''})" if d else "t.var()"
    elif op == "norm":
        expr = f"torch.linalg.vector_norm(t{', dim=' + d if d else ''})"
    else:
        expr = f"t.{op}({d if d else ''})"
    keep = rng.random() < 0.5 and d and op not in ("max", "min", "logsumexp", "var", "norm") and op != "sum_f32"
    if keep:
        expr = expr[:-1] + ", keepdim=True)"
    body += f"r = {expr}\nreturn r if isinstance(r, tuple) else (r,)\n"
    exactv = op in ("amax", "amin", "max", "min") or isint
    low = dtype in ("bfloat16", "float16")
    n_out = 2 if op in ("max", "min") else 1
    ex = [True if exactv else ("low" if low else False)] * n_out
    if op in ("max", "min"):
        ex = [True, True]
    src = case("\n".join(inputs), body, ex)
    return src.replace("def make_inputs", SPRINKLE + "\ndef make_inputs")

def conv_case(rng, seed):
    dtype = rng.choice(["float32", "float32", "bfloat16"])
    N = rng.choice([1, 2]); C = rng.choice([3, 4, 8]); H = rng.choice([7, 8, 11, 16]); W = rng.choice([7, 9, 16])
    inputs = [f"a0 = {tensor_expr(rng, (N, C, H, W), dtype, seed, rng.random() < 0.3)}"]
    body = ["x = a0"]
    nconv = rng.choice([2, 3])
    cin = C; k = 1
    for i in range(nconv):
        cout = rng.choice([4, 8, 16]); ks = rng.choice([1, 3]); st = rng.choice([1, 1, 2]); pad = rng.choice([0, 1]) if ks == 3 else 0
        groups = rng.choice([1, 1, cin]) if cout % cin == 0 else 1
        w = len(inputs); inputs.append(f"a{w} = (torch.randn({cout}, {cin // groups}, {ks}, {ks}, generator=torch.Generator().manual_seed({seed + 10 + i})) * 0.3).to(torch.{dtype})")
        bias = "None"
        if rng.random() < 0.5:
            b = len(inputs); inputs.append(f"a{b} = torch.randn({cout}, generator=torch.Generator().manual_seed({seed + 20 + i})).to(torch.{dtype})"); bias = f"a{b}"
        resid = rng.random() < 0.3 and st == 1 and cout == cin and (ks == 1 or pad == 1)
        body.append(f"{'x0 = x; ' if resid else ''}x = F.conv2d(x, a{w}, {bias}, stride={st}, padding={pad}, groups={groups})")
        H = (H + 2 * pad - ks) // st + 1; W = (W + 2 * pad - ks) // st + 1
        if rng.random() < 0.7:
            s = len(inputs)
            inputs.append(f"a{s} = torch.rand({cout}, generator=torch.Generator().manual_seed({seed + 30 + i})).to(torch.{dtype}) + 0.5")
            inputs.append(f"a{s+1} = torch.randn({cout}, generator=torch.Generator().manual_seed({seed + 40 + i})).to(torch.{dtype})")
            tr = rng.random() < 0.25
            body.append(f"x = F.batch_norm(x, {'a%d.clone()' % (s+1) if tr else 'a%d' % (s+1)}, {'a%d.clone()' % s if tr else 'a%d' % s}, a{s}, a{s+1}, {tr}, 0.1, 1e-5)")
        if resid:
            body.append("x = x + x0")
        act = rng.choice(["relu", "relu", "relu6", "silu", "none"])
        if act == "relu": body.append("x = torch.relu(x)")
        elif act == "relu6": body.append("x = F.relu6(x)")
        elif act == "silu": body.append("x = F.silu(x)")
        if rng.random() < 0.5 and min(H, W) >= 4:
            pk = rng.choice([2, 3]); ps = rng.choice([1, 2]); pp = rng.choice([0, 1]) if pk == 3 else 0
            cm = rng.random() < 0.3
            if rng.random() < 0.7:
                body.append(f"x = F.max_pool2d(x, {pk}, {ps}, {pp}, ceil_mode={cm})")
            else:
                body.append(f"x = F.avg_pool2d(x, {pk}, {ps}, {pp}, ceil_mode={cm}, count_include_pad={rng.random() < 0.5})")
            H = (H + 2 * pp - pk) // ps + 1; W = (W + 2 * pp - pk) // ps + 1
        cin = cout
        if min(H, W) < 2: break
    tail = rng.choice(["x", "x.mean((2, 3))", "F.adaptive_avg_pool2d(x, 1).flatten(1)", "x.float()"])
    body.append(f"return ({tail},)")
    ex = ["low" if dtype == "bfloat16" else False]
    return case("\n".join(inputs), "\n".join(body), ex).replace("def make_inputs", SPRINKLE + "\ndef make_inputs")

if __name__ == "__main__":
    what, s0, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    deadline = float(sys.argv[4]) if len(sys.argv) > 4 else 1e18
    outdir = os.environ.get("OUT", "fuzz9f-out") + f"/{what}"; os.makedirs(outdir, exist_ok=True)
    stats = {}
    for seed in range(s0, s0 + n):
        if time.time() > deadline: break
        rng = random.Random(seed)
        src = (red_case if what == "red" else conv_case)(rng, seed * 100)
        t0 = time.time()
        try:
            if what == "red":
                r = check(src, "triton")
            else:
                r = check(src, "triton")
                reps0 = ember.last_reports()
                if r["status"] == "pass":
                    r2 = check(src, "triton", ("cl",))
                    if r2["status"] != "pass": r = r2; r["reason"] = "[triton cl] " + r["reason"]
                if r["status"] == "pass":
                    r2 = check(src, "cpu", ("cl",))
                    if r2["status"] != "pass": r = r2; r["reason"] = "[cpu] " + r["reason"]
            reps = ember.last_reports() if what == "red" else reps0
            extra = [sorted(k for k in rep if "split" in k or "channels" in k) for rep in reps]
            groups = [g for rep in reps for g in rep.get("fused_groups") or []]
        except Exception as e:
            r = {"status": "crash", "reason": traceback.format_exc()[-500:], "fallback": []}; groups = []
        stats[r["status"]] = stats.get(r["status"], 0) + 1
        line = f"{what} {seed} {r['status']} {time.time()-t0:.1f}s fb={r['fallback']} reason={r['reason']} ngroups={len(groups)} transposes={sum('transpose' in g for g in groups)}"
        print(line, flush=True)
        if r["status"] != "pass" or r["fallback"]:
            open(f"{outdir}/{seed}.py", "w").write(f"# {line}\n" + src)
    print("STATS", stats)
