"""Parallel compile of a Triton program's kernels (runtime/triton_warm.py), without a GPU.

A small graph (a pointwise kernel, autotuned over 3 configurations, and a reduction) is
compiled through the interpreter to get its Program; a fresh interpreter (the Triton
interpreter patches triton in place) with a stand-in driver that names sm_90 then finds the
first call's compile requests, compiles them in 2 worker processes (the process's pool, or
workers started for the call) into a fresh Triton cache,
and replays the launches' own compiles through Triton's JIT: each must be a cache hit (no new
cache entry), which proves that the workers compiled exactly what the launches ask for.
"""
import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("triton")
if torch.cuda.is_available():
    # these tests stand in a fake sm_90 driver for a machine without a GPU; on a GPU the pool
    # compiles for the real device, which the benchmarks and test_cuda_graphs exercise
    pytest.skip("the stand-in driver is for machines without a GPU", allow_module_level=True)

import ember  # noqa: E402,F401
from ember.runtime import executor  # noqa: E402

# a child process's Triton builds for sm_90 on a machine without a GPU (a stand-in driver),
# and the launches a pickled Program's first call makes (what the runtime precompiles)
SM90_HERE = textwrap.dedent('''
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver

    class FakeDriver:
        def get_current_device(self): return 0
        def get_current_stream(self, device=None): return 0
        def get_current_target(self): return GPUTarget("cuda", 90, 32)
    driver.set_active(FakeDriver())

    def launches_of(prog):
        # [(launcher, [(shape, torch dtype, pointer offset)])] of a Program's kernel steps
        import torch
        return [(s.name, [(tuple(prog.values[i].shape), getattr(torch, prog.values[i].dtype),
                           prog.values[i].offset or 0) for i in list(s.inputs) + list(s.outputs)])
                for s in prog.steps if s.kind == "kernel"]
''')


SCRIPT = textwrap.dedent('''
    import glob, json, os, pickle, sys, time
    os.environ.pop("TRITON_INTERPRET", None)
    prog = pickle.load(open(sys.argv[1], "rb"))
''') + SM90_HERE + textwrap.dedent('''
    if sys.argv[4] == "3.6-spec":
        # Triton 3.6 serializes a specialization without its target
        import triton.runtime.jit as tj
        real_ser = tj.serialize_specialization_data

        def ser(*a, **k):
            obj = json.loads(real_ser(*a, **k))
            obj.pop("target", None)
            return json.dumps(obj)
        tj.serialize_specialization_data = ser
    import torch
    from ember.runtime import triton_warm
    path = sys.argv[2]
    with open(path, "w") as f:
        f.write(prog.source)
    mod = triton_warm.load_as(prog.source, path, "ember_generated_warmtest")
    from ember.runtime.py_module import share_identical_kernels
    shared = share_identical_kernels(mod)      # as the runtime loads it
    launches = launches_of(prog)
    if sys.argv[3] == "pool":   # the process's pool (the backend starts it for GPU graphs)
        triton_warm.start_pool(2)
    reqs = triton_warm.compile_requests(mod, launches, "cuda")
    cached_before = sum(triton_warm.in_triton_cache(mod, *r) for r in reqs)
    res = triton_warm.compile_pool(prog.source, path, mod.__name__, reqs, jobs=2)
    cached_after = sum(triton_warm.in_triton_cache(mod, *r) for r in reqs)
    # a warm start: everything is in Triton's cache, so no worker starts
    started = []
    real_run = triton_warm.run_workers
    triton_warm.run_workers = lambda *a, **k: started.append(1) or real_run(*a, **k)
    mod.__ember_source__ = prog.source
    warm = triton_warm.precompile(mod, launches, "cuda")
    # the next warm start of this program: the stamp the first left, no request looked up
    looked = []
    real_lookup = triton_warm.in_triton_cache
    triton_warm.in_triton_cache = lambda *a: looked.append(1) or real_lookup(*a)
    stamped = triton_warm.precompile(mod, launches, "cuda")
    triton_warm.in_triton_cache = real_lookup
    triton_warm.run_workers = real_run
    cache = os.environ["TRITON_CACHE_DIR"]
    before = sorted(glob.glob(cache + "/*/*.cubin"))
    t0 = time.perf_counter()
    for jit, args, kw in triton_warm.launch_variants(mod, launches, "cuda"):
        k = jit.run(*args, grid=None, warmup=True, **kw)
        assert k.asm.get("cubin"), "no cubin"
    replay = time.perf_counter() - t0
    after = sorted(glob.glob(cache + "/*/*.cubin"))
    print(json.dumps({"requests": [r[0] for r in reqs], "res": res, "before": len(before),
                      "shared": shared,
                      "cached_before": cached_before, "cached_after": cached_after,
                      "warm": warm, "warm_workers": len(started),
                      "stamped": stamped, "stamped_lookups": len(looked),
                      "pool": triton_warm._pool is not None and triton_warm._pool.jobs,
                      "after": len(after), "replay_s": replay,
                      "variants": len(triton_warm.launch_variants(mod, launches, "cuda"))}))
''')


def _program(monkeypatch, fn, *args, **options):
    got = []
    real = executor.load

    def spy(program, *a, **kw):
        got.append((program, kw))
        return real(program, *a, **kw)
    monkeypatch.setattr(executor, "load", spy)
    torch._dynamo.reset()
    out = torch.compile(fn, backend="ember", options={"target": "triton", **options})(*args)
    torch.testing.assert_close(out, fn(*args), rtol=1e-4, atol=1e-4)
    assert got
    return got


def f(x, y, z):
    # two kernels: a reduction, and a pointwise one (autotuned over 3 configurations: z has
    # more than triton_blocks.LAUNCH_BOUND elements) that reads nothing the reduction reads
    # (ember-fuse's horizontal fusion would merge them)
    return (x * y + 1.0).sum(dim=-1), torch.relu(z - 1.0)


def mm(x, w, b):
    return torch.relu(x @ w + b)


def twins(a, b):
    # two kernels (different inputs, nothing to fuse) whose code is the same: the sizes that
    # differ are the launchers' (xnumel), the row length (512) is the same
    return torch.relu(a) * 2, torch.relu(b) * 2


@pytest.mark.parametrize("fn,shapes,spec", [
    (f, [(64, 300), (64, 300), (70000,)], "3.9-spec"),
    # a matmul kernel: the template and the library variant's epilogue (ember-matmul-template)
    (mm, [(30, 20), (20, 24), (24,)], "3.9-spec"),
    # Triton 3.6 (the GPU machine's) records no target in the specialization: every worker
    # failed with KeyError 'target' and each kernel compiled in the launching process
    (f, [(64, 300), (64, 300), (70000,)], "3.6-spec")], ids=["f", "mm", "f-triton36-spec"])
def test_pool_compiles_every_kernel_and_config_for_sm90(monkeypatch, tmp_path, fn, shapes, spec):
    args = [torch.randn(*s) for s in shapes]
    # the template is an option (matmul_template, off by default)
    (program, kw), = _program(monkeypatch, fn, *args,
                              **({"matmul_template": "auto"} if fn is mm else {}))
    assert kw.get("parallel_compile") is True
    assert any(s.kind == "kernel" for s in program.steps)
    (tmp_path / "p.pkl").write_bytes(pickle.dumps(program))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton_cache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "p.pkl"),
                           str(tmp_path / "kernels.py"), "pool" if fn is f else "one-shot",
                           spec],
                          env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(r)
    assert r["res"]["errors"] == []
    # every launch variant (kernel x kept configuration) is one request, all compiled
    kernels = [s.name for s in program.steps if s.kind == "kernel"]
    assert r["shared"] == {}
    assert r["variants"] > len(kernels)
    if fn is mm:
        assert any(n.endswith("_mm_kernel") for n in r["requests"]), r["requests"]
        assert any(n.endswith("_epilogue_kernel") for n in r["requests"]), r["requests"]
    assert len(r["requests"]) == r["variants"] == r["res"]["ok"]
    assert r["before"] == r["res"]["ok"]
    assert r["after"] == r["before"], "a launch missed the cache the workers filled"
    # the cache lookup agrees with Triton's own: nothing before the pool, everything after
    assert r["cached_before"] == 0 and r["cached_after"] == len(r["requests"])
    assert r["warm"]["seconds"] >= 0
    assert {k: v for k, v in r["warm"].items() if k != "seconds"} == {
        "ok": 0, "errors": [], "cached": len(r["requests"])}
    assert r["warm_workers"] == 0
    assert r["stamped"]["stamped"] and r["stamped"]["errors"] == [] and r["stamped_lookups"] == 0
    assert r["pool"] == (2 if fn is f else False)


def test_spec_gets_the_target_only_where_triton_left_it_out():
    from ember.runtime.triton_warm import spec_with_target
    from triton.backends.compiler import GPUTarget
    calls = []

    def target():
        calls.append(1)
        return GPUTarget("hip", "gfx942", 64)
    spec39 = json.dumps({"name": "k", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}})
    assert spec_with_target(spec39, target) == spec39 and not calls
    got = json.loads(spec_with_target(json.dumps({"name": "k"}), target))
    assert got == {"name": "k", "target": {"backend": "hip", "arch": "gfx942", "warp_size": 64}}
    assert GPUTarget(**got["target"]) == GPUTarget("hip", "gfx942", 64)


def test_option_turns_it_off(monkeypatch):
    x, y, z = torch.randn(8, 16), torch.randn(8, 16), torch.randn(30)
    (_, kw), = _program(monkeypatch, f, x, y, z, parallel_compile=False)
    assert kw.get("parallel_compile") is False
    from ember.frontend.options import CompileOptions, OptionsError
    with pytest.raises(OptionsError):
        CompileOptions(parallel_compile="yes")


def test_pool_failure_is_reported_and_never_raises(monkeypatch):
    """A worker that dies or a pool that cannot start costs only the parallelism: precompile
    reports it and returns; each launch then compiles for itself (Triton's JIT, one by one)."""
    from ember.runtime import triton_warm
    monkeypatch.setattr(triton_warm, "run_workers",
                        lambda argv, payloads, timeout: [(-9, "", "killed")] * len(payloads))
    r = triton_warm.compile_pool("", "/nonexistent.py", "m", [("k", "{}")] * 3, jobs=2)
    assert r["ok"] == 0 and len(r["errors"]) == 2 and "worker exit -9" in r["errors"][0]

    def boom(*a, **k):
        raise OSError("cannot start a process")
    monkeypatch.setattr(triton_warm, "run_workers", boom)
    monkeypatch.setattr(triton_warm, "start_pool", lambda *a, **k: None)   # cannot start one
    monkeypatch.setattr(triton_warm, "compile_requests", lambda *a: [("k", "{}")])
    monkeypatch.setattr(triton_warm, "in_triton_cache", lambda *a: False)
    r = triton_warm.precompile(type("M", (), {"__ember_source__": "", "__file__": "x.py",
                                              "__name__": "m"})(), [], "cuda")
    assert r["ok"] == 0 and "cannot start a process" in r["errors"][0]


def test_worker_pool_is_reused_and_replaces_dead_workers(tmp_path):
    """The process's pool (started when a GPU graph reaches the backend): one worker answers
    request after request, holding the module it loaded; a dead worker is replaced before the
    next request is sent; a timeout costs that request only, and the next gets a fresh
    worker."""
    from ember.runtime.triton_warm import WorkerPool
    pool = WorkerPool(1)
    pool.start()
    first = pool._procs[0]
    path = str(tmp_path / "m.py")
    bad = [("nope", "{}")]     # not in the module: the worker answers its error

    def queue(source="X = 1\n", timeout=300):
        return pool.compile_queue(source, path, "m_pool_test", bad, 1, timeout)
    try:
        for _ in range(2):
            r = queue()
            assert r["ok"] == 0 and len(r["errors"]) == 1 and r["errors"][0].startswith("nope: ")
            assert "worker exit" not in r["errors"][0], r
        assert pool._procs[0] is first, "a second request started another worker"
        first.kill()
        first.wait()
        r = queue()             # a fresh worker in its place loads the module and answers
        assert r["errors"][0].startswith("nope: ") and "worker exit" not in r["errors"][0], r
        assert pool._procs[0] is not first
        r = queue("import time\ntime.sleep(30)\n", timeout=0.5)
        assert "timeout" in r["errors"][0] and pool._procs[0] is None, r
        r = queue()
        assert r["ok"] == 0 and "worker exit" not in r["errors"][0], r
    finally:
        pool.close()
    assert all(p is None for p in pool._procs)


def test_cold_start_is_an_empty_triton_cache(monkeypatch, tmp_path):
    """The backend starts the pool before tracing only on a cold start (nothing in Triton's
    cache); a warm start starts no worker unless a graph has something to compile."""
    from ember.runtime import triton_warm
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    assert triton_warm.triton_cache_is_empty()          # missing
    (tmp_path / "triton").mkdir()
    assert triton_warm.triton_cache_is_empty()          # empty
    (tmp_path / "triton" / "ab").mkdir()
    assert not triton_warm.triton_cache_is_empty()


SHARED_SCRIPT = textwrap.dedent('''
    import glob, json, os, pickle, sys
    os.environ.pop("TRITON_INTERPRET", None)
''') + SM90_HERE + textwrap.dedent('''
    import torch
    from ember.runtime import triton_warm
    from ember.runtime.py_module import share_identical_kernels
    out = []
    cache = os.environ["TRITON_CACHE_DIR"]
    for k, path in enumerate(sys.argv[1:3]):
        prog = pickle.load(open(path, "rb"))
        src_path = path + ".py"
        with open(src_path, "w") as f:
            f.write(prog.source)
        mod = triton_warm.load_as(prog.source, src_path, f"ember_generated_shared{k}")
        mod.__ember_source__ = prog.source
        shared = share_identical_kernels(mod)
        launches = launches_of(prog)
        reqs = triton_warm.compile_requests(mod, launches, "cuda")
        started = []
        real_run = triton_warm.run_workers
        triton_warm.run_workers = lambda *a, **k: started.append(1) or real_run(*a, **k)
        res = triton_warm.precompile(mod, launches, "cuda", jobs=2)
        triton_warm.run_workers = real_run
        out.append({"shared": shared, "requests": [r[0] for r in reqs],
                    "foreign": [triton_warm.foreign(mod, r[0]) for r in reqs],
                    "res": res, "workers": len(started), "mod": (mod, launches)})
    # both graphs loaded and precompiled (as a training step's forward and backward are,
    # before the backward's first launch), then their launches
    for r in out:
        mod, launches = r.pop("mod")
        r["before"] = len(glob.glob(cache + "/*/*.cubin"))
        for jit, args, kw in triton_warm.launch_variants(mod, launches, "cuda"):
            jit.run(*args, grid=None, warmup=True, **kw)
        r["after"] = len(glob.glob(cache + "/*/*.cubin"))
    print(json.dumps(out))
''')


def test_identical_kernels_compile_once_within_and_across_graphs(monkeypatch, tmp_path):
    """share_identical_kernels: the second of two kernels of one graph whose code is the same
    but for the name (`twins`) is bound to the first; so is a later graph's identical kernel
    (a backward repeating its forward's casts), across modules. The first graph's precompile
    compiles the shared kernel once (for both launches' specializations); the second graph's
    finds its requests (the first's kernel, by the name the second module holds it under) in
    Triton's cache and starts no worker; every launch is a cache hit."""
    paths, names = [], []
    for k, (fn, shapes) in enumerate([(twins, [(64, 512), (96, 512)]),
                                      (lambda c: torch.relu(c) * 2, [(32, 512)])]):
        (program, _), = _program(monkeypatch, fn, *[torch.randn(*s) for s in shapes])
        names.append([s.name + "_kernel" for s in program.steps if s.kind == "kernel"])
        paths.append(tmp_path / f"p{k}.pkl")
        paths[-1].write_bytes(pickle.dumps(program))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton_cache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", SHARED_SCRIPT, *map(str, paths)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    first, second = json.loads(proc.stdout.strip().splitlines()[-1])
    print(first, second)
    (a, b), (c,) = names
    assert first["shared"] == {b: a}, (names, first["shared"])
    assert set(first["requests"]) == {a} and not any(first["foreign"])
    assert first["res"]["ok"] == len(first["requests"]) and first["res"]["errors"] == []
    assert first["after"] == first["before"] == first["res"]["ok"], "a launch missed the cache"
    assert second["shared"] == {c: f"ember_generated_shared0:{a}"}, second["shared"]
    assert set(second["requests"]) == {c} and all(second["foreign"])
    assert second["res"]["ok"] == 0 and second["res"]["cached"] == len(second["requests"]) > 0
    assert second["workers"] == 0 and "left_to_launch" not in second["res"]
    assert second["after"] == second["before"] == first["after"], "a launch missed the cache"


def test_worker_loads_generated_modules_without_importing_torch(monkeypatch, tmp_path):
    """A worker (this file run as a script, as the pool runs it) holds a stand-in for torch:
    executing a generated module reads only torch.version, so torch itself is not imported
    (seconds of each worker's start); anything else asked of it imports the real torch."""
    (program, _), = _program(monkeypatch, f, torch.randn(8, 16), torch.randn(8, 16),
                             torch.randn(30))
    src = tmp_path / "generated.py"
    src.write_text(program.source)
    from ember.runtime import triton_warm
    script = textwrap.dedent(f'''
        import sys
        sys.path.insert(0, {os.path.dirname(triton_warm.__file__)!r})
        import triton_warm
        triton_warm._lazy_torch()
        source = open({str(src)!r}).read()
        mod = triton_warm.load_as(source, {str(src)!r}, "ember_generated_standin")
        assert "torch._C" not in sys.modules, "a generated module imported torch"
        assert callable(mod.{program.kernel_names[0]})
        import torch
        assert torch.float32 is not None and "torch._C" in sys.modules
        assert sys.modules["torch"].Tensor is torch.Tensor
        print("ok")
    ''')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


QUEUE_MODULE = '''
import os, sys, time
with open({loads!r}, "a") as f:     # one line per time a worker executes this module
    f.write(str(os.getpid()) + "\\n")


def __getattr__(name):              # what compile_request looks the kernel up by
    if name == "die":
        os._exit(3)
    if name == "slow":
        time.sleep(30)
    raise AttributeError(name)
'''

# a specialization that parses (compile_request gets as far as looking the kernel up)
SPEC = json.dumps({"target": {"backend": "cuda", "arch": 90, "warp_size": 32},
                   "constant_keys": [], "constant_vals": [], "attrs_keys": [],
                   "attrs_vals": [], "signature": {}, "options": {}})


def test_compile_queue_answers_each_request_once_and_sends_a_module_once(tmp_path):
    """The pool's queue (compile_pool with the process's pool): every request is compiled by
    one worker, once, and answered (here each fails: the module defines no kernel); a worker
    is sent a module's text once and keeps it loaded for the next requests, until the text
    changes; a worker that dies costs the request it held, the next request gets a fresh
    worker (which loads the module again); past the timeout, what was running or not yet sent
    is reported, never compiled twice or dropped silently."""
    from ember.runtime.triton_warm import WorkerPool
    loads = tmp_path / "loads.txt"
    source = QUEUE_MODULE.format(loads=str(loads))
    path, mod = str(tmp_path / "q.py"), "ember_queue_test"
    pool = WorkerPool(2)
    try:
        reqs = [(f"k{i}", SPEC) for i in range(7)]
        r = pool.compile_queue(source, path, mod, reqs, jobs=2, timeout=300)
        assert r["ok"] == 0 and sorted(e.split(":")[0] for e in r["errors"]) == \
            sorted(n for n, _ in reqs), r
        pids = loads.read_text().split()
        assert len(pids) == 2 and len(set(pids)) == 2, pids     # each worker loaded it once
        r = pool.compile_queue(source, path, mod, reqs[:4], jobs=2, timeout=300)
        assert len(r["errors"]) == 4 and len(loads.read_text().split()) == 2   # still held
        # another text: loaded again by each worker that gets a request of it
        r = pool.compile_queue(source + "\n", path, mod, reqs[:4], jobs=1, timeout=300)
        assert len(r["errors"]) == 4 and len(loads.read_text().split()) == 3
        # a worker that dies mid-queue: its request reported, the rest compiled by a new one
        r = pool.compile_queue(source, path, mod, [("k0", SPEC), ("die", SPEC), ("k1", SPEC),
                                                   ("k2", SPEC)], jobs=1, timeout=300)
        names = [e.split(":")[0] for e in r["errors"]]
        assert names == ["k0", "die", "k1", "k2"], r["errors"]
        assert "worker exit 3" in r["errors"][1]
        assert len(loads.read_text().split()) == 5      # the text again (3 -> 4), a new worker
        r = pool.compile_queue(source, path, mod, [("slow", SPEC), ("k0", SPEC)], jobs=1,
                               timeout=1.0)
        assert [e.split(":")[0] for e in r["errors"]] == ["slow", "k0"], r["errors"]
        assert "timeout" in r["errors"][0] and "not sent" in r["errors"][1]
        assert pool._procs[0] is None and pool._has[0] is None
    finally:
        pool.close()


def test_longest_first_is_an_order_of_the_same_requests():
    """compile_pool's order: the estimated costliest kernel first (an unrolled
    `tl.static_range` body counted per iteration), the same requests, none lost or repeated,
    ties in launch order."""
    from ember.runtime.triton_warm import estimated_cost, longest_first
    source = textwrap.dedent('''
        @triton.jit
        def small_kernel(x, XBLOCK: tl.constexpr):
            a = 1
            b = 2


        @triton.jit
        def unrolled_kernel(x, XBLOCK: tl.constexpr):
            acc = 0
            for r in tl.static_range(32):
                acc = acc + r
                acc = acc * 2
            tl.store(x, acc)


        @triton.jit
        def long_kernel(x, XBLOCK: tl.constexpr):
    ''') + "".join(f"    v{i} = {i}\n" for i in range(20))
    assert estimated_cost(source, "small_kernel") == 2
    assert estimated_cost(source, "unrolled_kernel") == 1 + 64 + 1
    assert estimated_cost(source, "long_kernel") == 20
    reqs = [("small_kernel", "a"), ("long_kernel", "a"), ("unrolled_kernel", "a"),
            ("small_kernel", "b"), ("unrolled_kernel", "b"), ("missing_kernel", "a")]
    order = longest_first(source, reqs)
    assert sorted(order) == sorted(reqs)
    assert order == [("unrolled_kernel", "a"), ("unrolled_kernel", "b"), ("long_kernel", "a"),
                     ("small_kernel", "a"), ("small_kernel", "b"), ("missing_kernel", "a")]


def test_compile_workers_follow_the_setting_then_the_affinity(monkeypatch):
    """How many workers a pool starts: EMBER_COMPILE_WORKERS where set, else the cores this
    process may run on (a `taskset` pins it to fewer than os.cpu_count()), at most MAX_JOBS."""
    from ember.runtime import env, triton_warm
    assert env.read_env({"EMBER_COMPILE_WORKERS": "8"}).compile_workers == 8
    assert env.read_env({}).compile_workers is None
    for bad in ("0", "-2", "many"):
        with pytest.raises(ValueError, match="EMBER_COMPILE_WORKERS"):
            env.read_env({"EMBER_COMPILE_WORKERS": bad})
    try:
        env.set_env(env.read_env({"EMBER_COMPILE_WORKERS": "3"}))
        assert triton_warm.default_jobs() == 3
        env.set_env(env.read_env({"EMBER_COMPILE_WORKERS": "500"}))
        assert triton_warm.default_jobs() == triton_warm.MAX_JOBS
        env.set_env(env.read_env({}))
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
        monkeypatch.setattr(os, "cpu_count", lambda: 128)
        assert triton_warm.default_jobs() == 3
    finally:
        env.set_env(None)


def test_worker_warm_up_compiles_and_leaves_no_cache_entry(tmp_path):
    """A pool worker started with a warm-up target compiles a throw-away kernel for it (Triton's
    first-compile set-up paid while the parent traces) in a temporary cache: the Triton cache
    the worker shares stays empty (the next process's cold-start test reads it), and the
    worker then compiles its requests as before."""
    from ember.runtime import triton_warm
    cache = tmp_path / "triton"
    cache.mkdir()
    script = textwrap.dedent(f'''
        import os, sys
        sys.path.insert(0, {os.path.dirname(triton_warm.__file__)!r})
        os.environ["TRITON_CACHE_DIR"] = {str(cache)!r}
        import triton, triton_warm
        compiled = []
        real = triton.compile


        def spy(*a, **k):
            out = real(*a, **k)
            compiled.append(k["target"])       # compiled (an exception is swallowed)
            return out
        triton.compile = spy
        triton_warm._warm_up("cuda:90:32")
        assert os.environ["TRITON_CACHE_DIR"] == {str(cache)!r}
        assert "ember_warmup" not in sys.modules
        triton_warm._warm_up("nonsense")        # never raises
        print(len(compiled), compiled[0].arch, compiled[0].backend)
    ''')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["1", "90", "cuda"], proc.stdout
    assert list(cache.iterdir()) == [], "the warm-up left an entry in Triton's cache"


def test_pool_start_computes_tritons_own_key_in_a_thread(tmp_path):
    """start_pool (the backend's, at a cold start) computes Triton's key of itself
    (`triton_key`, read by every cache lookup: the first precompile's in the parent) in a
    thread, while the parent goes on tracing."""
    script = textwrap.dedent('''
        import threading
        from ember.runtime import triton_warm
        from triton.runtime.cache import triton_key
        assert triton_key.cache_info().currsize == 0
        pool = triton_warm.start_pool(1)
        try:
            for t in threading.enumerate():
                if t.name == "ember-triton-key":
                    t.join(120)
            print(triton_key.cache_info().currsize)
        finally:
            pool.close()
    ''')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "1", proc.stdout



def test_warm_start_computes_tritons_own_key_in_a_thread(tmp_path):
    """A warm start (Triton's cache not empty) starts no compile workers, but the backend has
    Triton's key of itself computed in a thread while the graph is traced: every kernel's
    first launch looks the cache up under a key that holds it (0.43 s of BERT's warm first
    call on the H200 when the first launch computed it)."""
    script = textwrap.dedent('''
        import threading
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        from ember.frontend import backend
        from ember.frontend.options import CompileOptions
        from ember.runtime import triton_warm
        from triton.runtime.cache import triton_key
        assert not triton_warm.triton_cache_is_empty()
        with FakeTensorMode():
            x = torch.empty(4, device="cuda")
        assert triton_key.cache_info().currsize == 0
        backend._start_compile_workers(CompileOptions(), [x])
        backend._start_compile_workers(CompileOptions(), [x])
        threads = [t for t in threading.enumerate() if t.name == "ember-triton-key"]
        for t in threads:
            t.join(120)
        print(len(threads), triton_key.cache_info().currsize, triton_warm._pool is None)
    ''')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cache = tmp_path / "triton"
    (cache / "entry").mkdir(parents=True)
    env["TRITON_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-3:] == ["1", "1", "True"], proc.stdout


@pytest.mark.parametrize("cuda_at", ["lookup", "trace"])
def test_tritons_key_starts_before_dynamo_traces(tmp_path, cuda_at):
    """torch.compile(backend="ember") looks the backend up through the entry point: with CUDA
    in use by then, Triton's key of itself starts computing at once (`lookup`); where CUDA
    comes into use later, at the start of Dynamo's compile (`trace`): in both cases before
    ember's backend is called, so Dynamo's trace hides it."""
    script = textwrap.dedent('''
        import sys, threading
        import torch
        cuda = [sys.argv[1] == "lookup"]
        torch.cuda.is_initialized = lambda: cuda[0]
        from ember.frontend import backend
        from ember.runtime import triton_warm
        order = []
        real_key, real_backend = triton_warm.start_triton_key, backend.ember_backend
        triton_warm.start_triton_key = lambda: order.append("key") or real_key()
        backend.ember_backend = lambda *a, **k: order.append("backend") or real_backend(*a, **k)
        fn = torch.compile(lambda x: x * 2 + 1, backend="ember")
        print("after torch.compile:", ",".join(order) or "-")
        cuda[0] = True
        assert torch.equal(fn(torch.ones(3)), torch.full((3,), 3.0))
        print("after the call:", ",".join(order))
    ''')
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", script, cuda_at], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()[-2:]
    if cuda_at == "lookup":
        assert lines == ["after torch.compile: key", "after the call: key,backend"], lines
    else:
        assert lines == ["after torch.compile: -", "after the call: key,backend"], lines

OVERLAP_SCRIPT = textwrap.dedent('''
    import glob, json, os, pickle, sys
    os.environ.pop("TRITON_INTERPRET", None)
    prog = pickle.load(open(sys.argv[1], "rb"))
''') + SM90_HERE + textwrap.dedent('''
    import torch
    from ember.runtime import triton_warm
    path = sys.argv[2]
    with open(path, "w") as f:
        f.write(prog.source)
    mod = triton_warm.load_as(prog.source, path, "ember_generated_overlap")
    mod.__ember_source__ = prog.source
    launches = launches_of(prog)
    triton_warm.start_pool(2)
    n_requests = len(triton_warm.compile_requests(mod, launches, "cuda"))
    pending = triton_warm.precompile(mod, launches, "cuda", overlap=True)
    assert isinstance(pending, triton_warm.PendingPrecompile), pending
    # a miss is a cubin this process builds and puts into Triton's cache (the pool's workers
    # put theirs from their own processes, possibly while a launch below runs)
    from triton.runtime import cache as triton_cache
    built = []
    put = triton_cache.FileCacheManager.put

    def counting_put(self, data, filename, binary=True):
        built.extend([filename] if filename.endswith(".cubin") else [])
        return put(self, data, filename, binary)
    triton_cache.FileCacheManager.put = counting_put
    hits = []
    WAIT = pending.wait_launcher if sys.argv[3] == "wait" else (lambda name: None)
    # each launch as the first call makes it: after its own builds only
    for launch in launches:
        WAIT(launch[0])
        before = len(built)
        for jit, args, kw in triton_warm.launch_variants(mod, [launch], "cuda"):
            jit.run(*args, grid=None, warmup=True, **kw)
        hits.append(len(built) == before)
    res = pending.wait(600)
    again = triton_warm.precompile(mod, launches, "cuda", overlap=True)
    print(json.dumps({"hits": hits, "res": res, "again": again, "requests": n_requests}))
''')


def test_overlapped_precompile_builds_each_launch_before_its_first_launch(monkeypatch,
                                                                            tmp_path):
    """precompile(overlap=True) returns while the pool builds; each launcher's wait returns
    once its own requests are built: replaying that launch's compiles right then finds every
    one in Triton's cache (no new cubin). The whole result arrives after (every request
    compiled) and stamps the cache like the blocking precompile: the next one is a warm
    start."""
    (program, _), = _program(monkeypatch, f, torch.randn(64, 300), torch.randn(64, 300),
                             torch.randn(70000))
    assert len([s for s in program.steps if s.kind == "kernel"]) == 2
    pkl = tmp_path / "p.pkl"
    pkl.write_bytes(pickle.dumps(program))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton_cache")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run([sys.executable, "-c", OVERLAP_SCRIPT, str(pkl),
                           str(tmp_path / "gen.py"), "wait"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["hits"] == [True, True], out
    assert out["res"]["errors"] == [] and out["res"]["ok"] == out["requests"] > 2, out
    assert out["again"].get("stamped"), out["again"]


def test_a_gated_launcher_waits_for_its_own_builds_then_for_nothing():
    """CompiledProgram's launchers under precompile_overlap: while the precompile runs, a
    launcher first waits for its own kernels (by its name); once it is done, the result is
    kept and no launcher waits again."""
    import threading
    import types
    waited = []

    class Pending:
        done = threading.Event()
        result = {"ok": 3, "errors": []}

        def wait_launcher(self, name):
            waited.append(name)
    prog = types.SimpleNamespace(_pending=Pending(), _precompiled=None)
    g = executor.CompiledProgram._gated(prog, "ember_fused_x", lambda *a, **k: (a, k))
    assert g(1, 2, _choice="t") == ((1, 2), {"_choice": "t"}) and waited == ["ember_fused_x"]
    Pending.done.set()
    assert g(3) == ((3,), {}) and waited == ["ember_fused_x"]
    assert prog._pending is None and prog._precompiled == {"ok": 3, "errors": []}


def test_worker_prebuilds_the_launcher_where_triton_builds_one_per_signature(monkeypatch):
    """Triton 3.6 (the GPU machine's) compiles a C launcher per kernel signature at a kernel's
    first load, in the parent; a worker builds it beside the kernel (into the same cache) with
    the launcher class of the kernel's backend. A Triton with a generic launcher (no
    make_launcher: this machine's), another backend, or a failing build: nothing, no error."""
    import types
    from ember.runtime import triton_warm
    built = []

    class Launcher:
        def __init__(self, src, metadata):
            if src == "bad":
                raise RuntimeError("no C compiler")
            built.append((src, metadata.target.backend))
    per_signature = types.ModuleType("fake_driver")
    per_signature.make_launcher = lambda *a: "src"
    per_signature.CudaLauncher = per_signature.HIPLauncher = Launcher
    generic = types.ModuleType("fake_generic_driver")
    generic.CudaLauncher = Launcher

    def kernel(src, backend):
        meta = types.SimpleNamespace(target=types.SimpleNamespace(backend=backend))
        return types.SimpleNamespace(src=src, metadata=meta)
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.driver", per_signature)
    monkeypatch.setitem(sys.modules, "triton.backends.amd.driver", per_signature)
    assert triton_warm.prebuild_launcher(kernel("k1", "cuda"))
    assert triton_warm.prebuild_launcher(kernel("k2", "hip"))
    assert not triton_warm.prebuild_launcher(kernel("bad", "cuda"))
    assert not triton_warm.prebuild_launcher(kernel("k3", "cpu"))
    assert not triton_warm.prebuild_launcher(object())
    assert built == [("k1", "cuda"), ("k2", "hip")]
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.driver", generic)
    assert not triton_warm.prebuild_launcher(kernel("k4", "cuda")) and len(built) == 2
