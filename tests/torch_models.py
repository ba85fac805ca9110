"""The PyTorch models the frontend is tested on: the BYOC tutorial's network and four common blocks."""

import torch
import torch.nn.functional as F
from torch import nn


class SmallConvNet(nn.Module):
    """The BYOC tutorial's network: conv-relu-pool-conv-relu."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv2(F.max_pool2d(F.relu(self.conv1(x)), 2)))


class BasicBlock(nn.Module):
    """ResNet's basic block, with a 1x1 projection when the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (
            None
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNetBlocks(nn.Module):
    """A stem, two basic blocks (one strided), global pooling and a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


class MLP(nn.Module):
    """Linear layers with GELU and SiLU, then softmax."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 128), nn.SiLU(), nn.Linear(128, 10))

    def forward(self, x):
        return F.softmax(self.net(x), dim=-1)


class Encoder(nn.Module):
    """An embedding, nn.TransformerEncoderLayer (attention, layer norm, MLP), mean over tokens."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, tokens):
        return self.layer(self.embed(tokens)).mean(dim=1)


class DepthwiseSeparable(nn.Module):
    """MobileNet's block: depthwise 3x3, batch norm, relu6, pointwise 1x1, batch norm, hard-swish."""

    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.pw = nn.Conv2d(16, 32, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        y = F.relu6(self.bn1(self.dw(x)))
        y = F.hardswish(self.bn2(self.pw(y)))
        return self.pool(y).view(y.shape[0], -1)


def randomize_batch_norm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give batch norms statistics that are not the identity, so folding them is really tested."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            for tensor, low, high in ((module.running_mean, -0.5, 0.5), (module.running_var, 0.5, 1.5),
                                      (module.weight.data, 0.5, 1.5), (module.bias.data, -0.5, 0.5)):  # fmt: skip
                tensor.copy_(torch.rand(tensor.shape, generator=generator) * (high - low) + low)
    return model


def cases() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """name -> (model in eval mode, example input)."""
    torch.manual_seed(0)
    return {
        "small_conv_net": (SmallConvNet(), torch.randn(1, 3, 16, 16)),
        "resnet_basic_blocks": (ResNetBlocks(), torch.randn(2, 3, 16, 16)),
        "mlp": (MLP(), torch.randn(4, 64)),
        "transformer_encoder_layer": (Encoder(), torch.randint(0, 100, (2, 7))),
        "depthwise_separable": (DepthwiseSeparable(), torch.randn(1, 16, 8, 8)),
    }
