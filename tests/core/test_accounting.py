import pytest
from hypothesis import given
from hypothesis import strategies as st

from pilot_tui.core.accounting import account


def test_mission_example():
    # R8: 1 GPU × 2 per microbatch × 8 accumulation = 16 per update; 3,200 examples once = 200 updates.
    a = account(microbatch=2, accumulation=8, replicas=1, dataset_size=3200, hold="epochs", epochs=1)
    assert a.effective_batch == 16
    assert a.updates == 200
    assert a.examples_seen == 3200
    assert a.incomplete_batch == "none"


def test_replicas_multiply_the_batch():
    a = account(microbatch=2, accumulation=8, replicas=4, dataset_size=3200, hold="epochs", epochs=1)
    assert a.effective_batch == 64
    assert a.updates == 50


def test_incomplete_last_batch_dropped_or_kept():
    dropped = account(microbatch=4, accumulation=4, replicas=1, dataset_size=371, hold="epochs", epochs=2)
    assert (dropped.updates_per_epoch, dropped.incomplete_examples) == (23, 3)
    assert dropped.incomplete_batch == "dropped"
    assert dropped.examples_seen == 2 * 23 * 16
    kept = account(
        microbatch=4, accumulation=4, replicas=1, dataset_size=371, hold="epochs", epochs=2, drop_last=False
    )
    assert kept.updates_per_epoch == 24
    assert kept.examples_seen == 742
    assert kept.incomplete_batch.startswith("kept")


def test_holding_updates_shows_examples_seen():
    a = account(microbatch=4, accumulation=4, replicas=1, dataset_size=371, hold="updates", updates=200)
    assert a.updates == 200
    assert a.examples_seen == 3200
    assert a.epochs == pytest.approx(3200 / 368, rel=1e-5)
    assert "examples seen" in a.note


@pytest.mark.parametrize("bad", [{"microbatch": 0}, {"accumulation": 0}, {"replicas": 0}])
def test_rejects_zero_sizes(bad):
    args = dict(microbatch=2, accumulation=2, replicas=1, dataset_size=10, hold="updates", updates=1) | bad
    with pytest.raises(ValueError):
        account(**args)


@given(
    mb=st.integers(1, 64),
    acc=st.integers(1, 32),
    rep=st.integers(1, 8),
    n=st.integers(0, 10_000),
    epochs=st.integers(1, 5),
    drop=st.booleans(),
)
def test_epoch_accounting_invariants(mb, acc, rep, n, epochs, drop):
    a = account(
        microbatch=mb,
        accumulation=acc,
        replicas=rep,
        dataset_size=n,
        hold="epochs",
        epochs=epochs,
        drop_last=drop,
    )
    assert a.effective_batch == mb * acc * rep
    assert a.examples_seen <= n * epochs
    if drop:
        assert a.examples_seen == a.updates * a.effective_batch
    else:
        assert a.examples_seen == n * epochs


@given(
    mb=st.integers(1, 16),
    acc=st.integers(1, 8),
    n=st.integers(1, 2_000),
    updates=st.integers(1, 500),
    drop=st.booleans(),
)
def test_update_accounting_invariants(mb, acc, n, updates, drop):
    a = account(
        microbatch=mb,
        accumulation=acc,
        replicas=1,
        dataset_size=n,
        hold="updates",
        updates=updates,
        drop_last=drop,
    )
    assert a.updates == updates
    eff = mb * acc
    if drop:
        assert a.examples_seen == updates * eff  # every update a full effective batch
    elif n < eff:
        assert a.examples_seen == updates * n  # one partial batch per epoch: the whole split
    else:
        # Kept incomplete batches: never more than full batches, never less than one example per update.
        assert updates <= a.examples_seen <= updates * eff
        per_epoch = -(-n // eff)
        if updates % per_epoch == 0:
            assert a.examples_seen == updates // per_epoch * n
