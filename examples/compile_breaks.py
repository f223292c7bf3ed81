"""An MLP trained under torch.compile, with flags that plant a graph break or a recompilation.

    python examples/compile_breaks.py --steps 30
    perfdoctor profile examples/compile_breaks.py --steps 30 -- --graph-break item

Plain PyTorch; the shared flags are those of ``_train_common.py``. This script adds:

    --graph-break item     three blocks each read a value to Python (``.item()``): 3 graph breaks per step
    --graph-break print    three blocks each print: 3 graph breaks per step
    --shape-every N        the batch loses one sample every N steps, and the model is compiled with
                           ``dynamic=False``: a new input shape, so a recompilation, every N steps

Without them the whole forward is one compiled graph, compiled once.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from _train_common import base_parser, launch
from mlp import Synthetic


class BlockMLP(nn.Module):
    """Four Linear + ReLU blocks and a head; ``graph_break`` plants one break after each of the first three blocks.

    The blocks are written out, not looped over: Dynamo runs a frame whose loop holds a graph break in eager mode
    altogether, where a break in straight-line code splits the frame into compiled graphs.
    """

    def __init__(self, dim: int, hidden: int, classes: int, graph_break: str) -> None:
        super().__init__()
        self.l0, self.l1 = nn.Linear(dim, hidden), nn.Linear(hidden, hidden)
        self.l2, self.l3 = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)
        self.graph_break = graph_break
        self.sink = open(os.devnull, "w") if graph_break == "print" else None  # noqa: SIM115

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # written out, not in a helper: a call to a function that breaks is a frame boundary, so Dynamo would
        # compile the helper's own ops as one more graph per call
        x = F.relu(self.l0(x))
        if self.graph_break == "item" and x.abs().max().item() > 1e6:  # a divergence guard read on the host
            raise FloatingPointError("activations diverged after block 0")
        if self.graph_break == "print":
            print("block 0 done", file=self.sink)
        x = F.relu(self.l1(x))
        if self.graph_break == "item" and x.abs().max().item() > 1e6:
            raise FloatingPointError("activations diverged after block 1")
        if self.graph_break == "print":
            print("block 1 done", file=self.sink)
        x = F.relu(self.l2(x))
        if self.graph_break == "item" and x.abs().max().item() > 1e6:
            raise FloatingPointError("activations diverged after block 2")
        if self.graph_break == "print":
            print("block 2 done", file=self.sink)
        x = F.relu(self.l3(x))
        return self.head(x)


def build(args):
    model = BlockMLP(args.dim, args.hidden, args.classes, args.graph_break)
    compiled = torch.compile(model, dynamic=False if args.shape_every else None)
    dataset = Synthetic(args.samples, args.dim, args.classes, args.seed)
    calls = [0]

    def loss_fn(m, batch):
        x, y = batch
        if args.shape_every:  # one sample fewer every N steps: a shape the compiled graph has not seen
            n = max(1, len(x) - calls[0] // args.shape_every)
            x, y = x[:n], y[:n]
        calls[0] += 1
        return F.cross_entropy(m(x), y)

    return compiled, dataset, loss_fn


def main() -> None:
    p = base_parser(__doc__.splitlines()[0], batch_size=64)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--samples", type=int, default=20_000)
    p.add_argument("--graph-break", choices=("none", "item", "print"), default="none")
    p.add_argument("--shape-every", type=int, default=0, help="a new batch size every N steps (0: never)")
    args = p.parse_args()
    launch(args, build)


if __name__ == "__main__":
    main()
