"""StackedLoRA: every role's adapter in one batch, shared A products, few kernels per layer."""

from __future__ import annotations

import pytest
import torch

from joy_agents.sampling.stacked_lora import StackedLoRA
from joy_agents.sampling.stats import KernelCounter


def _layer(model, name="q_proj"):
    return getattr(model.get_base_model().model.layers[0].self_attn, name)


def _per_row(team, role_of_row, fn):
    """``fn(module_or_model, row)`` for each row under its own role's adapter, concatenated."""
    out = []
    for i, role in enumerate(role_of_row):
        with team.use_role(role):
            out.append(fn(i))
    return torch.cat(out)


@pytest.mark.parametrize("roles", [["qa"] * 3, ["math", "qa", "general"]], ids=["one role", "mixed"])
def test_prefill_and_decode_equal_each_rows_adapter(distinct_team, roles):
    team, model = distinct_team, distinct_team.model_for("master")
    ids = torch.randint(10, 200, (len(roles), 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _per_row(team, roles, lambda i: model(input_ids=ids[i : i + 1]).logits)
        stack = StackedLoRA(model, team.roles)
        stack.set_rows(roles[:1] if len(set(roles)) == 1 else roles)
        with stack:
            got = model(input_ids=ids).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_bfloat16_base_with_float32_adapters_adds_as_peft(distinct_team):
    """PEFT keeps float32 adapters on a bfloat16 base; the stack sums in float32 and rounds as PEFT does."""
    team = distinct_team
    layer = _layer(team.model_for("master"))
    base = layer.base_layer
    weight, bias = base.weight.data, base.bias.data
    base.weight.data, base.bias.data = weight.to(torch.bfloat16), bias.to(torch.bfloat16)
    try:
        x = torch.randn(3, 2, weight.shape[1], generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
        roles = ["math", "qa", "math"]
        with torch.no_grad():
            expected = _per_row(team, roles, lambda i: layer(x[i : i + 1]))
            one = _per_row(team, ["qa"] * 3, lambda i: layer(x[i : i + 1]))
            stack = StackedLoRA(team.model_for("master"), team.roles)
            for rows, want in ((roles, expected), (["qa"], one)):
                stack.set_rows(rows)
                with stack:
                    got = layer(x)
                assert got.dtype == torch.bfloat16
                torch.testing.assert_close(got, want)
    finally:
        base.weight.data, base.bias.data = weight, bias


def test_layers_reading_one_input_share_its_a_product_and_never_a_stale_one(distinct_team):
    team, model = distinct_team, distinct_team.model_for("master")
    q, k = _layer(model, "q_proj"), _layer(model, "k_proj")
    x = torch.randn(2, 3, q.in_features, generator=torch.Generator().manual_seed(3))
    roles = ["qa", "general"]
    with torch.no_grad():
        want_q = _per_row(team, roles, lambda i: q(x[i : i + 1]))
        changed = x + 1.0
        want_k = _per_row(team, roles, lambda i: k(changed[i : i + 1]))
        stack = StackedLoRA(model, team.roles)
        stack.set_rows(roles)
        with stack:  # the first forward shows which layers read the same tensor
            model(input_ids=torch.randint(10, 200, (2, 4)))
        assert sorted(g.size for g in stack.groups) == sorted([3, 1, 2, 1] * len(model.get_base_model().model.layers))
        with stack:
            model(input_ids=torch.randint(10, 200, (2, 4)))
            assert all(g._x is None for g in stack.groups)  # each input let go once its layers took their columns
        with stack:
            got_q = q(x)
            with KernelCounter() as shared:
                k(x)  # the same tensor: its columns of q's product, no A product of its own
            x.add_(1.0)  # changed in place: the shared product is stale and must not be used
            got_k = k(x)
        group = next(g for g in stack.groups if g.size > 1)
    torch.testing.assert_close(got_q, want_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_k, want_k, atol=1e-5, rtol=1e-5)
    assert shared.count == 2  # the base product and the B product added into it
    assert group._x is None  # leaving the stack drops the last input
    assert "forward" not in vars(q)


def test_a_decode_step_costs_few_kernels_per_layer(distinct_team):
    """Per layer of 7 adapted linears in 4 products of A (q/k/v share one): at most 4 A products, 4 masks and 7
    B products for mixed rows (2 x 7 + 7 = 21 fewer than a mask and two products per linear), and no mask for
    one role."""
    from transformers import DynamicCache

    model = distinct_team.model_for("master")
    layers = len(model.get_base_model().model.layers)
    ids = torch.randint(10, 200, (3, 6), generator=torch.Generator().manual_seed(4))

    def kernels(run):
        cache = DynamicCache(config=model.get_base_model().config)
        with torch.no_grad():
            run(lambda: model(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True))
            with KernelCounter() as counter:
                run(lambda: model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True))
        return counter.count

    def bare(forward):
        with model.disable_adapter():
            forward()

    stack = StackedLoRA(model, distinct_team.roles)

    def stacked(forward):
        with stack:
            forward()

    base = kernels(bare)
    stack.set_rows(["qa", "math", "general"])
    mixed = kernels(stacked)
    stack.set_rows(["qa"])
    one = kernels(stacked)
    assert (mixed - base) / layers <= 4 + 4 + 7
    assert (one - base) / layers <= 4 + 7


def test_adapters_on_the_embedding_are_left_to_peft(tiny_dir):
    """StackedLoRA replaces only linear layers' forwards: with an adapter on the embedding it declines, and the
    engine samples mixed batches through PEFT's per-row adapters."""
    from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy
    from joy_agents.sampling.base import sample_many

    team = TeamPolicy(
        TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4, lora_target_modules=("q_proj", "embed_tokens"))
    )
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        for role in team.roles:
            for p in team.trainable_parameters(role):
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    stack = StackedLoRA(team.model_for("qa"), team.roles)
    assert not stack.supported
    with pytest.raises(RuntimeError, match="adapter_names"):
        stack.set_rows(["qa", "math"])
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=5)
    requests = [(r, team.encode_prompt(r, [{"role": "user", "content": f"hi {r}"}], None)) for r in team.roles]
    expected = [team.generate(r, [p], sampling)[0][0].completion_ids for r, p in requests]
    assert [g[0].completion_ids for g in sample_many(team, requests, sampling)] == expected


def test_mixed_rows_need_a_row_per_batch_entry(distinct_team):
    """An input whose first dimension is not the rows (flattened tokens) cannot take a mask per row: refused."""
    layer = _layer(distinct_team.model_for("master"))
    stack = StackedLoRA(distinct_team.model_for("master"), distinct_team.roles)
    stack.set_rows(["qa", "math"])
    with torch.no_grad(), stack, pytest.raises(RuntimeError, match="rows, tokens, features"):
        layer(torch.randn(6, layer.in_features))
