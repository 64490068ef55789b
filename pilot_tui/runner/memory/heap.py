"""The runner's long-lived heap, kept out of the garbage collector's full walks.

What a campaign's open builds (torch and the libraries, the task and its examples, a captured
script's trainer, model and data) lives as long as the runner. A full `gc.collect()` walks all of
it, and several run per campaign: accelerate's `free_memory()` at the start of every
`trainer.train()` (each gate on a captured trainer calls it), the pilot's after each memory
variant, and on CUDA after each phase (`probes.release_cache`). With transformers and TRL loaded
one walk is ~0.2 s on a CPU core; a piloted TRL `sft.py` paid it about fifteen times.

Frozen once the open is done (`gc.freeze()`, constant time), those collections walk only what the
phases made since, and that is where every tensor a phase drops lives: a variant's weights and
optimizer state, a gate's trainer state, a failed update's gradients. What the open built is
never dropped by a phase, so freezing it loses nothing; the open's own garbage is collected once
before the freeze. A runner that opens a campaign again hands the previous heap back first
(`hand_back`). The template process freezes its imports the same way before it forks, so a fresh
process's collections walk neither the libraries nor anything but its own work.
"""

from __future__ import annotations

import gc


def keep_opened() -> None:
    """After a campaign's open: collect what the open left in reference cycles, then move every
    object alive now out of the collector's reach for the rest of the process's life."""
    gc.collect()
    gc.freeze()


def hand_back() -> None:
    """Before a campaign is opened again in the same runner: the previous one's heap may be
    garbage now, so the collector gets it back."""
    gc.unfreeze()


def frozen_by_someone() -> bool:
    """Whether a heap is frozen already (the runner's opened heap, a test's): counted by walking
    the frozen objects, ~12 ms where torch is loaded, so call it before any clock starts."""
    return gc.get_freeze_count() > 0
