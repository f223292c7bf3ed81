"""A small MLP regression-classifier on synthetic data through a torch DataLoader.

    python examples/mlp.py --steps 300
    perfdoctor profile examples/mlp.py --steps 300

Plain PyTorch; see ``_train_common.py`` for the flags that switch on each
performance problem. This model adds one of its own: ``--head-loop N`` splits the
last hidden layer into N heads, each through its own small ``nn.Linear`` in a
Python loop (N tiny ops and their dispatch per pass, PD105); with
``--head-batched`` the same N weights are one (N, d, d) tensor applied by one
``torch.einsum``: the fix. ``--norm hand`` follows each layer with a LayerNorm and a
tanh-approximate GELU written out as chains of small ops (PD202); ``--norm compiled``
the same under ``torch.compile`` (the fix PD202 replays); ``--norm builtin`` with
the built-in ``F.layer_norm`` and ``F.gelu(approximate="tanh")``; ``--norm alternate``
runs the hand-written chains on odd steps and the compiled ones on even steps (both
sides of the fix in one run, in the same state of the machine).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from _train_common import base_parser, launch, unfused_chain


class Synthetic(torch.utils.data.Dataset):
    """Gaussian features, labels from a fixed random linear teacher; ``slow_ms`` sleeps per item, ``busy_ms``
    computes per item (CPU time, like a decode or an augmentation)."""

    def __init__(self, n: int, dim: int, classes: int, seed: int, slow_ms: float = 0.0, busy_ms: float = 0.0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x @ torch.randn(dim, classes, generator=g)).argmax(dim=1)
        self.slow_ms = slow_ms
        self.busy_ms = busy_ms

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.slow_ms:
            import time

            time.sleep(self.slow_ms / 1000.0)
        if self.busy_ms:
            import time

            until = time.thread_time() + self.busy_ms / 1000.0
            while time.thread_time() < until:  # CPU time, not wall time: a loaded core stretches it
                pass
        return self.x[i], self.y[i]


class Heads(nn.Module):
    """``n`` per-head linear maps of ``width // n`` features each: one small ``nn.Linear`` per head applied in a
    Python loop, or (``batched``) the same maps as one (n, d, d) weight applied by one einsum."""

    def __init__(self, width: int, n: int, batched: bool) -> None:
        super().__init__()
        if width % n:
            raise SystemExit(f"--head-loop {n}: the hidden width {width} is not a multiple of it")
        self.n, self.d, self.batched = n, width // n, batched
        if batched:
            self.weight = nn.Parameter(torch.randn(n, self.d, self.d) / self.d**0.5)
            self.bias = nn.Parameter(torch.zeros(n, self.d))
        else:
            self.heads = nn.ModuleList(nn.Linear(self.d, self.d) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.batched:
            h = x.view(x.shape[0], self.n, self.d)
            return (torch.einsum("bnd,nde->bne", h, self.weight) + self.bias).reshape(x.shape)
        parts = x.split(self.d, dim=1)
        return torch.cat([head(part) for head, part in zip(self.heads, parts)], dim=1)


def _norm_act_by_hand(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    h = (x - mean) / torch.sqrt(var + 1e-5) * weight + bias
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h.pow(3))))


class NormAct(nn.Module):
    """LayerNorm then tanh-approximate GELU: written out as a chain of small ops (``hand``, as in many transformer
    codebases), the same chain under ``torch.compile`` (``compiled``: fused into one loop per chain), or the
    built-ins ``F.layer_norm`` and ``F.gelu(approximate="tanh")`` (``builtin``); ``alternate``: compiled on even
    calls, by hand on odd ones (one call per step: the training loop's steps alternate)."""

    def __init__(self, width: int, mode: str) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(width)), nn.Parameter(torch.zeros(width))
        self.mode = mode
        self.fn = torch.compile(_norm_act_by_hand) if mode in ("compiled", "alternate") else _norm_act_by_hand
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "builtin":
            h = F.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)
            return F.gelu(h, approximate="tanh")
        fn = _norm_act_by_hand if self.mode == "alternate" and self.calls % 2 == 1 else self.fn
        self.calls += 1
        return fn(x, self.weight, self.bias)


class MLP(nn.Module):
    def __init__(
        self,
        dim: int,
        hidden: int,
        classes: int,
        depth: int,
        chain: int,
        heads: int = 0,
        batched: bool = False,
        norm: str = "",
    ) -> None:
        super().__init__()
        dims = [dim] + [hidden] * depth
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(NormAct(hidden, norm) for _ in self.layers) if norm else None
        self.heads = Heads(hidden, heads, batched) if heads else None
        self.head = nn.Linear(hidden, classes)
        self.chain = chain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            if self.norms is not None:
                x = self.norms[i](layer(x))
                continue
            x = unfused_chain(F.relu(layer(x)), self.chain)
        if self.heads is not None:
            x = F.relu(self.heads(x))
        return self.head(x)


def build(args):
    model = MLP(
        args.dim,
        args.hidden,
        args.classes,
        args.depth,
        args.unfused_chain,
        args.head_loop,
        args.head_batched,
        args.norm,
    )
    dataset = Synthetic(args.samples, args.dim, args.classes, args.seed, args.slow_getitem_ms, args.busy_getitem_ms)
    return model, dataset, lambda m, batch: F.cross_entropy(m(batch[0]).float(), batch[1])


def main() -> None:
    p = base_parser(__doc__.splitlines()[0], batch_size=64)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--samples", type=int, default=20_000)
    p.add_argument("--head-loop", type=int, default=0, help="N per-head Linear modules in a Python loop (PD105)")
    p.add_argument("--head-batched", action="store_true", help="under --head-loop, one batched einsum instead")
    p.add_argument(
        "--norm",
        choices=("hand", "compiled", "builtin", "alternate"),
        default="",
        help="LayerNorm + tanh-GELU after each layer in place of ReLU: written out as small ops (PD202), the same "
        "under torch.compile, the built-ins, or by hand on odd steps and compiled on even ones",
    )
    args = p.parse_args()
    launch(args, build)


if __name__ == "__main__":
    main()
