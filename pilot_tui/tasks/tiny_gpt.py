"""A small decoder-only transformer in plain PyTorch, for the demo and the tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import is_fake
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        # Right padding + causal attention: real tokens never attend to the pads after them,
        # so outputs at real positions do not depend on how much padding the batch has. Pads
        # before real tokens (a left-padded batch, as generation batches) need `mask`.
        if mask is None:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, `n_layers` pre-norm blocks, tied-free LM head."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 4,
        max_positions: int = 128,
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        # Recompute block activations in backward instead of keeping them (R11).
        self.activation_checkpointing = False

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.shape[1] > self.pos.num_embeddings:
            # Checked on the host: on CUDA an out-of-range embedding index is a device-side assert
            # that poisons the process's CUDA context, so every later phase would fail too.
            raise ValueError(
                f"sequence length {input_ids.shape[1]} is over the model's {self.pos.num_embeddings} positions"
            )
        positions: torch.Tensor = torch.arange(input_ids.shape[1], device=input_ids.device)
        mask = None
        if not self.training and attention_mask is not None:
            positions, mask = _left_padding(attention_mask, positions)
        x = self.tok(input_ids) + self.pos(positions)
        for block in self.blocks:
            if self.activation_checkpointing and self.training:
                x = checkpoint(block, x, mask, use_reentrant=False)
            else:
                x = block(x, mask)
        return self.head(self.ln(x))


def _left_padding(
    attention_mask: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Positions and attention mask for a batch with pads before real tokens (batched generation
    pads on the left): positions count real tokens only and no query attends to a pad, so a
    prompt answers the same alone or in a batch. Right-padded batches (training's) keep the plain
    causal path, bit for bit; only eval batches are looked at (the look reads the mask on the host)."""
    if is_fake(attention_mask) or attention_mask.device.type == "meta":
        return positions, None  # the estimate's fake run, inspect's meta probe: nothing on the host
    real = attention_mask.bool()
    if not bool((~real[:, :-1] & real[:, 1:]).any()):
        return positions, None
    t = real.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=real.device).tril()
    # Each position also sees itself: a pad with no real token before it would otherwise attend to
    # nothing and turn NaN (and 0 x NaN is NaN in the weighted sum of the values).
    eye = torch.eye(t, dtype=torch.bool, device=real.device)
    mask = (causal[None, None] & real[:, None, None, :]) | eye[None, None]
    return (real.long().cumsum(1) - 1).clamp(min=0), mask


def set_checkpointing(model: nn.Module, on: bool) -> None:
    model.activation_checkpointing = on  # type: ignore[assignment]
