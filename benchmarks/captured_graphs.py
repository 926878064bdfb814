"""Capture real PyTorch training steps into benchmarks/graphs/captured/ for benchmarks/large.py.

One model per family, sized to put the graph in the 150 to 2,000 node range of real captured
graphs: a ResNet (convolutional), a U-Net (skip connections), a GPT (transformer with dropout)
and an unrolled LSTM (recurrent). The models are the PyTorch client's test models
(tests/torch_models.py); ``remat.clients.torch.export_graph`` captures the joint forward and
backward graph through AOTAutograd, folds views into their producers and costs nodes with the
FLOP model. Needs torch (``pip install remat[torch]``).

    python benchmarks/captured_graphs.py                        # writes the four JSON files
    python benchmarks/captured_graphs.py gpt-128 --out /tmp     # a larger one (not shipped), for timings
    python benchmarks/captured_graphs.py lstm-16 lstm-96 unet-4 gpt-6-w128 gpt-32 moe-8 resnet-16x2 mlp-64 \\
        --out /tmp/generated                                    # the other families and sizes of large.py --extra
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from torch_models import MODELS  # noqa: E402

from remat.clients.torch import export_graph  # noqa: E402

OUT = ROOT / "benchmarks" / "graphs" / "captured"

CAPTURES: dict[str, tuple[str, int | None, dict[str, int]]] = {
    "resnet-8x3": ("resnet", 8, {"blocks": 8, "width": 16, "image": 32}),
    "unet-6": ("unet", 8, {"levels": 6, "width": 4, "image": 256}),
    "gpt-12": ("gpt", 4, {"layers": 12, "dim": 64, "context": 64}),
    "lstm-48": ("lstm", 8, {"steps": 48}),
}
"""Name: (model factory, batch size, sizes)."""

ON_REQUEST: dict[str, tuple[str, int | None, dict[str, int]]] = {
    "gpt-128": ("gpt", 4, {"layers": 128, "dim": 64, "context": 64}),
    "lstm-16": ("lstm", 8, {"steps": 16}),
    "lstm-96": ("lstm", 8, {"steps": 96}),
    "unet-4": ("unet", 8, {"levels": 4, "width": 8, "image": 64}),
    "gpt-6-w128": ("gpt", 4, {"layers": 6, "dim": 128, "context": 128}),
    "gpt-32": ("gpt", 4, {"layers": 32, "dim": 64, "context": 64}),
    "moe-8": ("moe", 4, {"layers": 8, "experts": 8, "dim": 64, "context": 64}),
    "resnet-16x2": ("resnet", 8, {"blocks": 16, "width": 8, "image": 32}),
    "mlp-64": ("mlp", 4096, {"depth": 64, "width": 64}),
}
"""Captured on request only (not shipped): the 128-block GPT (7,956 nodes) that benchmarks/baselines.py
--timing measures, and the graphs of other sizes and families that ``large.py --extra`` compares the
default solve on with a run to the limit (graphs it was not tuned on)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", choices=[*CAPTURES, *ON_REQUEST], default=list(CAPTURES),
                        help="which models (default: the four of benchmarks/graphs/captured)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the folder to write NAME.json to (default {OUT})")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        factory, batch, sizes = {**CAPTURES, **ON_REQUEST}[name]
        started = time.monotonic()
        model, inputs, loss_fn = MODELS[factory](batch, **sizes)
        graph = export_graph(model, inputs, loss_fn=loss_fn)
        doc = graph.to_json()
        doc["name"] = name
        (args.out / f"{name}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(f"{name}: {graph.size} nodes, {graph.edge_count} edges, captured in "
              f"{time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
