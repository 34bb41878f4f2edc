"""Where an ember training step's time goes on the GPU: per compiled graph, host milliseconds per
call, whether it replays as a CUDA graph (inputs copied / read in place, outputs), peak memory,
the step against eager, a cProfile of three steps and the profiler's kernel table.

    python benchmarks/train_host_profile.py resnet50|gpt2|bert asis|force     (OUT=dir for files)

`force` replays every graph as a CUDA graph (graph_pays_off always true), to weigh the cost
model's choice. Models and the training step come from model_zoo.py (bf16 autocast, AdamW).
This is how the 2026-11-25 training-step fixes were found (docs/internals.md, CUDA graphs)."""
import cProfile, io, json, os, pstats, statistics, sys, time, copy
from collections import defaultdict
import torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_zoo as mz
import ember  # noqa
from ember.frontend import compile as ec

name, variant = sys.argv[1], sys.argv[2]
out = os.environ.get("OUT", "/tmp")
if variant == "force":
    from ember.frontend import compile_module
    compile_module.graph_pays_off = lambda *a, **k: True
host = defaultdict(float); calls = defaultdict(int)
orig = ec.EmberGraph.__call__
def timed(self, *args):
    t0 = time.perf_counter(); r = orig(self, *args)
    host[self.graph_id] += time.perf_counter() - t0; calls[self.graph_id] += 1
    return r
ec.EmberGraph.__call__ = timed
from ember.runtime import cuda_graphs as cgm
GP = []
_gi = cgm.GraphedProgram.__init__
def gi(self, *a, **k):
    _gi(self, *a, **k); GP.append(self)
cgm.GraphedProgram.__init__ = gi
_cap = cgm.GraphedProgram._capture
def cap(self, inputs):
    try:
        return _cap(self, inputs)
    except Exception as e:
        print("  CAPTURE FAILED", type(e).__name__, str(e)[:300], flush=True); raise
cgm.GraphedProgram._capture = cap
_call = cgm.GraphedProgram.__call__
def call(self, *inputs):
    if not self._failed and self._graph is None and any(t.device.type == "cpu" and i not in self._unread for i, t in enumerate(inputs)):
        print("  HOST INPUTS", [(i, t.shape) for i, t in enumerate(inputs) if t.device.type == "cpu"][:5], flush=True)
    return _call(self, *inputs)
cgm.GraphedProgram.__call__ = call
torch.backends.cuda.matmul.allow_tf32 = False
base, inputs, loss_fn = mz.build(name, "cuda", False)
model = copy.deepcopy(base).train(); ref = copy.deepcopy(base).train()
step, opt = mz._train_fns(model, inputs, loss_fn, "train-bf16", lambda f: torch.compile(f, backend="ember"))
rstep, _ = mz._train_fns(ref, inputs, loss_fn, "train-bf16", None)
t0 = time.perf_counter(); step(); torch.cuda.synchronize(); print(name, variant, "first step s", round(time.perf_counter() - t0, 1), flush=True)
for _ in range(4): step(); rstep()
torch.cuda.synchronize()
def tm(f, n=10):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); f(); torch.cuda.synchronize(); ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)
host.clear(); calls.clear()
e, r = [], []
for _ in range(3):
    e.append(tm(step, 5)); r.append(tm(rstep, 5))
print(name, variant, "step ms ember", round(statistics.median(e), 2), "eager", round(statistics.median(r), 2), flush=True)
n = sum(calls.values()) and max(calls.values())
for gid in host:
    print("  graph", gid, "calls", calls[gid], "host ms/call", round(host[gid] / calls[gid] * 1e3, 2))
reps = ember.last_reports()
for rp in reps:
    print("  report", rp.get("graph_id"), rp.get("kind"), rp.get("status"), "kernels", rp.get("num_kernels"), "externs", rp.get("num_externs"), "cg", rp.get("cudagraphs"), "libs", len(rp.get("library_calls", []) or []))
for g in GP:
    print("  graphed", "captured", g.captured, "failed", g._failed, "copied", len(g._copied), "inplace", len(g._inplace), "recaptures", g._recaptures, "outs", len(g._static_out),
          "pooled in", len(g._pooled), "guarded out", len(g._guarded), "ungraphed", g.ungraphed_calls,
          "pool MB", round(g.pool_bytes / 2**20, 1), flush=True)
torch.cuda.reset_peak_memory_stats(); step(); torch.cuda.synchronize()
print("  peak GB", round(torch.cuda.max_memory_allocated() / 1e9, 2))
pr = cProfile.Profile(); pr.enable()
for _ in range(3): step()
torch.cuda.synchronize(); pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(35)
open(f"{out}/prof_{name}_{variant}.txt", "w").write(s.getvalue())
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
    step(); torch.cuda.synchronize()
ka = p.key_averages()
gpu = sum(k.self_device_time_total for k in ka) / 1e3
print("  gpu ms (sum of self device time)", round(gpu, 2))
open(f"{out}/kern_{name}_{variant}.txt", "w").write(ka.table(sort_by="self_device_time_total", row_limit=40))
