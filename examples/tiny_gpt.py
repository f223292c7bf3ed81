"""A tiny nanoGPT-like byte-level transformer, trained on CPU in about a minute.

    python examples/tiny_gpt.py --steps 500
    perfdoctor profile examples/tiny_gpt.py --steps 500

Plain PyTorch; see ``_train_common.py`` for the flags that switch on each
performance problem (slow ``__getitem__``, unfused chains, ``.item()`` per
step, bf16 autocast, DDP, phase change, a failure mid-run).
"""

from __future__ import annotations

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from _train_common import base_parser, launch, unfused_chain

WORDS = (
    "the quick brown fox jumps over a lazy dog while profilers watch every kernel launch and "
    "the optimizer steps forward one batch at a time through memory bound elementwise chains"
).split()


def make_text(n_bytes: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-English text: random words from a small vocabulary."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_bytes:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out).encode()[:n_bytes]


class ByteWindows(torch.utils.data.Dataset):
    """(x, y) windows of ``seq_len`` bytes; ``slow_ms`` sleeps in ``__getitem__``."""

    def __init__(self, data: torch.Tensor, seq_len: int, slow_ms: float = 0.0) -> None:
        self.data, self.seq_len, self.slow_ms = data, seq_len, slow_ms

    def __len__(self) -> int:
        return len(self.data) - self.seq_len - 1

    def __getitem__(self, i: int):
        if self.slow_ms:
            import time

            time.sleep(self.slow_ms / 1000.0)
        chunk = self.data[i : i + self.seq_len + 1].long()
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    def __init__(self, d: int, n_head: int, chain: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.n_head, self.chain = n_head, chain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        h = F.gelu(self.fc(self.ln2(x)))
        h = unfused_chain(h, self.chain)
        return x + self.out(h)


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d: int, n_layer: int, n_head: int, chain: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, n_head, chain) for _ in range(n_layer))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(n_layer))

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def build(args):
    data = torch.frombuffer(bytearray(make_text(200_000, args.seed)), dtype=torch.uint8)
    model = TinyGPT(256, args.seq_len, args.d_model, args.n_layer, args.n_head, args.unfused_chain)
    dataset = ByteWindows(data, args.seq_len, args.slow_getitem_ms)
    return model, dataset, lambda m, batch: m(batch[0], batch[1])


def main() -> None:
    p = base_parser(__doc__.splitlines()[0], batch_size=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=3)
    p.add_argument("--n-head", type=int, default=4)
    args = p.parse_args()
    launch(args, build)


if __name__ == "__main__":
    main()
