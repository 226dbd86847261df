"""joy_agents.attention: grouped-query attention read in place on a CPU gives transformers' sdpa numbers."""

from __future__ import annotations

import pytest
import torch

from joy_agents.attention import ATTENTION, cpu_gqa_attention, transformers_packs_one_query, use_cpu_attention


def _model(heads: int = 4, kv_heads: int = 2) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize("query_tokens", [1, 5])
def test_grouped_heads_in_place_equal_repeated_heads(query_tokens, monkeypatch):
    from transformers.integrations import sdpa_attention

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 3, True
    q = torch.randn(2, 6, query_tokens, 8)
    k, v = torch.randn(2, 2, 11, 8), torch.randn(2, 2, 11, 8)
    mask = torch.zeros(2, 1, query_tokens, 11)
    mask[0, :, :, :4] = float("-inf")
    repeats = []
    real = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda x, n: repeats.append(n) or real(x, n))
    with torch.no_grad():
        expected, _ = sdpa_attention.sdpa_attention_forward(module, q, k, v, mask, scaling=0.35)
        copies = len(repeats)
        got, _ = cpu_gqa_attention(module, q, k, v, mask, scaling=0.35)
    assert torch.allclose(got, expected, atol=1e-6)
    # transformers copies the keys and the values for several queries, and for one query before 5.20 (later
    # versions fold the query heads together instead: no copy, and ours takes transformers' path there)
    assert copies == (0 if query_tokens == 1 and transformers_packs_one_query() else 2)
    assert len(repeats) == copies  # ours never copies


def test_a_switched_model_gives_the_same_logits_and_training_keeps_transformers_path():
    model = _model()
    ids = torch.randint(3, 97, (3, 12))
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, :5] = 0
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).logits
    assert use_cpu_attention(model) and model.config._attn_implementation == ATTENTION
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=mask).logits
    assert torch.allclose(got[mask.bool()], expected[mask.bool()], atol=1e-5)
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss  # gradients: transformers' own path
    loss.backward()
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None
    eager = _model()
    eager.config._attn_implementation = "eager"
    assert not use_cpu_attention(eager)  # only an sdpa model is switched
