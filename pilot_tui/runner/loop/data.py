"""Deterministic data order with an O(1) resumable position (R9, R15).

The order of an epoch depends only on (seed, epoch), never on the torch RNG, so a resumed run
jumps straight to (epoch, update) without re-iterating consumed batches.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class UpdateSampler:
    """Yields the example indices of one optimizer update, split into microbatches.

    With `replicas` > 1 an update is `microbatch × accumulation × replicas` examples of one global
    order, and this rank takes its contiguous share (what a DistributedSampler does per epoch): the
    position counts global updates, so a checkpoint resumes at any world size.
    """

    indices: list[int]
    microbatch: int
    accumulation: int
    seed: int
    drop_last: bool = True
    epoch: int = 0
    position: int = 0  # updates already taken in this epoch
    replicas: int = 1
    rank: int = 0

    def __post_init__(self) -> None:
        self._cache: tuple[int, list[int]] | None = None

    @property
    def effective(self) -> int:
        return self.microbatch * self.accumulation * self.replicas

    @property
    def updates_per_epoch(self) -> int:
        n, eff = len(self.indices), self.effective
        return n // eff if self.drop_last else -(-n // eff)

    def _order(self, epoch: int) -> list[int]:
        if self._cache is None or self._cache[0] != epoch:
            order = list(self.indices)
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            self._cache = (epoch, order)
        return self._cache[1]

    def next_update(self) -> list[list[int]]:
        if self.updates_per_epoch == 0:
            raise ValueError(
                f"{len(self.indices)} training examples make no complete update of {self.effective}"
            )
        if self.position >= self.updates_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        order = self._order(self.epoch)
        start = self.position * self.effective
        chunk = order[start : start + self.effective]
        share = -(-len(chunk) // self.replicas)  # an incomplete last update is split as evenly as it goes
        chunk = chunk[self.rank * share : (self.rank + 1) * share]
        self.position += 1
        return [chunk[i : i + self.microbatch] for i in range(0, len(chunk), self.microbatch)]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if int(state["seed"]) != self.seed:
            raise ValueError(f"data order seed {state['seed']} does not match {self.seed}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
