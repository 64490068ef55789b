"""A user's model file beside the task file, with tied weights: the LM head *is* the embedding
(as in nanoGPT's GPT, or Llama with tie_word_embeddings). Imported by `task.py` as a sibling."""

from __future__ import annotations

import torch
from torch import nn


class TiedLM(nn.Module):
    def __init__(self, vocab: int, d_model: int = 32) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.mix = nn.Linear(d_model, d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # shared storage: safetensors refuses to save it as is

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.wte(input_ids)
        # A causal running mean, so each position sees its prefix.
        steps = torch.arange(1, h.shape[1] + 1, device=h.device)[None, :, None]
        h = torch.tanh(self.mix(h.cumsum(1) / steps))
        return self.lm_head(h)
