"""Shared RL math: group advantages, the clipped policy loss (parity with TRL), GAE and the value loss."""

from __future__ import annotations

import collections
import types

import pytest
import torch

from joy_trainers.losses import LOSS_TYPES, gae, group_advantages, kl_k3, policy_loss, reward_spread, value_loss


def _batch(seed: int = 0, B: int = 6, T: int = 7):
    g = torch.Generator().manual_seed(seed)
    logps = -torch.rand(B, T, generator=g) * 3
    old = logps + 0.3 * torch.randn(B, T, generator=g)
    ref = logps + 0.2 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return logps, old, ref, adv, mask


def _trl_loss(logps, old, ref, adv, mask, loss_type, beta, eps, eps_high):
    """TRL's GRPOTrainer._compute_loss run on a stand-in trainer whose model returns ``logps``."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    class _Acc:
        num_processes = 1

        def gather(self, x):
            return x

        def reduce(self, x, reduction="sum"):
            return x

    fake = types.SimpleNamespace(
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        loss_type=loss_type,
        epsilon_low=eps,
        epsilon_high=eps_high,
        use_vllm=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=logps.shape[1],
        accelerator=_Acc(),
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        _metrics={"train": collections.defaultdict(list)},
    )
    fake._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros_like(logps), None)
    B, T = logps.shape
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long),
        "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    if beta:
        inputs["ref_per_token_logps"] = ref
    return GRPOTrainer._compute_loss(fake, None, inputs)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("eps_high", [None, 0.28])
def test_policy_loss_equals_trl(loss_type, beta, eps_high):
    for seed in range(3):
        logps, old, ref, adv, mask = _batch(seed)
        ours, _ = policy_loss(
            logps, old, adv, mask, ref_logps=ref, beta=beta, epsilon=0.2, epsilon_high=eps_high, loss_type=loss_type
        )
        theirs = _trl_loss(logps, old, ref, adv, mask, loss_type, beta, 0.2, eps_high if eps_high else 0.2)
        assert float(ours) == pytest.approx(float(theirs), abs=1e-5)


def test_policy_loss_gradient_matches_trl():
    logps, old, ref, adv, mask = _batch(5)
    a = logps.clone().requires_grad_(True)
    b = logps.clone().requires_grad_(True)
    policy_loss(a, old, adv, mask, ref_logps=ref, beta=0.04, loss_type="grpo")[0].backward()
    _trl_loss(b, old, ref, adv, mask, "grpo", 0.04, 0.2, 0.2).backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-6)


def test_on_policy_grpo_loss_is_minus_mean_advantage_and_gradient_raises_good_tokens():
    logps, _, _, _, mask = _batch(1)
    logps = logps.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0, 2.0, -0.5])
    loss, stats = policy_loss(logps, logps.detach(), adv, mask)
    assert float(loss.detach()) == pytest.approx(-float(adv.mean()), abs=1e-6)
    assert stats["clip_fraction"] == 0.0 and stats["ratio_mean"] == pytest.approx(1.0)
    loss.backward()
    # descending the loss raises the log-probs of positive-advantage sequences, lowers negative ones
    assert (logps.grad[0][mask[0].bool()] < 0).all() and (logps.grad[1][mask[1].bool()] > 0).all()
    assert (logps.grad[3] == 0).all()


def test_clip_fraction_counts_only_clipped_tokens_in_the_gradient_stopping_direction():
    logps = torch.log(torch.tensor([[1.5, 1.0], [0.5, 1.0]]))
    old = torch.zeros(2, 2)
    mask = torch.ones(2, 2, dtype=torch.long)
    _, stats = policy_loss(logps, old, torch.tensor([1.0, -1.0]), mask, epsilon=0.2)
    assert stats["clip_fraction"] == pytest.approx(0.5)  # 1.5 with A>0 and 0.5 with A<0
    _, stats = policy_loss(logps, old, torch.tensor([-1.0, 1.0]), mask, epsilon=0.2)
    assert stats["clip_fraction"] == 0.0


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_empty_mask_and_zero_advantages_give_finite_zero_loss(loss_type):
    logps, old, ref, _, mask = _batch(2)
    logps = logps.clone().requires_grad_(True)
    loss, stats = policy_loss(logps, old, torch.zeros(6), torch.zeros_like(mask), ref, beta=0.1, loss_type=loss_type)
    assert torch.isfinite(loss) and float(loss.detach()) == 0.0
    loss.backward()
    assert torch.isfinite(logps.grad).all()
    empty = torch.zeros(0, 0)
    loss, _ = policy_loss(empty, empty, torch.zeros(0), empty, loss_type=loss_type)
    assert torch.isfinite(loss)


def test_policy_loss_rejects_bad_input():
    logps, old, ref, adv, mask = _batch(0)
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logps, old, adv, mask, loss_type="ppo2")
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, old, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="must match"):
        policy_loss(logps, old[:, :3], adv, mask)


def test_kl_k3_is_zero_at_equality_and_positive_elsewhere():
    x = torch.tensor([-1.0, -2.0, -0.1])
    assert torch.allclose(kl_k3(x, x), torch.zeros(3))
    assert (kl_k3(x, x + torch.tensor([0.5, -0.5, 0.2])) > 0).all()


def test_group_advantages_reference_and_zero_variance():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    adv = group_advantages(r, 4)
    g = r[:4]
    expected = (g - g.mean()) / (g.std() + 1e-4)
    assert torch.allclose(adv[:4], expected)
    assert torch.equal(adv[4:], torch.zeros(4))
    assert torch.allclose(group_advantages(r, 4, scale=False)[:4], g - g.mean())
    assert torch.equal(group_advantages(r, 4, scale=True), group_advantages(r, 4, scale="group"))
    assert torch.equal(group_advantages(torch.tensor([3.0]), 1), torch.zeros(1))
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages(torch.ones(5), 4)


def test_scale_rewards_none_gives_the_unscaled_centred_rewards_and_batch_one_std_for_all():
    r = torch.tensor([1.2, 1.2, 1.2, 1.18, 1.0, 0.0, 0.0, 0.0])
    none = group_advantages(r, 4, scale="none")
    assert torch.allclose(none, torch.tensor([0.005, 0.005, 0.005, -0.015, 0.75, -0.25, -0.25, -0.25]), atol=1e-6)
    # the group std turns a 0.02 efficiency difference into a full-size advantage, as large as a failure's
    group = group_advantages(r, 4, scale="group")
    assert group[3] < -1.4 and abs(float(group[3])) > abs(float(group[5]))
    # batch: one std, of every reward given (or the one passed), so the small difference stays small
    batch = group_advantages(r, 4, scale="batch")
    assert torch.allclose(batch, none / (r.std() + 1e-4))
    assert torch.allclose(group_advantages(r, 4, scale="batch", batch_std=2.0), none / (2.0 + 1e-4))
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        group_advantages(r, 4, scale="groups")


def test_reward_spread_is_max_minus_min():
    assert reward_spread([0.2, 0.20000000000000004, 0.2]) == pytest.approx(0.0, abs=1e-15)
    assert reward_spread([1.2, 1.18, 0.2]) == pytest.approx(1.0)
    assert reward_spread([3.0]) == 0.0 and reward_spread([]) == 0.0


def test_gae_matches_direct_sum():
    rewards = [0.1, -0.2, 0.0, 1.0]
    values = [0.3, 0.5, -0.1, 0.4]
    gamma, lam = 0.9, 0.95
    deltas = [rewards[t] + gamma * (values[t + 1] if t + 1 < 4 else 0.0) - values[t] for t in range(4)]
    direct = [sum((gamma * lam) ** k * deltas[t + k] for k in range(4 - t)) for t in range(4)]
    assert gae(rewards, values, gamma, lam) == pytest.approx(direct)
    # lambda = 1, gamma = 1: advantage = return-to-go minus value
    assert gae(rewards, values, 1.0, 1.0) == pytest.approx([sum(rewards[t:]) - values[t] for t in range(4)])
    assert gae([], []) == []
    with pytest.raises(ValueError):
        gae([1.0], [])


def test_value_loss_matches_direct_computation():
    v = torch.tensor([0.5, 1.0, -0.3])
    old = torch.tensor([0.2, 1.5, -0.3])
    ret = torch.tensor([1.0, 0.0, 0.2])
    clip = 0.2
    direct = []
    for vi, oi, ri in zip(v.tolist(), old.tolist(), ret.tolist(), strict=True):
        vc = oi + max(-clip, min(clip, vi - oi))
        direct.append(max((vi - ri) ** 2, (vc - ri) ** 2))
    assert float(value_loss(v, old, ret, clip)) == pytest.approx(0.5 * sum(direct) / 3)
    assert float(value_loss(v, old, ret, None)) == pytest.approx(0.5 * float(((v - ret) ** 2).mean()))
    assert float(value_loss(torch.zeros(0), torch.zeros(0), torch.zeros(0))) == 0.0
