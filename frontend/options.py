"""`CompileOptions`: what `torch.compile(model, backend="ember", options={...})` may set.

Environment variables are not read here: `runtime.env.get_env()` is the one place that reads
them; `from_user` only takes their values as defaults, so a compile is reproducible from its
`CompileOptions` alone.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from ..passes.backends import Target, backend_for

TARGETS = tuple(t.value for t in Target)   # what `target` / EMBER_TARGET may name (passes/backends.py)
DEFAULT_MAX_GROUP_SIZE = 64
# torch.compile's modes, as `torch.compile(model, backend="ember", mode=...)` passes them.
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MATMUL_TEMPLATE = ("auto", "template", "library", "off")
CHANNELS_LAST = (True, False, "auto")
# Targets where "auto" lays convolution networks out channels-last (ember-channels-last):
# the GPU ones, where cuDNN / MIOpen run low-precision convolutions in NHWC. Not the CPU: on
# 2026-11-26 (2-core host, one thread, CPU time), resnet18 fp32 inference took 124 ms
# channels-last against 120 ms NCHW at 32x3x64x64 (85 vs 94 ms at 8x3x112x112).
CHANNELS_LAST_TARGETS = ("cuda", "rocm", "triton")


class OptionsError(ValueError):
    """A bad key or value in `torch.compile(..., options={...})`."""


@dataclass(frozen=True)
class CompileOptions:
    """Options of one `torch.compile(backend="ember")` call.

    target: "auto" picks cuda/rocm when the inputs live on a GPU, else cpu; "triton" forces
      the Triton code path (on CPU tensors it needs TRITON_INTERPRET=1).
    max_group_size: the most linalg ops ember-fuse puts in one kernel.
    debug_dir: where each compiled graph dumps its FX graph, IR per stage, sources and report.
    cache_dir: the runtime's build cache (None: the runtime's default).
    fallback: run ops ember cannot compile with eager torch (one warning per op kind), a
      graph it cannot compile at all, or one that fails at run time, as eager runs it, instead
      of raising.
    pipeline: a full pass pipeline string replacing the default one.
    cudagraphs: on a GPU, replay inference and training graphs as CUDA graphs (one launch per
      call instead of one per kernel; outputs are copied out of the graph's memory, except
      what is lent: runtime/cuda_graphs.py).
    shared_graph_pool: with `cudagraphs`, a training step's graphs share one CUDA-graph memory
      pool: the forward founds it, the backward that reads its saved activations and an
      optimizer step that reads the backward's gradients are captured into it, so their
      temporaries reuse the blocks the earlier captures freed (runtime/pool_family.py; a
      replay finds no output a later capture lent still alive, or runs without its graph).
      False captures every graph into a pool of its own.
    graph_tail_min_bytes: with `cudagraphs`, a graph whose last step (a kernel or a library
      call) writes only fresh outputs of at least this many bytes runs that step after the
      replay, outside the graph, into new memory, instead of the graph writing them into its
      pool and each call copying them out (one copy kernel fewer; one launch from Python
      more). 0: whatever their size. None (the default): for inference graphs 0 where the
      step is a library call or a matmul (H200: resnet18 fp32 1.262 -> 1.224 ms and 67 -> 66
      kernels, bf16 1.182 -> 1.183, GPT-2 fp32 3.419 -> 3.367) and 4 MiB where it is a
      generated kernel, whose launch through Triton's Python launcher after a short graph's
      replay is what the call waits for (a 2 MB output after a 7-kernel graph: 131.6 -> 122.1
      us a call without the tail); 4 MiB for training graphs (not measured at 0 yet).
    graph_copy_max_bytes: with `cudagraphs`, a graph that must be captured again with its
      outputs cloned out of its pool or its inputs from another graph's pool copied in (its
      lent outputs stay alive from call to call, or those inputs keep arriving elsewhere: one
      program called several times per step, a layer loop's body) runs without its graph for
      good when those replays would copy at least this many bytes per call and its launches
      without a graph take less host time than a replay's device time (CUDA events) plus the
      copies: the copies are device time on every call, the launches a graph saves host time
      that a long enough replay hides. Default 32 MiB
      (Whisper-tiny's encoder, one graph per layer called four times a step, copied 1.7 GB a
      fp32 SGD step and ran x0.98 of eager on an H200). None: never.
    backward_tail: with `cudagraphs`, a training backward whose last steps make a large
      gradient from nothing (the embedding gradient: a fill and an in-place scatter_add) runs
      them after its replay into new memory, so that the gradient is not held in the shared
      pool between steps. Off by default: on the H200 (train_memory.py, MB peak) it moved
      the peak rather than lowered it: Llama bf16 855 with it (the forward's tail keeping
      no arena, on either way, took 885 -> 855), GPT-2 bf16 752 -> 805, GPT-2 fp32 930 ->
      983, BERT fp32 786 -> 851 (new memory at the backward's end, where the pool's dead
      blocks held it before).
    training_cudnn_attention: on a GPU, a graph that needs gradients traces
      `scaled_dot_product_attention` to cuDNN's attention where eager would run it (its
      backward is handed the output and its gradient in the layouts eager's are, which
      cuDNN's graph cache needs where eager runs the same attention in the process); False
      (the default): memory-efficient attention. Measured on 4x H100 (twelfth session, bf16
      training, ms vs inductor reduce-overhead): BERT 8.01 -> 7.73, GPT-2 7.63 -> 7.50, Llama
      2.87 -> 3.04; the whisper encoder's gradients match eager either way (2.8e-3). Flash
      attention is never traced for training (its backward's uint64 RNG state does not
      import).
    exact_low_precision: bf16/f16 layer norms run eager's own kernel (a library call) so that
      results match eager bit for bit where the rest does; False decomposes and fuses them
      (one memory pass fewer per norm; within bf16 rounding of eager, not identical).
    parallel_compile: on a GPU, compile every Triton kernel of a graph (every autotuning
      configuration) in worker processes when the graph is loaded, instead of one at a time
      at each kernel's first launch (runtime/triton_warm.py). Same kernels either way.
    precompile_overlap: with parallel_compile, a graph's load does not wait for the workers:
      its requests go out in launch order and each kernel's first launch waits for its own
      builds only, so that the first call's launches (autotuning, loading each kernel) run
      while the workers build the later kernels. Same kernels. On by default since timed on
      a GPU (4x H200, a cold training first call in a fresh process: efficientnet_b0 74.6 ->
      62.2 s, swin_t 54.8 -> 47.8, resnet18 28.3 -> 21.6, GPT-2 21.3 -> 19.4; Inductor's
      68.8, 64.6, 27.8, 25.6; benchmarks/RESULTS.md, fifteenth session).
    program_cache: a graph compiled before (the same graph, options and ember) takes its
      compiled program from the cache (`cache_dir`) instead of importing and running the
      passes again: a warm start (frontend/program_cache.py). Not read with a `debug_dir`.
      Default: EMBER_PROGRAM_CACHE (1 unless set to 0).
    recompute: training graphs are split by AOTAutograd's min-cut partitioner (what Inductor
      uses): cheap pointwise values, and autocast's casts of the weights, are recomputed in
      the backward graph, where ember fuses
      them into its kernels, instead of being saved by the forward (less memory, fewer copies
      into a graphed backward); False saves every value the backward reads.
    recompute_saved: with `recompute`, a saved activation of at least 1 MiB that a matmul
      reads and that is a short chain of pointwise ops on other saved values and parameters
      (no library call, no weight's cast; a transformer MLP's GELU
      output, a LayerNorm's output before a projection) is recomputed in the backward too,
      where the min-cut partitioner saves it because a matmul reads it there
      (frontend/recompute_saved.py: GPT-2 fp32 at 8x256 saves ~36 MB a layer less of ~97).
      None (the default): on where the forward's saved activations stay in a CUDA-graph pool
      between steps (the Triton target with `cudagraphs`: every byte saved is a byte of the
      step's peak), off elsewhere. Its cost is the recomputed values' writes in the backward,
      in kernels it has anyway (Triton, full size: GPT-2 / BERT-base fp32 +226 / +227 MB of
      the backward's ~1.4 GB, launches unchanged).
    donate_saved: a training backward places its intermediates (and gradients at least half
      a saved tensor's size; any size under CUDA graphs) in the memory of
      the saved activations that only it reads (AOTAutograd's donated buffers,
      `torch._functorch.config.donated_buffer`) once it has read them, instead of in new
      memory, and frees those it is done with, as Inductor does
      (ember-buffer-reuse, `ember.donated_args`); likewise its gradient inputs where nothing
      but AOTAutograd's argument list holds them (a gradient the autograd engine made, as
      the bf16 logits' gradient of `logits.float()`; a caller's is left as it is:
      frontend/backend._donating_tangents; `donate_gradients=False` keeps those alone).
      False keeps them.
    mode: torch.compile's `mode=` (also accepted here): "default" and "reduce-overhead" (CUDA
      graphs, which ember replays for inference anyway) compile alike; "max-autotune" widens
      each Triton kernel's configuration search (ember-lower-to-triton{max-autotune=true});
      "max-autotune-no-cudagraphs" does that without CUDA graphs (unless `cudagraphs` is set).
    matmul_template: on the Triton target, a matmul whose result only a pointwise kernel reads
      becomes one kernel with that epilogue (ember-matmul-template), which runs either a Triton
      matmul template with the epilogue fused or the library call then the epilogue: "auto"
      times both on the first call on a GPU and keeps the faster (more template
      configurations with max-autotune); "template" / "library" always that one; "off" keeps
      the library call and a separate epilogue kernel (the default: on the H200, 2026-11-26,
      "auto" chose the template for the MLP block's first Linear and the block took 0.542 ms
      against 0.460 ms with "off", eager 0.439 ms). bf16/f16 products only with
      `exact_low_precision=False` (cuBLAS's summation order is what matches eager bit for bit).
    channels_last: lay a convolution network out channels-last as a whole (ember-channels-last:
      2-d convolutions, pooling and the kernels between them read and write NHWC buffers, so
      cuDNN / oneDNN transform no layouts around each convolution; in training, forward and
      backward, with the saved activations handed over channels-last); "auto" does so on the
      targets in CHANNELS_LAST_TARGETS (training graphs: CHANNELS_LAST_TRAINING_TARGETS),
      True on every target, False nowhere.
    fold_constants: values a graph computes from none of its inputs (a causal attention
      mask, position ids) are computed once, when the graph compiles, and read by every call
      instead of being recomputed by kernels on each (frontend/const_fold.py); False
      recomputes them.
    one_pass_variance: an f32 variance that ember-split-reductions splits (a training
      BatchNorm's batch statistics; a GroupNorm's over large groups) as two shifted sums of one
      pass over its input beside the mean (ember-shifted-variance{f32=true}: one split
      reduction, two kernels, instead of the two-pass form's four; Inductor's Welford makes
      two), at the shifted sums' rounding (about ((mean - k) / std)^2 * 2^-24 of the variance
      for a sample k of the data) instead of the two-pass one; bf16/f16 data always. None (the
      default): on the GPU targets (CHANNELS_LAST_TRAINING_TARGETS: resnet18's fp32 training
      step 217 -> 180 launches, `kernel_count.py --target cuda`), off elsewhere.
    max_unrolled_loads: on the Triton target, a small strided reduction written with its
      window unrolled (`tl.static_range`) whose unrolled body would repeat more loads than
      this is a `tl.range` loop instead (the same operations in the same order): Triton's
      compile time grows about quadratically with the unrolled body (horizontally fused
      column sums: 1,536 loads, 91 s a configuration, 0.65 s as a loop). 0 (the default):
      every window unrolled, as before.
    prepack_weights: on the CPU, an inference graph's matmul that reads an `nn.Parameter`
      transposed (a Linear layer's weight) reads it packed into MKL's GEMM panels, packed at
      the first call and kept while the parameter stays unchanged (its version counter, data
      pointer and a probe of two rows are checked per call; packed again when they change),
      as Inductor's freezing does (runtime/weight_copies.py): the packed GEMM may sum in
      another order than the plain one (fp32 tolerance). Costs the packed weights' memory
      (at most runtime.weight_copies.BUDGET_BYTES per process); False reads every weight as
      it is. Not seen: a write through `p.data` (which bypasses the version counter) that
      leaves the weight's first and last rows alone; a program that edits weights that way
      between calls sets False.
    """

    target: str = "auto"
    max_group_size: int = DEFAULT_MAX_GROUP_SIZE
    debug_dir: str | None = None
    cache_dir: str | None = None
    fallback: bool = True
    pipeline: str | None = None
    cudagraphs: bool = True
    shared_graph_pool: bool = True
    graph_tail_min_bytes: int | None = None
    graph_copy_max_bytes: int | None = 32 << 20
    backward_tail: bool = False
    training_cudnn_attention: bool = False
    exact_low_precision: bool = True
    parallel_compile: bool = True
    precompile_overlap: bool = True
    program_cache: bool = True
    recompute: bool = True
    recompute_saved: bool | None = None
    donate_saved: bool = True
    donate_gradients: bool = True
    mode: str = "default"
    matmul_template: str = "off"
    channels_last: "bool | str" = "auto"
    fold_constants: bool = True
    max_unrolled_loads: int = 0
    one_pass_variance: bool | None = None
    prepack_weights: bool = True

    def __post_init__(self):
        if (not isinstance(self.max_unrolled_loads, int) or
                isinstance(self.max_unrolled_loads, bool) or self.max_unrolled_loads < 0):
            raise OptionsError(f"ember: option 'max_unrolled_loads' must be an integer >= 0; "
                               f"got {self.max_unrolled_loads!r}")
        if self.mode is None:
            object.__setattr__(self, "mode", "default")
        if self.mode not in MODES:
            raise OptionsError(f"ember: mode must be one of {', '.join(map(repr, MODES))}; "
                               f"got {self.mode!r}")
        if self.matmul_template not in MATMUL_TEMPLATE:
            raise OptionsError(f"ember: option 'matmul_template' must be one of "
                               f"{', '.join(map(repr, MATMUL_TEMPLATE))}; "
                               f"got {self.matmul_template!r}")
        if self.channels_last not in CHANNELS_LAST:
            raise OptionsError(f"ember: option 'channels_last' must be True, False or 'auto'; "
                               f"got {self.channels_last!r}")
        if self.graph_tail_min_bytes is not None and (
                not isinstance(self.graph_tail_min_bytes, int)
                or isinstance(self.graph_tail_min_bytes, bool) or self.graph_tail_min_bytes < 0):
            raise OptionsError(f"ember: option 'graph_tail_min_bytes' must be None or an integer "
                               f">= 0; got {self.graph_tail_min_bytes!r}")
        if self.graph_copy_max_bytes is not None and (
                not isinstance(self.graph_copy_max_bytes, int)
                or isinstance(self.graph_copy_max_bytes, bool) or self.graph_copy_max_bytes < 0):
            raise OptionsError(f"ember: option 'graph_copy_max_bytes' must be None or an integer "
                               f">= 0; got {self.graph_copy_max_bytes!r}")
        if self.target not in TARGETS:
            raise OptionsError(f"ember: option 'target' must be one of {', '.join(TARGETS)}; "
                               f"got {self.target!r}")
        if (not isinstance(self.max_group_size, int) or isinstance(self.max_group_size, bool)
                or self.max_group_size < 1):
            raise OptionsError(f"ember: option 'max_group_size' must be a positive integer; "
                               f"got {self.max_group_size!r}")
        for name in ("fallback", "cudagraphs", "shared_graph_pool", "backward_tail",
                     "training_cudnn_attention",
                     "exact_low_precision", "parallel_compile", "precompile_overlap",
                     "program_cache", "recompute", "donate_saved",
                     "donate_gradients",
                     "fold_constants", "prepack_weights"):
            if not isinstance(getattr(self, name), bool):
                raise OptionsError(f"ember: option '{name}' must be True or False; "
                                   f"got {getattr(self, name)!r}")
        if self.one_pass_variance is not None and not isinstance(self.one_pass_variance, bool):
            raise OptionsError(f"ember: option 'one_pass_variance' must be True, False or None; "
                               f"got {self.one_pass_variance!r}")
        if self.recompute_saved is not None and not isinstance(self.recompute_saved, bool):
            raise OptionsError(f"ember: option 'recompute_saved' must be True, False or None; "
                               f"got {self.recompute_saved!r}")
        for name in ("debug_dir", "cache_dir", "pipeline"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                # Paths are accepted (os.PathLike) and stored as text so the dataclass stays
                # hashable and printable in reports.
                if hasattr(value, "__fspath__"):
                    object.__setattr__(self, name, str(value.__fspath__()))
                else:
                    raise OptionsError(f"ember: option '{name}' must be a string; got {value!r}")
        if self.debug_dir is not None:
            _check_dump_dir(self.debug_dir)

    @classmethod
    def valid_keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_user(cls, options: "Mapping[str, Any] | CompileOptions | None" = None,
                  env=None) -> "CompileOptions":
        """Builds options from the user's dict; unset fields take the environment's defaults
        (EMBER_TARGET, EMBER_DEBUG_DIR, EMBER_CACHE_DIR through `runtime.env`)."""
        if isinstance(options, CompileOptions):
            return options
        options = dict(options or {})
        valid = cls.valid_keys()
        unknown = sorted(k for k in options if k.replace("-", "_") not in valid)
        if unknown:
            raise OptionsError(f"ember: unknown option(s) {', '.join(map(repr, unknown))}; "
                               f"valid options are: {', '.join(valid)}")
        kwargs = {k.replace("-", "_"): v for k, v in options.items()}
        if kwargs.get("mode") == "max-autotune-no-cudagraphs":
            kwargs.setdefault("cudagraphs", False)
        if env is None:
            from ..runtime.env import get_env
            env = get_env()
        if "target" not in kwargs and env.target:
            kwargs["target"] = env.target
        if "debug_dir" not in kwargs and env.debug_dir is not None:
            kwargs["debug_dir"] = str(env.debug_dir)
        if "program_cache" not in kwargs:
            kwargs["program_cache"] = getattr(env, "program_cache", True)
        if "cache_dir" not in kwargs and env.cache_dir is not None:
            kwargs["cache_dir"] = str(env.cache_dir)
        return cls(**kwargs)


def _check_dump_dir(path: str) -> None:
    """A debug dir must be a directory or creatable as one: the dump writes under it on every
    compile, and a file in its place would fail there (NotADirectoryError) instead of here."""
    import os
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            return
        p = parent
    if not os.path.isdir(p):
        what = "is a file" if p == os.path.abspath(path) else \
            f"lies under {p!r}, which is a file"
        raise OptionsError(f"ember: option 'debug_dir' ({path!r}) {what}, not a directory; "
                           f"pass the path of a directory (created if missing), or unset "
                           f"EMBER_DEBUG_DIR if it came from there")


def run_devices(tensors, gm=None) -> list:
    """The devices a graph's tensors live on: its tensor inputs', or where it has none (a
    causal mask built from a size alone, under dynamic shapes) those of the values its FX
    graph computes (their fake tensors' devices)."""
    import torch
    devices = [t.device for t in tensors if isinstance(t, torch.Tensor)]
    if devices or gm is None:
        return devices
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        for v in val if isinstance(val, (list, tuple)) else (val,):
            if isinstance(v, torch.Tensor) and v.device.type != "meta":
                devices.append(v.device)
    return devices


def resolve_target(target: str, devices) -> str:
    """The concrete target for tensors on `devices` (torch.device objects): cpu | cuda | rocm |
    triton."""
    if target != Target.AUTO:
        return str(Target(target))
    import torch
    if any(d.type == "cuda" for d in devices):
        return str(Target.ROCM if getattr(torch.version, "hip", None) else Target.CUDA)
    return str(Target.CPU)


# the pipeline element of ember-split-reductions (frontend/compile_module retries without it)
SPLIT_PASS = "ember-split-reductions"
VARIANCE_PASS = "ember-shifted-variance"


def recompute_saved_on(options: CompileOptions, target: str) -> bool:
    """Whether a training graph's partition recomputes saved pointwise functions of saved
    values (option `recompute_saved`; None: where the forward's saved activations stay in a
    CUDA-graph pool between steps, the Triton target with `cudagraphs`, so that every byte
    saved is a byte of the step's peak)."""
    if options.recompute_saved is not None:
        return options.recompute_saved
    return backend_for(target).name == "triton" and options.cudagraphs


def channels_last_on(options: CompileOptions, target: str) -> bool:
    """Whether the default pipeline lays convolution networks out channels-last."""
    return options.channels_last is True or (options.channels_last == "auto"
                                             and target in CHANNELS_LAST_TARGETS)


# Targets where "auto" lays training graphs of convolution networks out channels-last too
# (batch statistics, the backward's convolutions, the saved activations): the GPUs'. Measured
# on an H100 (2026-11-26, resnet18 bf16 training step, batch 32): NCHW 5.09 ms, of which cuDNN's
# NCHW <-> NHWC transforms around every convolution took 1.2 ms; channels-last 4.69 ms (once
# ember-split-reductions split the channels-last batch-norm gradients enough: 6.67 ms before).
CHANNELS_LAST_TRAINING_TARGETS = ("cuda", "rocm")


def channels_last_training(options: CompileOptions, target: str | None = None) -> bool:
    """Whether training graphs (batch statistics, saved activations) go channels-last too:
    with `channels_last=True`, and with "auto" on CHANNELS_LAST_TRAINING_TARGETS."""
    return options.channels_last is True or (options.channels_last == "auto"
                                             and target in CHANNELS_LAST_TRAINING_TARGETS)


def one_pass_variance_on(options: CompileOptions, target: str) -> bool:
    """Whether f32 batch variances are one-pass shifted sums (option `one_pass_variance`)."""
    if options.one_pass_variance is not None:
        return options.one_pass_variance
    return target in CHANNELS_LAST_TRAINING_TARGETS


def channels_last_f32(options: CompileOptions, target: str) -> bool:
    """Whether f32 convolutions are laid out channels-last too: not with "auto" on CUDA while
    `torch.backends.cudnn.allow_tf32` is off (read at compile time, as the program cache's key
    has it through the pipeline): cuDNN's NHWC f32 kernels without TF32 are slower than its
    NCHW ones (passes/ember_channels_last.py, option `f32`, has the figures)."""
    if options.channels_last != "auto" or target != "cuda":
        return True
    import torch
    return bool(torch.backends.cudnn.allow_tf32)


def _convert_externs_options(target: str) -> str:
    """ember-convert-externs' options for `target`: `conv-bias` (passes/externs.py CONV_BIAS).
    On CUDA cuDNN computes no bias: ATen
    adds it in a kernel of its own after the call (and a bf16 result is rounded before and
    after it), so the add goes into ember's next kernel instead. Other Triton targets do so
    for f32 convolutions only (a CPU tensor's oneDNN call, the Triton interpreter's, adds a
    bf16 conv's bias before its one rounding); the C++ target leaves it to oneDNN."""
    if backend_for(target).name != "triton":
        return ""
    mode = "after-wide"
    if target == str(Target.CUDA):
        import torch
        if torch.backends.cudnn.enabled:
            mode = "after"
    return f"{{conv-bias={mode}}}"


def default_pipeline(options: CompileOptions, target: str) -> str:
    if options.pipeline:
        return options.pipeline
    backend = backend_for(target)
    lower = backend.lowering
    template = ""
    if backend.name == "triton":
        lower_opts = []
        if options.mode.startswith("max-autotune"):
            lower_opts.append("max-autotune=true")
        if options.max_unrolled_loads:
            lower_opts.append(f"max-unrolled-loads={options.max_unrolled_loads}")
        if options.matmul_template != "off":
            narrow = "false" if options.exact_low_precision else "true"
            template = f"ember-matmul-template{{narrow={narrow}}},"
            if options.matmul_template != "auto":
                lower_opts.append(f"matmul-choice={options.matmul_template}")
        if lower_opts:
            lower += "{" + " ".join(lower_opts) + "}"
    # explain / print-plan: the remarks that report.json's unfused pairs and memory plan
    # come from (frontend/compile_module.explained).
    # training graphs (a forward's BatchNorm statistics as column reductions over the NHWC
    # buffer, the backward's convolution_backward on channels-last views): with True, and with
    # "auto" on a GPU (CHANNELS_LAST_TRAINING_TARGETS)
    layout = ""
    f32 = "" if channels_last_f32(options, target) else "f32=false"
    if channels_last_training(options, target):
        layout = "ember-channels-last{" + " ".join(("with-statistics=true", f32)).strip() + "},"
    elif channels_last_on(options, target):
        layout = "ember-channels-last" + (f"{{{f32}}}" if f32 else "") + ","
    # GPU reductions with few results are split for parallelism (the C++ path splits rows
    # across threads in its code generator instead)
    split = SPLIT_PASS + "," if backend.name == "triton" else ""
    # a BatchNorm's batch variance in one pass over its input beside the mean (shifted sums:
    # one split reduction instead of two, passes/ember_shifted_variance.py)
    if backend.name == "triton":
        split = VARIANCE_PASS + ("{f32=true}" if one_pass_variance_on(options, target)
                                 else "") + "," + split
    externs = "ember-convert-externs" + _convert_externs_options(target)
    # C++: no result written over a buffer its kernel reads through a reshape (slower there:
    # passes/ember_buffer_reuse.py, option reshape-in-place)
    reuse = "print-plan=true" + (" reshape-in-place=false" if backend.lang == "cpp" else "")
    # A CUDA-graphed backward's donated arguments are its forward's saved activations, which
    # the forward's graph pool holds between steps anyway: a gradient lies in any of them it
    # fits in once read (ember-buffer-reuse's donated-outputs-fill; elsewhere the caller
    # would keep a whole saved activation alive with a small gradient: half its size at least)
    if backend.name == "triton" and options.cudagraphs:
        reuse += " donated-outputs-fill=0"
    return (f"builtin.module({externs},ember-library-views,{layout}{split}"
            f"ember-fuse{{max-group-size={options.max_group_size} "
            f"target={backend.name} explain=true}},canonicalize,{template}"
            f"ember-buffer-reuse{{{reuse}}},{lower})")
