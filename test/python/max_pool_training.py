# RUN: %PYTHON %s | FileCheck %s
# A training step through max pooling (frontend/pool_decomp.py), channels-last: the ember-fuse
# output of both graphs has no max-pooling library call; the forward's pooling is one kernel
# with the BatchNorm + ReLU before it (a -inf pad and strided slices of the NHWC buffer) that
# writes the pooled values and 1-byte window offsets; the backward gathers the gradient and the
# offsets in a reduction kernel that also computes BatchNorm's gradient sums.
import os
import tempfile

import torch
import torch.nn as nn

import ember

torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                    nn.MaxPool2d(3, 2, 1), nn.Conv2d(8, 8, 3, padding=1))
with tempfile.TemporaryDirectory() as dump:
    compiled = torch.compile(net, backend="ember", options={
        "target": "cpu", "channels_last": True, "debug_dir": dump})
    compiled(torch.randn(2, 3, 12, 12)).sum().backward()
    for kind in ("forward", "backward"):
        (graph,) = [d for d in sorted(os.listdir(dump)) if d.endswith(kind)]
        print(f"// {kind}")
        with open(os.path.join(dump, graph, "04-ember-fuse.mlir")) as f:
            for line in f:
                if "func.func" in line or " call @" in line:
                    print(line.rstrip())

# CHECK-LABEL: // forward
# CHECK-NOT:   max_pool2d
# CHECK:       func.func private @[[POOL:ember_fused_[a-z0-9_]+]]({{.*}}) -> (tensor<2x6x6x8xf32>, tensor<2x6x6x8xi8>) attributes {ember.kernel = "pointwise", ember.ops = [{{.*}}"pad", "extract_slice", {{.*}}"where"]}
# CHECK-LABEL: // backward
# CHECK-NOT:   max_pool2d
# CHECK:       func.func private @ember_fused_{{.*}}(%{{.*}}: tensor<2x6x6x8xi8>{{.*}}) -> ({{.*}}tensor<2x12x12x8xf32>{{.*}}) attributes {ember.kernel = "reduction", ember.ops = [{{.*}}"gather", "cmp", "gather", {{.*}}"sum"
# CHECK-NOT:   max_pool2d
