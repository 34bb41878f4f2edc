"""The harness's outputs from its rows: derived columns, geomeans, markdown, JSON, CSV, chart.

A row is one (model, dtype, mode, backend) as `measure.py` printed it, plus `warm_s` from the
warm-start process. `derive` adds `speedup` (eager ms / ms) and, on ember rows,
`vs_best_inductor` (the fastest Inductor mode's ms / ember's ms: above 1, ember is ahead).
"""
from __future__ import annotations

import csv
import json
import math

ORDER = ("eager", "dynamo-eager", "inductor", "inductor-ro", "inductor-ma", "ember", "ember-ma", "ember-nchw", "ember-cl",
         "ember-fast", "ember-tail0", "ember-effattn", "ember-cudnn",
         "ember-loop", "ember-saveall", "ember-loop192", "ember-serial")
INDUCTORS = ("inductor", "inductor-ro", "inductor-ma")
CSV_FIELDS = ("model", "label", "dtype", "mode", "backend", "status", "ms", "speedup",
              "vs_best_inductor", "cold_s", "warm_s", "peak_mb", "kernels", "rel_err",
              "fp32_err", "fallback_ops", "error")


def _key(r):
    return (r.get("label", r["model"]), r["dtype"], r["mode"])


def _ok(r) -> bool:
    return r.get("status") in ("ok", "compiled", "partitioned", "eager") and bool(r.get("ms"))


def derive(rows: list[dict]) -> list[dict]:
    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(_key(r), {})[r["backend"]] = r
    for by in groups.values():
        eager = by.get("eager")
        base = eager["ms"] if eager and _ok(eager) else None
        ind = [by[b]["ms"] for b in INDUCTORS if b in by and _ok(by[b])]
        for be, r in by.items():
            if _ok(r) and base:
                r["speedup"] = round(base / r["ms"], 4)
            if be.startswith("ember") and _ok(r) and ind:
                r["vs_best_inductor"] = round(min(ind) / r["ms"], 4)
    return rows


def geomean(values) -> float | None:
    vals = [v for v in values if v and v > 0 and v == v]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def backends_of(rows) -> list[str]:
    seen = {r["backend"] for r in rows}
    return [b for b in ORDER if b in seen] + sorted(seen - set(ORDER))


def geomeans(rows) -> dict[tuple, dict[str, float | None]]:
    """(dtype, mode) -> {backend: geomean speed-up over eager, "ember vs best inductor": ...}
    over the models where the backend has a time."""
    out: dict[tuple, dict] = {}
    for r in rows:
        out.setdefault((r["dtype"], r["mode"]), {})
    for dm, slot in out.items():
        rs = [r for r in rows if (r["dtype"], r["mode"]) == dm]
        for be in backends_of(rs):
            slot[be] = geomean(r.get("speedup") for r in rs if r["backend"] == be)
        slot["ember vs best inductor"] = geomean(r.get("vs_best_inductor") for r in rs
                                                 if r["backend"] == "ember")
    return out


def _f(v, fmt="{:.3f}") -> str:
    return "" if v is None or (isinstance(v, float) and v != v) else fmt.format(v)


def _ms_cell(r) -> str:
    if r is None:
        return ""
    if not _ok(r):
        return r.get("status", "error")
    if r.get("status") in ("eager", "partitioned"):     # ember ran all or part of it eagerly
        return f"{_f(r['ms'])} ({r['status']})"
    return _f(r["ms"])


def summary_table(rows) -> str:
    """One line per (model, dtype, mode): each backend's ms, ember's speed-up over eager and
    over the fastest Inductor mode; then a geomean line per (dtype, mode)."""
    bes = backends_of(rows)
    head = ["model", "dtype", "mode"] + [f"{b} ms" for b in bes] + \
        ["ember x eager", "ember vs best inductor"]
    lines = ["| " + " | ".join(head) + " |",
             "| --- | --- | --- |" + " ---: |" * (len(head) - 3)]
    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(_key(r), {})[r["backend"]] = r
    for (lab, dtype, mode), by in groups.items():
        em = by.get("ember", {})
        cells = [lab, dtype, mode] + [_ms_cell(by.get(b)) for b in bes] + \
            [_f(em.get("speedup"), "x{:.2f}"), _f(em.get("vs_best_inductor"), "{:.2f}")]
        lines.append("| " + " | ".join(cells) + " |")
    for (dtype, mode), g in geomeans(rows).items():
        cells = ["**geomean** (x eager)", dtype, mode] + [_f(g.get(b), "x{:.2f}") for b in bes] + \
            [_f(g.get("ember"), "x{:.2f}"), _f(g.get("ember vs best inductor"), "{:.2f}")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(rows) -> str:
    """One line per row: time, speed-up, compile seconds, memory, launches, error against eager
    and (bf16/fp16) against fp32, whose eager value is the dtype's own noise."""
    lines = ["| model | dtype | mode | backend | ms | x eager | cold s | warm s | peak MB "
             "| kernels | rel err | vs fp32 | status |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| --- |"]
    for r in rows:
        status = r.get("status", "")
        if r.get("error"):
            status += ": " + r["error"].splitlines()[0][:80]
        elif r.get("fallback_ops"):
            status += " (eager: " + ", ".join(r["fallback_ops"])[:60] + ")"
        lines.append("| " + " | ".join([
            r.get("label", r["model"]), r["dtype"], r["mode"], r["backend"], _f(r.get("ms")),
            _f(r.get("speedup"), "x{:.2f}"), _f(r.get("cold_s"), "{:.2f}"),
            _f(r.get("warm_s"), "{:.2f}"), _f(r.get("peak_mb"), "{:.1f}"),
            _f(r.get("kernels"), "{:g}"),
            "" if r["backend"] == "eager" else _f(r.get("rel_err"), "{:.1e}"),
            _f(r.get("fp32_err"), "{:.1e}"), status.replace("|", "/")]) + " |")
    return "\n".join(lines)


def write_json(path, rows, meta) -> None:
    g = {f"{d} {m}": v for (d, m), v in geomeans(rows).items()}
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": rows, "geomean": g}, f, indent=1,
                  default=lambda v: None if isinstance(v, float) and v != v else str(v))


def write_csv(path, rows) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "fallback_ops": " ".join(r.get("fallback_ops") or [])})


def write_chart(path, rows) -> bool:
    """A PNG of every backend's speed-up over eager per model (and the geomeans); False when
    matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    bes = [b for b in backends_of(rows) if b != "eager"]
    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(_key(r), {})[r["backend"]] = r
    groups = {k: by for k, by in groups.items() if any(r.get("speedup") for r in by.values())}
    modes = {m for _, _, m in groups}
    names = [f"{lab} {d}" + (f" {m}" if len(modes) > 1 else "") for lab, d, m in groups]
    values = {b: [by.get(b, {}).get("speedup") or 0.0 for by in groups.values()] for b in bes}
    for (d, m), g in geomeans(rows).items():
        if any(g.get(b) for b in bes):
            names.append(f"geomean {d}" + (f" {m}" if len(modes) > 1 else ""))
            for b in bes:
                values[b].append(g.get(b) or 0.0)
    width = 0.8 / max(len(bes), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(names) * (len(bes) + 1)), 5.0))
    for i, b in enumerate(bes):
        xs = [j + (i - (len(bes) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, values[b], width, label=b)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=8, rotation=35, ha="right")
    ax.set_ylabel("speed-up over eager (x)")
    ax.set_title(f"speed-up over eager ({', '.join(sorted(modes))})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
