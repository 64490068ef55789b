"""Per-GPU memory estimated under fake tensors (R23): exact static components, LoRA, FSDP sharding,
activations against the real CPU run, "not estimable" naming the op, the phase and the command."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from pilot_tui.core.steps import Step
from pilot_tui.runner.context import RunContext
from pilot_tui.runner.loop.training import train_update
from pilot_tui.runner.memory.estimate import fake_run
from pilot_tui.runner.memory.estimate.campaign import Target, estimate_model_dir, fake_config
from pilot_tui.runner.memory.estimate.fake_run import ALLOCATOR_BLOCK, FakeConfig, ModelSource, run_fake
from pilot_tui.runner.memory.estimate.sources import task_source
from pilot_tui.runner.phases import execute
from pilot_tui.runner.phases.variants_compare import saved_activations
from pilot_tui.tasks.contract import Task


@pytest.fixture(scope="module")
def ctx(fast_demo_ctx: RunContext) -> RunContext:
    return fast_demo_ctx


def exact(cfg: FakeConfig) -> FakeConfig:
    return replace(cfg, allocator_rounding=False)


def _trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_fp32_adamw_static_components_are_4_4_8_bytes_per_trainable_parameter(ctx: RunContext) -> None:
    cfg = exact(fake_config(ctx, "control", Target()))
    assert cfg.precision == "fp32"
    out = run_fake(task_source(ctx), cfg)
    assert out["estimable"], out
    n = _trainable(ctx.task.build_model())
    assert out["trainable_parameters"] == n
    assert (out["parameters_bytes"], out["gradients_bytes"], out["optimizer_state_bytes"]) == (
        4 * n,
        4 * n,
        8 * n,
    )
    assert out["peak_allocated_bytes"] >= 16 * n + out["activations_bytes"] // 2
    # The activations kept for backward: within ±10 % of what the real CPU run saves.
    measured = saved_activations(ctx, ctx.new_state(ctx.config("control")))
    assert abs(out["activations_bytes"] - measured) <= 0.10 * measured, (out["activations_bytes"], measured)
    # With the CUDA allocator's rounding every tensor takes whole 512-byte blocks, no more.
    rounded = run_fake(task_source(ctx), replace(cfg, allocator_rounding=True))
    blocks = sum(
        -(-4 * p.numel() // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK for p in ctx.task.build_model().parameters()
    )
    assert (rounded["parameters_bytes"], rounded["gradients_bytes"]) == (blocks, blocks)
    assert rounded["optimizer_state_bytes"] == 2 * blocks


def test_the_fake_run_tracks_what_the_same_update_on_real_tensors_tracks(ctx: RunContext) -> None:
    cfg = fake_config(ctx, "ckpt", Target())
    fake, real = run_fake(task_source(ctx), cfg), run_fake(task_source(ctx), replace(cfg, fake=False))
    keys = (
        "parameters_bytes",
        "gradients_bytes",
        "optimizer_state_bytes",
        "activations_bytes",
        "peak_allocated_bytes",
        "eval_peak_allocated_bytes",
    )
    assert [fake[k] for k in keys] == [real[k] for k in keys]


class LoRALinear(nn.Module):
    """A frozen linear layer with a trainable low-rank update, as peft's LoRA builds it."""

    def __init__(self, base: nn.Linear, rank: int = 4) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t()


def lora_model(task: Task) -> nn.Module:
    model = task.build_model().requires_grad_(False)
    for block in model.blocks:
        block.qkv = LoRALinear(block.qkv)
        block.proj = LoRALinear(block.proj)
    return model


def test_lora_only_adapter_parameters_carry_gradients_and_optimizer_state(ctx: RunContext) -> None:
    source = replace(task_source(ctx), build=lambda: lora_model(ctx.task))
    out = run_fake(source, exact(fake_config(ctx, "control", Target())))
    assert out["estimable"], out
    model = lora_model(ctx.task)
    total = sum(p.numel() for p in model.parameters())
    adapters = _trainable(model)
    assert 0 < adapters < total / 10
    assert out["trainable_parameters"] == adapters
    assert out["parameters_bytes"] == 4 * total
    assert (out["gradients_bytes"], out["optimizer_state_bytes"]) == (4 * adapters, 8 * adapters)


def test_fsdp_over_n_fake_ranks_divides_the_static_components_ddp_adds_buckets(ctx: RunContext) -> None:
    source = task_source(ctx)
    single = run_fake(source, exact(fake_config(ctx, "control", Target())))
    ranks = 4
    sharded = run_fake(source, exact(fake_config(ctx, "control", Target(strategy="fsdp", gpus=ranks))))
    assert sharded["estimable"], sharded
    assert sharded["shard_units"] == 2  # the demo model's two blocks, then the root
    # FSDP2 shards dim 0 in ceil(rows / N) chunks: rank 0 holds at most one row more per tensor.
    remainder = sum(p[0].numel() * 4 if p.dim() else 4 for p in ctx.task.build_model().parameters())
    for key, per_param in (("parameters_bytes", 4), ("gradients_bytes", 4), ("optimizer_state_bytes", 8)):
        share = single[key] / ranks
        assert share <= sharded[key] <= share + remainder * per_param // 4, key
    assert sharded["peak_allocated_bytes"] < single["peak_allocated_bytes"]
    # DDP keeps one replica per rank plus its reducer's bucket copy of the gradients.
    ddp = run_fake(source, exact(fake_config(ctx, "control", Target(strategy="ddp", gpus=ranks))))
    assert ddp["ddp_buckets_bytes"] == single["gradients_bytes"]
    assert ddp["peak_allocated_bytes"] == single["peak_allocated_bytes"] + single["gradients_bytes"]


@pytest.mark.parametrize("variant,strategy", [("control", "none"), ("ckpt", "none"), ("mb1", "fsdp")])
def test_the_estimates_lean_tracker_finds_the_stock_trackers_figures(
    ctx: RunContext, variant: str, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The estimate's tracker updates only the whole device's peak after each op, not every
    # module's: the figures it reads must be exactly those torch's own tracker gives.
    source = task_source(ctx)
    cfg = fake_config(ctx, variant, Target(strategy=strategy, gpus=2 if strategy == "fsdp" else 1))
    lean = run_fake(source, cfg)
    monkeypatch.setattr(fake_run, "_global_peak_only", lambda tracker_cls: tracker_cls)
    stock = run_fake(source, cfg)
    assert lean["estimable"] and stock["estimable"], (lean, stock)
    lean.pop("seconds")
    stock.pop("seconds")
    assert lean == stock


@pytest.mark.parametrize("variant", ["ckpt", "len16"])
def test_activations_match_the_saved_tensors_of_the_real_cpu_run(ctx: RunContext, variant: str) -> None:
    state = ctx.new_state(ctx.config(variant))
    measured = saved_activations(ctx, state)
    out = run_fake(task_source(ctx), exact(fake_config(ctx, variant, Target())))
    assert out["estimable"], out
    assert measured > 0
    assert abs(out["activations_bytes"] - measured) <= 0.10 * measured, (out["activations_bytes"], measured)


class ReadsAValue(nn.Module):
    """A model whose forward branches on a tensor's value: fake tensors have none."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.emb(input_ids)
        if x.abs().max().item() > 1e6:  # data-dependent: no fake kernel can answer
            x = x / 2
        return self.head(x)


def test_a_model_fake_tensors_cannot_follow_is_not_estimable_and_names_the_op(ctx: RunContext) -> None:
    source = ModelSource(
        task=replace(ctx.task, build_model=ReadsAValue),
        build=ReadsAValue,
        batch=lambda mb, length, train: {
            "input_ids": torch.ones((mb, length), dtype=torch.long),
            "labels": torch.ones((mb, length), dtype=torch.long),
        },
    )
    out = run_fake(source, FakeConfig("control", 2, 1, 8, "fp32", False))
    assert out["estimable"] is False
    assert "_local_scalar_dense" in out["op"]
    assert "_local_scalar_dense" in out["reason"]
    assert "peak_allocated_bytes" not in out  # never a silent zero


def test_estimate_phase_row_and_record_section(ctx: RunContext) -> None:
    from pilot_tui.core.events import RecordUpdate
    from pilot_tui.runner.phases.estimate import estimate_verdict

    sent: list = []
    ckpt = [v for v in ctx.spec.variants if v.id == "ckpt"]
    local = replace(ctx, loaded=replace(ctx.loaded, spec=replace(ctx.spec, variants=ckpt)), emit=sent.append)
    row = execute(local, Step("estimate", "estimate"), {})
    assert row["verdict"] == "pass", row["reason"]
    entries = row["details"]["estimates"]
    assert [e["name"] for e in entries] == ["control", "ckpt"]
    for e in entries:
        assert e["estimable"] and e["fits"] and e["smallest_gpu_gb"] == 24
        assert e["peak_allocated_mb"] > e["parameters_mb"] > 0
    # Checkpointing keeps fewer activations than the control.
    assert entries[1]["activations_mb"] < entries[0]["activations_mb"]
    # On a CPU no library keeps an allocator workspace: the row says so, and what is left out.
    assert row["details"]["library_workspaces_mb"] == 0
    assert "CPU" in row["details"]["library_workspaces"] and "NCCL" in row["details"]["left_out"]
    section = next(m for m in sent if isinstance(m, RecordUpdate) and m.section == "estimate")
    assert section.value["recommendation"]["gpu_memory_gb"] == 24
    assert section.value["configurations"] == entries
    # A declared GPU too small for the control fails the phase and names what would fit.
    too_small = {"verdict": {"fits": False, "need_mib": 2048.0}, "estimable": True, "name": "control"}
    smallest = {"strategy": "fsdp", "gpus": 2, "gpu_memory_gb": 24}
    out = estimate_verdict([too_small | {"smallest_configuration": smallest}], 1.0, {})
    assert (
        out.verdict == "fail"
        and "does not fit a 1 GB GPU" in out.reason
        and "fsdp on 2 × 24 GB" in out.reason
    )


def test_cli_estimate_runs_in_a_subprocess(write_campaign, tmp_path: Path) -> None:
    path = write_campaign({"variants": [], "fit_search": {"microbatches": [8]}})
    proc = subprocess.run(
        [sys.executable, "-m", "pilot_tui", "estimate", str(path), "--json", "--gpu-memory", "24"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    names = [e["name"] for e in result["configurations"]]
    assert names == ["control", "fit-mb8-len28"]  # the control's microbatch is 2
    assert all(e["verdict"]["status"] == "fits" for e in result["configurations"])
    peaks = [e["activations_bytes"] for e in result["configurations"]]
    assert peaks[0] < peaks[1]  # a larger microbatch keeps more activations
    # Bad input stops in the view process (tests/analysis/test_memory_estimate.py): no subprocess.


TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "max_position_embeddings": 128,
    "vocab_size": 256,
    "tie_word_embeddings": False,
}


def test_hugging_face_causal_lm_from_config_json_alone(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    result = estimate_model_dir(tmp_path, Target(strategy="fsdp", gpus=2), microbatch=1, max_length=64)
    (entry,) = result["configurations"]
    assert entry["estimable"], entry
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**TINY_LLAMA))
    n = sum(p.numel() for p in model.parameters())
    assert entry["trainable_parameters"] == n
    assert "no weights read" in result["source"]
    assert not list(tmp_path.glob("*.safetensors"))  # nothing but the config was there to read
    assert tomllib.loads("a = 1")  # the record format stays TOML (sanity of the import)


def test_hugging_face_lora_from_the_campaign_options_trains_only_the_adapters(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from pilot_tui.runner.memory.estimate.sources import hf_source

    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    source = hf_source(tmp_path, lora)
    out = run_fake(source, FakeConfig("control", 1, 1, 32, "fp32", False, allocator_rounding=False))
    assert out["estimable"], out
    base = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**TINY_LLAMA))
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    adapters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert out["trainable_parameters"] == adapters
    assert (out["gradients_bytes"], out["optimizer_state_bytes"]) == (4 * adapters, 8 * adapters)
    assert out["parameters_bytes"] == 4 * sum(p.numel() for p in model.parameters())


def test_hugging_face_campaign_is_estimated_from_its_config_with_lora_and_fsdp(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from pilot_tui.runner.memory.estimate.__main__ import run

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(TINY_LLAMA))
    (tmp_path / "c.toml").write_text(
        "[campaign]\nname = 'hf'\n[task]\nbuiltin = 'hf_causal_lm'\n"
        "options = { model = 'model', lora = { r = 4, target_modules = ['q_proj'] } }\n"
        "[batch]\nmicrobatch = 1\nmax_length = 32\nupdates = 4\n"
        "[estimate]\nstrategy = 'fsdp'\ngpus = 2\ngpu_memory_gb = 24\n"
    )
    result = run({"campaign": str(tmp_path / "c.toml")})
    (entry,) = result["configurations"]
    assert entry["estimable"] and entry["verdict"]["status"] == "fits", entry
    assert (entry["strategy"], entry["gpus"]) == ("fsdp", 2)
    assert "LoRA r=4" in result["source"] and "no weights read" in result["source"]
    assert entry["gradients_bytes"] < entry["parameters_bytes"] / 10  # only the adapters train


def test_hugging_face_sequence_classifier_from_its_config_in_its_load_dtype(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from pilot_tui.runner.memory.estimate.__main__ import run

    (tmp_path / "model").mkdir()
    config = TINY_LLAMA | {"num_labels": 3, "pad_token_id": 0}
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    (tmp_path / "c.toml").write_text(
        "[campaign]\nname = 'cls'\n[task]\nbuiltin = 'hf_sequence_classification'\n"
        "options = { model = 'model', dtype = 'bfloat16' }\n"
        "[batch]\nmicrobatch = 2\nmax_length = 16\nupdates = 4\n"
    )
    (entry,) = run({"campaign": str(tmp_path / "c.toml")})["configurations"]
    assert entry["estimable"], entry
    with torch.device("meta"):
        model = transformers.AutoModelForSequenceClassification.from_config(
            transformers.AutoConfig.for_model(**config)
        )
    n = sum(p.numel() for p in model.parameters())
    assert entry["trainable_parameters"] == n
    assert entry["parameters_bytes"] < 2.1 * n  # bf16 weights, as the task loads them


def test_the_device_workspaces_are_in_every_estimated_peak_and_its_need(ctx: RunContext) -> None:
    """Every measured peak holds the cuBLAS workspaces; an estimate that leaves them out is short
    by them (on a 3.2M-parameter model, most of the measured peak)."""
    from pilot_tui.runner.memory.estimate.campaign import estimate_configs

    source = task_source(ctx)
    target = Target(gpus=1, strategy="none", gpu_memory_gb=0, headroom=0.1)
    configs = [fake_config(ctx, "control", target)]
    plain = estimate_configs(source, configs, target)["configurations"][0]
    fixed = 64 * 2**20
    held = estimate_configs(source, configs, target, fixed_bytes=fixed)["configurations"][0]
    assert held["peak_allocated_bytes"] == plain["peak_allocated_bytes"] + fixed
    assert held["eval_peak_allocated_bytes"] == plain["eval_peak_allocated_bytes"] + fixed
    assert held["library_workspaces_bytes"] == fixed and "library_workspaces_bytes" not in plain
    assert held["verdict"]["need_mib"] > plain["verdict"]["need_mib"] + 64


def test_each_configuration_says_it_is_running_before_its_fake_run(ctx: RunContext) -> None:
    """A large model's fake run takes seconds: the step's line names the configuration being run,
    not only the ones done."""
    from pilot_tui.runner.memory.estimate.campaign import estimate_configs

    source = task_source(ctx)
    target = Target(gpus=1, strategy="none", gpu_memory_gb=0, headroom=0.1)
    configs = [fake_config(ctx, "control", target)]
    said: list[tuple[int, int, str]] = []
    estimate_configs(source, configs, target, progress=lambda d, t, m: said.append((d, t, m)))
    assert said[0] == (0, 1, "control: one training update and an eval pass under fake tensors")
    assert said[-1][:2] == (1, 1) and said[-1][2].startswith("control: ")


def profiled_peaks(update: Callable[[], None], resident: int, updates: int = 3) -> list[int]:
    """The most bytes live during each of `updates` real updates, measured by torch's profiler
    (every CPU allocation and free, no tracker involved) above what was `resident` before."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for i in range(updates):
            with record_function(f"update {i}"):
                update()
    events = []
    for e in prof.profiler.kineto_results.events():
        if e.name() == "[memory]":
            events.append((e.start_ns(), e.nbytes()))
        elif e.name().startswith("update "):
            events.append((e.start_ns(), None))
    live, peak, peaks = 0, 0, []
    for _, nbytes in sorted(events, key=lambda e: e[0]):
        if nbytes is None:  # an update starts: the last one's peak is known
            peaks.append(peak)
            peak = live
        else:
            live += nbytes
            peak = max(peak, live)
    return [resident + p for p in [*peaks[1:], peak]]


def _resident(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])


@pytest.mark.parametrize("variant,accumulation", [("control", 0), ("control", 1), ("ckpt", 0)])
def test_the_estimated_peak_is_the_runners_update_measured_by_the_profiler(
    ctx: RunContext, variant: str, accumulation: int
) -> None:
    """The fake run's training peak against the runner's own `train_update` on real tensors,
    with the optimizer CUDA runs (foreach AdamW), measured by the profiler: every update after
    the first reaches the same peak, and the estimate is that peak (within the few scalars a
    step keeps), not more: no logits held through a backward the runner frees them before."""
    cfg = exact(fake_config(ctx, variant, Target()))
    if accumulation:
        cfg = replace(cfg, accumulation=accumulation)
    peaks = _runner_update_peaks(ctx, variant, cfg)
    estimated = run_fake(task_source(ctx), cfg)["peak_allocated_bytes"]
    assert peaks[2] <= estimated <= peaks[2] * 1.002, (estimated, peaks)


def _runner_update_peaks(ctx: RunContext, variant: str, cfg: FakeConfig) -> list[int]:
    """The runner's `train_update` of this configuration on real tensors (foreach AdamW, as on
    CUDA), 3 updates: the profiler's peak of each; every update after the first peaks alike."""
    state = ctx.new_state(replace(ctx.config(variant), accumulation=cfg.accumulation))
    state.optimizer = torch.optim.AdamW(
        list(state.model.parameters()), lr=1e-4, weight_decay=0.01, foreach=True
    )
    batch = task_source(ctx).batch(cfg.microbatch, cfg.max_length, True)

    def update() -> None:
        host = [dict(batch) for _ in range(cfg.accumulation)]
        train_update(state, ctx.task, torch.device("cpu"), cfg.grad_clip, micro=[[0]] * len(host), host=host)

    peaks = profiled_peaks(update, _resident(state.model))
    assert peaks[1] == peaks[2] > 0
    return peaks


@pytest.mark.parametrize("accumulation", [1, 2])
def test_a_trainable_parameter_the_loss_never_reaches_gets_neither_gradient_nor_state(
    ctx: RunContext, accumulation: int
) -> None:
    """A step skips a parameter without a gradient: with an unused trainable layer added, the
    estimate holds the gradients and state of the parameters the loss reaches, and is the peak
    the runner's update reaches."""

    def build() -> nn.Module:
        model = ctx.task.build_model()
        model.unused = nn.Linear(256, 256)
        return model

    unused = replace(ctx, task=replace(ctx.task, build_model=build))
    cfg = replace(exact(fake_config(ctx, "control", Target())), accumulation=accumulation)
    out, plain = run_fake(task_source(unused), cfg), run_fake(task_source(ctx), cfg)
    assert out["estimable"], out
    assert out["parameters_bytes"] == plain["parameters_bytes"] + 4 * (256 * 256 + 256)
    figures = ("gradients_bytes", "optimizer_state_bytes")
    assert [out[k] for k in figures] == [plain[k] for k in figures]
    peaks = _runner_update_peaks(unused, "control", cfg)
    assert peaks[2] <= out["peak_allocated_bytes"] <= peaks[2] * 1.002, (out["peak_allocated_bytes"], peaks)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_hugging_face_lora_estimate_is_its_update_measured_by_the_profiler(
    tmp_path: Path, checkpointing: bool
) -> None:
    """The same on a Hugging Face Llama with LoRA, with and without its gradient checkpointing:
    PyTorch's tracker keeps some of this model's tensors alive from one tracked update to the
    next (the profiler sees none), so the estimate tracks a single forward and backward."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from pilot_tui.runner.checks import objective
    from pilot_tui.runner.memory.estimate.sources import hf_source

    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    source = hf_source(tmp_path, {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    cfg = FakeConfig("control", 2, 2, 32, "fp32", checkpointing, allocator_rounding=False)
    model = source.build()
    assert source.set_checkpointing is not None
    source.set_checkpointing(model, checkpointing)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, foreach=True)
    batch = source.batch(cfg.microbatch, cfg.max_length, True)
    denom = objective.supervised_count(source.task, batch) * cfg.accumulation

    def update() -> None:  # the runner's update: no name left on the logits during backward
        optimizer.zero_grad(set_to_none=True)
        for _ in range(cfg.accumulation):
            part = objective.loss_sum(source.task, objective.forward(source.task, model, batch), batch)
            (part / denom).backward()
            del part
        torch.nn.utils.clip_grad_norm_(trainable, cfg.grad_clip)
        optimizer.step()

    model.train()
    peaks = profiled_peaks(update, _resident(model))
    assert peaks[1] == peaks[2] > 0
    estimated = run_fake(source, cfg)["peak_allocated_bytes"]
    assert peaks[2] <= estimated <= peaks[2] * 1.02, (estimated, peaks)
