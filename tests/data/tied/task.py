"""A task file whose model comes from a sibling module (`from my_model import TiedLM`)."""

from __future__ import annotations

from my_model import TiedLM

from pilot_tui.tasks import demo_instruct as demo
from pilot_tui.tasks.contract import CAUSAL_LM, Task


def make_task(n_conversations: int = 60) -> Task:
    return Task(
        name="tied",
        kind=CAUSAL_LM,
        examples=demo.generate(n_conversations, seed=0),
        build_model=lambda: TiedLM(demo.VOCAB),
        collate=demo.make_collate(),
        group_key="conversation",
        decode_token=demo.decode_token,
        encode_replay=demo.encode_replay,
        default_max_length=28,
    )
