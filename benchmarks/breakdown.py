"""Where one call's time goes (`python -m ember.benchmarks --profile`), from torch.profiler.

GPU: every device event of a few steady calls, sorted into
  library    vendor and eager kernels (cuBLAS, cuDNN, flash attention, aten's own kernels)
  generated  Triton kernels a compiler wrote (Inductor's `triton_*`, ember's `ember_*_kernel`)
  copies     memcpy, memset and aten's copy kernels
and `host gap` = the call's median wall time minus the time the device was busy (the union of
the events' intervals): launch overhead and Python between kernels.
CPU: generated C++ (ember's and Inductor's) shows no profiler event, so `library` is the top-level
aten calls, `copies` the top-level copy/clone/contiguous calls, and `generated + host` the rest
of the wall time.
"""
from __future__ import annotations

import time

# kernels listed per backend (by time per call) in the breakdown
TOP = 30

COPY_WORDS = ("memcpy", "memset", "copy_kernel", "copy_", "catarraybatchedcopy")
CPU_COPIES = ("aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy", "aten::to",
              "aten::cat")


def kind_of(name: str) -> str:
    low = name.lower()
    if low.startswith("triton_") or (low.startswith("ember_") and low.endswith("_kernel")):
        return "generated"
    if any(w in low for w in COPY_WORDS):
        return "copies"
    return "library"


def _profile(step, device: str, calls: int):
    import torch
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    step()
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3 / calls
    return prof.events(), wall


def _device_events(events):
    from torch.autograd import DeviceType
    return [e for e in events if e.device_type == DeviceType.CUDA]


def _top_level_cpu(events):
    """aten calls not made by another aten call (a compiled graph's run under Dynamo's
    `Torch-Compiled Region` range included)."""
    from torch.autograd import DeviceType

    def outermost(e):
        p = e.cpu_parent
        while p is not None:
            if p.name.startswith("aten::"):
                return False
            p = p.cpu_parent
        return True
    return [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")
            and outermost(e)]


def profile_calls(step, device: str, calls: int = 1) -> dict:
    """{"launches": per-call count}: GPU kernels, memcpy and memset; CPU: top-level aten calls."""
    events, _ = _profile(step, device, calls)
    picked = _device_events(events) if device == "cuda" else _top_level_cpu(events)
    return {"launches": round(len(picked) / calls, 1)}


def _union_us(intervals) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def breakdown(step, device: str, wall_ms: float | None, calls: int = 5) -> dict:
    """Per call: {"wall_ms", "busy_ms", "host_gap_ms", "<kind>_ms", "<kind>_n", "top": [...]}.
    `wall_ms`: the timed median (GPU: the profiler's own overhead is on the host, not in the
    device's intervals); on the CPU the profiled calls' own wall time replaces it, so that the
    parts add up to it."""
    events, profiled_wall = _profile(step, device, calls)
    if device != "cuda" or not wall_ms:
        wall_ms = round(profiled_wall, 4)
    picked = _device_events(events) if device == "cuda" else _top_level_cpu(events)
    kinds = {"library": [0.0, 0], "generated": [0.0, 0], "copies": [0.0, 0]}
    per_name: dict[str, list] = {}
    for e in picked:
        us = e.time_range.end - e.time_range.start
        k = kind_of(e.name) if device == "cuda" else (
            "copies" if e.name in CPU_COPIES else "library")
        kinds[k][0] += us
        kinds[k][1] += 1
        slot = per_name.setdefault(e.name, [0.0, 0, k])
        slot[0] += us
        slot[1] += 1
    out = {"wall_ms": wall_ms}
    if device == "cuda":
        busy = _union_us([(e.time_range.start, e.time_range.end) for e in picked]) / 1e3 / calls
        out["busy_ms"] = round(busy, 4)
        out["host_gap_ms"] = round(max(wall_ms - busy, 0.0), 4) if wall_ms else None
    for k, (us, n) in kinds.items():
        out[f"{k}_ms"] = round(us / 1e3 / calls, 4)
        out[f"{k}_n"] = round(n / calls, 1)
    if device != "cuda" and wall_ms:
        seen = out["library_ms"] + out["copies_ms"]
        out["generated_ms"] = round(max(wall_ms - seen, 0.0), 4)     # + host, see the docstring
        out["generated_n"] = None
    top = sorted(per_name.items(), key=lambda kv: -kv[1][0])[:TOP]
    out["top"] = [{"name": n[:90], "kind": k, "ms": round(us / 1e3 / calls, 4),
                   "n": round(c / calls, 1)} for n, (us, c, k) in top]
    return out


def _cell(ms, n=None) -> str:
    if ms is None:
        return ""
    return f"{ms:.3f}" + (f" ({n:g})" if n is not None else "")


def markdown(rows: list[dict]) -> str:
    """Side by side per (model, dtype, mode): one line per backend, then each backend's top
    kernels."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("profile"):
            groups.setdefault((r["label"], r["dtype"], r["mode"]), []).append(r)
    parts = []
    for (lab, dtype, mode), rs in groups.items():
        gpu = rs[0].get("device") == "cuda"
        gen = "generated" if gpu else "generated + host"
        parts.append(f"### {lab} {dtype} {mode}\n")
        parts.append(f"| backend | wall ms | device busy ms | library ms (n) | {gen} ms (n) | "
                     f"copies ms (n) | host gap ms |")
        parts.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rs:
            p = r["profile"]
            parts.append(f"| {r['backend']} | {_cell(p.get('wall_ms'))} "
                         f"| {_cell(p.get('busy_ms'))} "
                         f"| {_cell(p['library_ms'], p['library_n'])} "
                         f"| {_cell(p['generated_ms'], p.get('generated_n'))} "
                         f"| {_cell(p['copies_ms'], p['copies_n'])} "
                         f"| {_cell(p.get('host_gap_ms'))} |")
        parts.append("")
        for r in rs:
            top = r["profile"]["top"]
            if not top:
                continue
            parts.append(f"{r['backend']}, top {len(top)} by time per call:\n")
            parts.append("| kernel | kind | ms | calls |")
            parts.append("| --- | --- | ---: | ---: |")
            parts += [f"| `{t['name']}` | {t['kind']} | {t['ms']:.4f} | {t['n']:g} |" for t in top]
            parts.append("")
    return "\n".join(parts)
