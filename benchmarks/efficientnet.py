"""EfficientNet-B0 (torchvision's `efficientnet_b0` layout, v0.2x) in plain torch, for a machine
without torchvision (the CPU machine): the same stages (MBConv blocks with squeeze-excitation,
stochastic depth on the residual branches, dropout before the classifier), channel counts,
strides, kernel sizes, activation and initialisation, so that Dynamo and AOTAutograd hand a
backend graphs of the same structure (module names differ). models.build uses torchvision's
where it is importable."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

# (expand ratio, kernel, stride, input channels, output channels, blocks): EfficientNet-B0's
# Table 1 (width and depth multipliers 1.0)
B0_STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
             (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
             (6, 3, 1, 192, 320, 1))


def _round8(v: float) -> int:
    """Channels rounded to a multiple of 8, never below 90% of v."""
    out = max(8, int(v + 4) // 8 * 8)
    return out + 8 if out < 0.9 * v else out


def _conv_bn(cin, cout, k=1, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.SiLU(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels, squeeze):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.act = nn.SiLU(inplace=True)
        self.gate = nn.Sigmoid()

    def forward(self, x):
        s = self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))
        return s * x


class DropRows(nn.Module):
    """Stochastic depth, per sample ("row" mode): in training each sample's branch is kept with
    probability 1 - p and scaled by 1 / (1 - p)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype, device=x.device)
        noise = noise.bernoulli_(keep)
        if keep > 0.0:
            noise.div_(keep)
        return x * noise


class MBConv(nn.Module):
    def __init__(self, expand, k, stride, cin, cout, drop):
        super().__init__()
        mid = _round8(cin * expand)
        layers = [] if mid == cin else [_conv_bn(cin, mid)]
        layers += [_conv_bn(mid, mid, k, stride, groups=mid),
                   SqueezeExcite(mid, max(1, cin // 4)),
                   _conv_bn(mid, cout, act=False)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout
        self.drop = DropRows(drop)

    def forward(self, x):
        out = self.block(x)
        if self.residual:
            out = self.drop(out)
            out += x
        return out


class EfficientNet(nn.Module):
    def __init__(self, stages=B0_STAGES, dropout=0.2, drop_path=0.2, num_classes=1000):
        super().__init__()
        layers = [_conv_bn(3, stages[0][3], 3, 2)]
        total, i = sum(s[5] for s in stages), 0
        for expand, k, stride, cin, cout, n in stages:
            blocks = []
            for j in range(n):
                blocks.append(MBConv(expand, k, stride if j == 0 else 1, cin if j == 0 else cout,
                                     cout, drop_path * i / total))
                i += 1
            layers.append(nn.Sequential(*blocks))
        last = 4 * stages[-1][4]
        layers.append(_conv_bn(stages[-1][4], last))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True),
                                        nn.Linear(last, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                r = 1.0 / math.sqrt(m.out_features)
                nn.init.uniform_(m.weight, -r, r)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.avgpool(self.features(x)).flatten(1)
        return self.classifier(x)


def efficientnet_b0(num_classes=1000):
    return EfficientNet(num_classes=num_classes)
