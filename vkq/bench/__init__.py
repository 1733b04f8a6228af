"""Benchmarks: the device's roofline, per-kernel GPU times, whole models — with peers
measured in the same run, because a shared machine drifts. `vkq bench` runs them:

    vkq bench [roofline|kernels|models|all] [--device D] [--quick] [--only NAME] [--json PATH] [--plot PATH.png]

Every run measures the roofline first, then the suites. One module per concern:

  timing      GPU time (Vulkan timestamps), wall clock, repeats fitted to a budget, CPU threads
  records     Record (one measurement) and Settings (one run); the GPU- and wall-timed records
  roofline    the device's roofline (fp32 FMA, int32 MAD, int8 dot product, copy bandwidth, fixed
              costs) and the roofline model: intensity, attainable roof, fraction of it
  kernels     every kernel family on real layer shapes, on each path (with and without the
              integer dot product), beside vkq's own fp32 shaders
  torch_peers PyTorch fp32 and int8 on the CPU for the same kernels
  ncnn_peer   ncnn fp32 on the same Vulkan device: one layer, or a whole CNN (to_ncnn)
  models      whole models end to end, per call taken apart (host, eval, GPU, dispatches)
  report      the tables, the targets, JSON
  plot        the roofline chart beside the models
  runner      run() and main() (the CLI's `vkq bench`)

Records are plain dicts, one per measurement:
    {suite, name, shape, dtype, backend, device, median_ms, p90_ms, gops, intensity, roof_gops,
     roofline_fraction}
plus extras (timing: "gpu" | "wall", kernel, roofline, bound, bytes_moved, gbps, the models'
per-call and memory figures, ...). See docs/benchmarks.md; the results: bench/README.md.
"""
from .kernels import kernel_cases, paths
from .models import DEFAULT_MODELS, MODEL_HOOKS, model_cases, tiny_mobilenet, tiny_resnet
from .ncnn_peer import NcnnNet, to_ncnn
from .ncnn_peer import gpu_index as ncnn_gpu_index
from .records import FIELDS, Record, Settings
from .report import markdown_table, targets, write_json
from .roofline import attainable, judge
from .roofline import measure as measure_roofline
from .runner import SUITES, main, run
from .timing import fit_repeats, gpu_times, wall_times

__all__ = ["DEFAULT_MODELS", "FIELDS", "MODEL_HOOKS", "NcnnNet", "Record", "SUITES", "Settings", "attainable",
           "fit_repeats", "gpu_times", "judge", "kernel_cases", "main", "markdown_table", "model_cases",
           "measure_roofline", "ncnn_gpu_index", "paths", "run", "targets", "tiny_mobilenet", "tiny_resnet", "to_ncnn",
           "wall_times", "write_json"]
