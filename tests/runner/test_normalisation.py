"""Loss normalisation under accumulation (R9) and the fp16 scaler cadence (R11), with the real
`train_update` on CPU."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from pilot_tui.runner.checks import objective
from pilot_tui.runner.loop.training import TrainConfig, TrainState, build_state, collate, train_update
from pilot_tui.tasks.demo_instruct import make_task

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _one_thread():
    # A tiny model is overhead-bound: one intra-op thread is faster on a shared CI machine, and
    # the gradients compared here come from the same code path either way.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def task():
    return make_task(n_conversations=40, seed=3)


def _state(task, microbatch: int, accumulation: int, precision: str = "fp32") -> TrainState:
    cfg = TrainConfig(
        variant=f"mb{microbatch}x{accumulation}",
        microbatch=microbatch,
        accumulation=accumulation,
        replicas=1,
        max_length=28,
        precision=precision,
        activation_checkpointing=False,
        lr=1e-3,
        seed=0,
        total_updates=10,
    )
    return build_state(
        task,
        cfg,
        range(len(task.examples)),
        CPU,
        weight_decay=0.0,
        warmup=0,
        schedule="constant",
        drop_last=True,
        data_seed=0,
    )


def _grads(state: TrainState) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in state.model.named_parameters() if p.grad is not None}


def _variable_length_examples(task) -> list[int]:
    # 16 examples whose supervised counts differ from microbatch to microbatch: the case where a
    # mean of per-microbatch means is wrong.
    chosen = list(range(16))
    counts = [objective.supervised_count(task, task.collate([task.examples[i]], 28)) for i in chosen]
    assert len(set(counts)) > 3, counts
    return chosen


def test_accumulated_update_equals_one_big_microbatch(task) -> None:
    chosen = _variable_length_examples(task)
    small = _state(task, 2, 8)
    big = _state(task, 16, 1)
    stats_small = train_update(small, task, CPU, 0.0, [chosen[i : i + 2] for i in range(0, 16, 2)])
    stats_big = train_update(big, task, CPU, 0.0, [chosen])
    assert stats_small.supervised == stats_big.supervised
    # The counts are taken from the host batches: they must be the batches' own counts.
    one = [task.collate([task.examples[i]], 28) for i in chosen]
    assert stats_big.supervised == sum(objective.supervised_count(task, b) for b in one)
    assert stats_small.tokens == stats_big.tokens == sum(int(b["attention_mask"].sum()) for b in one)
    assert stats_small.examples == stats_big.examples == 16
    assert torch.allclose(stats_small.loss, stats_big.loss, rtol=1e-5, atol=1e-6)
    g_small, g_big = _grads(small), _grads(big)
    assert g_small.keys() == g_big.keys() and g_small
    for name in g_big:
        assert torch.allclose(g_small[name], g_big[name], rtol=1e-4, atol=1e-6), name
    # The check is sharp enough to catch the usual mistake: a mean of per-microbatch means.
    wrong = _state(task, 2, 8)
    wrong.model.train()
    for idx in [chosen[i : i + 2] for i in range(0, 16, 2)]:
        batch = collate(task, [task.examples[i] for i in idx], 28, CPU)
        logits = objective.forward(task, wrong.model, batch)
        part = objective.loss_sum(task, logits, batch) / objective.supervised_count(task, batch)
        (part / 8).backward()
    g_wrong = _grads(wrong)
    assert any(not torch.allclose(g_wrong[n], g_big[n], rtol=1e-4, atol=1e-6) for n in g_big)


def test_gradient_scaling_changes_no_gradient(task) -> None:
    """Scaling by a power of two and unscaling once per update leaves the fp32 gradients exact."""
    chosen = _variable_length_examples(task)
    micro = [chosen[i : i + 4] for i in range(0, 16, 4)]
    plain = _state(task, 4, 4)
    scaled = _state(task, 4, 4)
    scaled.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, enabled=True)
    train_update(plain, task, CPU, 1.0, micro)
    train_update(scaled, task, CPU, 1.0, micro)
    for name, g in _grads(plain).items():
        assert torch.allclose(_grads(scaled)[name], g, rtol=1e-6, atol=1e-8), name


def test_fp16_scaler_updates_once_per_optimizer_step(task) -> None:
    """fp16 autocast runs on CPU in torch 2.13; the scaler's `update()` must run once per update.

    With growth_interval=1 every `update()` without an overflow doubles the scale, so after 3
    updates of 4 microbatches the scale is init × 2**3 (per-microbatch updates would give 2**12).
    """
    state = _state(task, 2, 4, precision="fp16")
    assert state.scaler.is_enabled()
    state.scaler = torch.amp.GradScaler(
        "cpu", init_scale=2.0**6, growth_factor=2.0, backoff_factor=0.5, growth_interval=1
    )
    for _ in range(3):
        stats = train_update(state, task, CPU, 1.0)
        assert torch.isfinite(stats.grad_norm), "an overflow would back off the scale and blur the count"
        assert len(stats.shapes) == 4
    assert state.scaler.get_scale() == 2.0**6 * 2**3
    assert state.step == 3


def test_fp16_state_gets_an_enabled_scaler_and_fp32_does_not(task) -> None:
    assert _state(task, 2, 2, "fp16").scaler.is_enabled()
    assert not _state(task, 2, 2, "fp32").scaler.is_enabled()
    assert not _state(task, 2, 2, "bf16").scaler.is_enabled()
    # Same seed, same initial weights for every variant.
    a, b = _state(task, 2, 2), _state(task, 4, 1)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters(), strict=True))
    assert replace(a.config, microbatch=4, accumulation=1, variant=b.config.variant) == b.config


def test_tiny_gpt_refuses_a_sequence_longer_than_its_positions() -> None:
    """A host-side error, the same on every device (on CUDA an embedding index past the table
    would be a device-side assert that breaks every later phase of the runner)."""
    from pilot_tui.tasks.tiny_gpt import TinyGPT

    model = TinyGPT(16, d_model=8, n_layers=1, n_heads=2, max_positions=6)
    assert model(torch.zeros((1, 6), dtype=torch.long)).shape == (1, 6, 16)
    with pytest.raises(ValueError, match="sequence length 7 is over the model's 6 positions"):
        model(torch.zeros((1, 7), dtype=torch.long))


def test_the_update_reports_its_loss_and_counts_as_a_plain_loop_computes_them(task) -> None:
    """The update's loss, targets and tokens, counted on the host batches before their copy,
    are what torch computes for the same batches: the sum of the microbatch losses over the
    update's supervised targets, the targets past the shift, the attended positions."""
    chosen = _variable_length_examples(task)
    micro = [chosen[i : i + 4] for i in range(0, 16, 4)]
    reference = _state(task, 4, 4)
    reference.model.train()
    batches = [collate(task, [task.examples[i] for i in idx], 28, CPU) for idx in micro]
    targets = sum(int((b["labels"][:, 1:] != task.ignore_index).sum()) for b in batches)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    with torch.no_grad():
        summed = sum(
            float(objective.loss_sum(task, objective.forward(task, reference.model, b), b)) for b in batches
        )
    stats = train_update(_state(task, 4, 4), task, CPU, 1.0, micro)
    assert (stats.supervised, stats.tokens) == (targets, tokens)
    assert stats.loss.dtype == torch.float32 and stats.loss.dim() == 0
    assert float(stats.loss) == pytest.approx(summed / targets, rel=1e-6)
    # Labels of another dtype (bfloat16, which numpy has no view of) count the same.
    halves = {**batches[0], "labels": batches[0]["labels"].to(torch.bfloat16)}
    assert objective.supervised_count(task, halves) == objective.supervised_count(task, batches[0])


def test_an_update_after_an_evaluation_trains_in_training_mode(task) -> None:
    """`train()` walks every module, so the update calls it only when the model is not in training
    mode: after an evaluation it must still come back, dropout and all."""
    state = _state(task, 4, 1)
    train_update(state, task, CPU, 1.0)
    assert all(m.training for m in state.model.modules())
    state.model.eval()  # what an evaluation leaves behind
    train_update(state, task, CPU, 1.0)
    assert all(m.training for m in state.model.modules())


def test_the_causal_lm_loss_shifts_the_labels_and_never_copies_the_logits(task) -> None:
    # Position t's logits score label t + 1; the last position scores nothing. The loss and
    # the logits' gradient equal those of the plain formulation that slices the logits, and the
    # backward writes the gradient of the logits whole: no [batch, length - 1, vocab] copy of
    # them is made on the way (a slice's backward would allocate and fill a zero tensor).
    batch = collate(task, [task.examples[i] for i in range(6)], 28, CPU)
    batch["labels"][0, 5:9] = task.ignore_index  # masked targets inside a row
    torch.manual_seed(0)
    vocab = int(batch["labels"].max()) + 1
    logits = torch.randn(*batch["labels"].shape, vocab, requires_grad=True)
    ours = objective.loss_sum(task, logits, batch)
    sliced = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, vocab),
        batch["labels"][:, 1:].reshape(-1),
        ignore_index=task.ignore_index,
        reduction="sum",
    )
    torch.testing.assert_close(ours, sliced)
    (grad_ours,) = torch.autograd.grad(ours, logits)
    (grad_sliced,) = torch.autograd.grad(sliced, logits)
    torch.testing.assert_close(grad_ours, grad_sliced)
    assert not grad_ours[:, -1].any()  # the last position predicts nothing
    copies: list[tuple[int, ...]] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        copies.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        objective.loss_sum(task, logits, batch)
    # What the backward keeps: the logits themselves (as a [rows, vocab] view) and the labels,
    # never a sliced copy of the logits.
    assert (logits.shape[0] * (logits.shape[1] - 1), vocab) not in copies, copies
