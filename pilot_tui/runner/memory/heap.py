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
never dropped by a phase, so freezing it loses nothing. The libraries are frozen as soon as they
are imported (`freeze_imports`: modules, classes and functions are never garbage), so the one
collection at the open's end (`keep_opened`) walks only the task or the script's capture and
collects what it left in reference cycles: 12-16 ms on the scripts here, where walking the
whole heap took 0.2 s. A runner that opens a campaign again hands the previous heap back and
collects it first (`hand_back`). The template process freezes its imports the same way before it
forks, so a fresh process's collections walk neither the libraries nor anything but its own work.
"""

from __future__ import annotations

import gc

# Whether this process froze its opened heap (`keep_opened`): asking the collector instead walks
# every frozen object, ~40 ms with transformers and TRL loaded, and the estimate's fake runs and
# each steady ask.
_kept = False


def freeze_imports() -> None:
    """Before the task is built or the script captured: what the imports made is frozen as it is
    (their own few cyclic leftovers with it: no tensor, never walked again)."""
    gc.freeze()


def keep_opened() -> None:
    """After a campaign's open: collect what the open left in reference cycles, then move every
    object alive now out of the collector's reach for the rest of the process's life."""
    global _kept
    gc.collect()
    gc.freeze()
    _kept = True


def hand_back() -> None:
    """Before a campaign is opened again in the same runner (or when a test is done with it):
    the previous open's heap may be garbage now, so the collector gets it back."""
    global _kept
    gc.unfreeze()
    gc.collect()
    _kept = False


def frozen_by_someone() -> bool:
    """Whether a heap is frozen already (the runner's opened heap, a test's). Where this process
    did not freeze it itself, the collector counts the frozen objects by walking them (~12 ms with
    torch loaded, ~40 ms with TRL): call it before any clock starts."""
    return _kept or gc.get_freeze_count() > 0
