"""Every rank must train on the same split, and the sampler must deal it out as a partition that
changes with the epoch (R22, R26). Pure: the digests are gathered by whoever runs the ranks."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence


def split_digest(splits: Mapping[str, Sequence[int]], ids: Sequence[str]) -> str:
    """One hash of which example ids are in which split (order within a split ignored)."""
    h = hashlib.sha256()
    for name in sorted(splits):
        h.update(name.encode() + b"\0")
        for example in sorted(str(ids[i]) for i in splits[name]):
            h.update(example.encode() + b"\0")
    return h.hexdigest()[:16]


def differing_ranks(digests: Sequence[str]) -> list[int]:
    """Ranks whose split differs from rank 0's."""
    return [r for r, d in enumerate(digests) if d != digests[0]]


def split_mismatch(digests: Sequence[str]) -> str:
    """'' when every rank holds rank 0's split, else the sentence naming the ranks."""
    bad = differing_ranks(digests)
    if not bad:
        return ""
    return (
        f"rank {', '.join(map(str, bad))} see{'s' if len(bad) == 1 else ''} another train / validation / test "
        f"split than rank 0 ({len(bad)} of {len(digests)} ranks): examples built in a different order or with "
        "an unseeded shuffle per process — validation leaks into another rank's train"
    )


def sampler_problems(orders: Sequence[Sequence[Sequence[int]]]) -> str:
    """`orders[epoch][rank]`: the example indices one rank drew in one epoch. '' when each epoch's
    shares are disjoint across ranks and the order changes between epochs, else what is wrong
    (a sampler without `set_epoch` repeats the same order every epoch)."""
    for e, ranks in enumerate(orders):
        seen: dict[int, int] = {}
        for r, share in enumerate(ranks):
            for i in share:
                if i in seen and seen[i] != r:
                    return f"epoch {e}: example {i} is drawn by rank {seen[i]} and rank {r} (not a partition)"
                seen[i] = r
    for e in range(1, len(orders)):
        for r, share in enumerate(orders[e]):
            if list(share) == list(orders[e - 1][r]) and len(share) > 1:
                return (
                    f"rank {r} draws the same order in epoch {e} as in epoch {e - 1}: the sampler's epoch is "
                    "not set (DistributedSampler.set_epoch)"
                )
    return ""
