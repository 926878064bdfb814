"""Six real models for the PyTorch client's tests and benchmark, each with its loss and a batch.

Every factory follows the ``remat profile`` contract: ``factory(batch_size=None, **size)`` returns
``(model, example_inputs, loss_fn)`` where ``loss_fn(model, *inputs)`` is the training step's
loss. Defaults are small enough for a 2-core CPU test run; the benchmark passes larger sizes.

Each model runs its blocks under ``torch.utils.checkpoint`` in groups of ``checkpoint_every``
blocks when that attribute is set (0, the default, means no checkpointing): the baseline the
benchmark compares remat with. ``CHECKPOINT_SETTINGS`` lists the groupings that make sense.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

Factory = Callable[..., tuple[nn.Module, tuple[torch.Tensor, ...], Callable[..., torch.Tensor]]]


def _blocks(fns: list[Callable[..., Any]], state: Any, every: int) -> Any:
    """Apply ``fns`` in order to ``state`` (a tensor or a tuple); groups of ``every`` run checkpointed."""
    if every <= 0:
        for fn in fns:
            state = fn(state)
        return state
    for i in range(0, len(fns), every):
        group = fns[i:i + every]
        packed = state if isinstance(state, tuple) else (state,)
        out = checkpoint(_group(group, isinstance(state, tuple)), *packed, use_reentrant=False)
        state = out
    return state


def _group(fns: list[Callable[..., Any]], tupled: bool) -> Callable[..., Any]:
    def run(*args: torch.Tensor) -> Any:
        state: Any = args if tupled else args[0]
        for fn in fns:
            state = fn(state)
        return state
    return run


def _regression(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (model(x) - y).pow(2).mean()


def _classification(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


# -- deep MLP -------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth))
        self.checkpoint_every = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _blocks(list(self.layers), x, self.checkpoint_every)


def mlp(batch_size: int | None = None, *, width: int = 128, depth: int = 8) -> Any:
    b = batch_size or 256  # activations about three times the gradients, as in the models people train
    return MLP(width, depth), (torch.randn(b, width), torch.randn(b, width)), _regression


# -- ResNet-style network with batch norm ----------------------------------------------------------


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = nn.Sequential()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)), inplace=True)
        h = self.bn2(self.conv2(h))
        h += self.skip(x)
        return F.relu(h, inplace=True)


class ResNet(nn.Module):
    def __init__(self, width: int, blocks: int, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True))
        layers, c = [], width
        for stage in range(3):
            for i in range(blocks):
                cout = width * 2**stage
                layers.append(Block(c, cout, 2 if i == 0 and stage else 1))
                c = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(c, classes)
        self.checkpoint_every = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = _blocks(list(self.layers), self.stem(x), self.checkpoint_every)
        return self.head(h.mean(dim=(2, 3)))


def resnet(batch_size: int | None = None, *, width: int = 8, blocks: int = 1, image: int = 16) -> Any:
    b = batch_size or 8
    return (ResNet(width, blocks), (torch.randn(b, 3, image, image), torch.randint(0, 10, (b,))),
            _classification)


# -- U-Net with skip connections -------------------------------------------------------------------


def _double_conv(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    def __init__(self, width: int, levels: int) -> None:
        super().__init__()
        chans = [width * 2**i for i in range(levels + 1)]
        self.down = nn.ModuleList([_double_conv(1, chans[0])] + [_double_conv(chans[i], chans[i + 1])
                                                                  for i in range(levels)])
        self.up = nn.ModuleList(nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2) for i in range(levels))
        self.merge = nn.ModuleList(_double_conv(2 * chans[i], chans[i]) for i in range(levels))
        self.out = nn.Conv2d(chans[0], 1, 1)
        self.checkpoint_every = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, block in enumerate(self.down):
            x = self._run(block, x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        x = skips.pop()
        for i in reversed(range(len(self.up))):
            x = self._run(self.merge[i], torch.cat([self.up[i](x), skips.pop()], dim=1))
        return self.out(x)

    def _run(self, block: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """A double convolution; checkpointed one by one (skips make larger groups awkward)."""
        return _blocks([block], x, self.checkpoint_every)


def unet(batch_size: int | None = None, *, width: int = 4, levels: int = 2, image: int = 16) -> Any:
    b = batch_size or 2
    return UNet(width, levels), (torch.randn(b, 1, image, image), torch.randn(b, 1, image, image)), _regression


# -- GPT-style transformer with dropout ------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(x).split(d, dim=2))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = self.attn_drop(scores.masked_fill(~mask, float("-inf")).softmax(dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.resid_drop(self.proj(y))


class GPTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, dim: int, heads: int, layers: int, dropout: float) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(GPTBlock(dim, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.checkpoint_every = 0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.tok(idx) + self.pos(pos))
        x = _blocks(list(self.blocks), x, self.checkpoint_every)
        return self.head(self.ln(x))


def gpt(batch_size: int | None = None, *, vocab: int = 64, context: int = 32, dim: int = 32, heads: int = 4,
        layers: int = 2, dropout: float = 0.1) -> Any:
    b = batch_size or 4
    idx = torch.randint(0, vocab, (b, context))
    return GPT(vocab, context, dim, heads, layers, dropout), (idx, torch.roll(idx, -1, dims=1)), _classification


# -- unrolled LSTM -----------------------------------------------------------------------------------


class UnrolledLSTM(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.cell = nn.LSTMCell(features, hidden)
        self.head = nn.Linear(hidden, classes)
        self.checkpoint_every = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], self.cell.hidden_size)
        steps = [lambda state, t=t: self.cell(x[:, t], state) for t in range(x.shape[1])]
        h, _ = _blocks(steps, (h, torch.zeros_like(h)), self.checkpoint_every)
        return self.head(h)


def lstm(batch_size: int | None = None, *, steps: int = 12, features: int = 16, hidden: int = 32) -> Any:
    b = batch_size or 8
    return (UnrolledLSTM(features, hidden, 5), (torch.randn(b, steps, features), torch.randint(0, 5, (b,))),
            _classification)


# -- mixture of experts ------------------------------------------------------------------------------


class MoEBlock(nn.Module):
    """A mixture-of-experts feed-forward block: the router's top-k gates weigh every expert's output
    (dense dispatch: static shapes, and a graph that fans out to every expert and back)."""

    def __init__(self, dim: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
                                     for _ in range(experts))
        self.top_k = top_k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        weights, chosen = self.router(h).softmax(dim=-1).topk(self.top_k, dim=-1)
        gates = torch.zeros(*h.shape[:-1], len(self.experts), device=h.device).scatter(-1, chosen, weights)
        return x + sum(gates[..., e:e + 1] * expert(h) for e, expert in enumerate(self.experts))


class MoE(nn.Module):
    def __init__(self, vocab: int, dim: int, experts: int, top_k: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(MoEBlock(dim, experts, top_k) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)
        self.checkpoint_every = 0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(_blocks(list(self.blocks), self.tok(idx), self.checkpoint_every))


def moe(batch_size: int | None = None, *, vocab: int = 64, context: int = 16, dim: int = 32, experts: int = 4,
        top_k: int = 2, layers: int = 2) -> Any:
    b = batch_size or 4
    idx = torch.randint(0, vocab, (b, context))
    return MoE(vocab, dim, experts, top_k, layers), (idx, torch.roll(idx, -1, dims=1)), _classification


MODELS: dict[str, Factory] = {"mlp": mlp, "resnet": resnet, "unet": unet, "gpt": gpt, "lstm": lstm, "moe": moe}

#: Values of ``checkpoint_every`` worth comparing, per model.
CHECKPOINT_SETTINGS: dict[str, tuple[int, ...]] = {"mlp": (1, 2, 4), "resnet": (1, 2), "unet": (1,), "gpt": (1, 2),
                                                   "lstm": (1, 2, 4), "moe": (1, 2)}
