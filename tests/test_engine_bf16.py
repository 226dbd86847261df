"""The engine in float32 and in bfloat16: the same checks, each dtype with its own tolerance; what ``dtype="auto"``
picks; and a bfloat16 step that converts and copies no weight."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from joy_agents import dtypes
from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy
from joy_agents.sampling.base import sample_many
from joy_agents.sampling.continuous import ContinuousSampler
from joy_agents.sampling.stacked_lora import StackedLoRA

LOGPROB_TOL = {"float32": 1e-4, "bfloat16": 0.1}
"""Largest |sampled log-prob - teacher-forced log-prob| per dtype (bfloat16: that of tests/test_sft_bf16.py)."""
LOGIT_TOL = {"float32": 1e-4, "bfloat16": 0.1}
"""Largest |stacked logit - PEFT logit| per dtype (logits of about 1 here: a few bfloat16 units in the last place)."""


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def team(request, tiny_dir):
    """The tiny team with distinct adapters (as conftest's ``distinct_team``) in the given dtype."""
    team = TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=4, lora_alpha=8, dtype=request.param))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for role in team.roles:
            for p in team.trainable_parameters(role):
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    return team


def _prompt(team, role, text):
    return team.encode_prompt(role, [{"role": "system", "content": role}, {"role": "user", "content": text}], None)


def test_the_team_is_built_in_its_dtype_with_float32_adapters(team):
    model = team.model_for("master").get_base_model()
    assert model.lm_head.weight.dtype == getattr(torch, team.dtype) == next(model.parameters()).dtype
    assert {p.dtype for p in team.trainable_parameters("qa")} == {torch.float32}  # what training updates
    assert team.dtype_reason == "set"


def _role_logits(team, role, ids):
    with torch.no_grad(), team.use_role(role) as model:
        return model(input_ids=ids).logits.float()


def test_stacked_adapters_equal_each_roles_own_pass(team):
    roles = ["math", "qa", "math", "master", "general"]
    ids = torch.randint(10, 200, (len(roles), 7), generator=torch.Generator().manual_seed(0))
    stack = StackedLoRA(team.model_for("master"), team.roles)
    stack.set_rows(roles)
    with torch.no_grad(), stack:
        got = team.model_for("master")(input_ids=ids).logits.float()
    want = torch.cat([_role_logits(team, role, ids[i : i + 1]) for i, role in enumerate(roles)])
    torch.testing.assert_close(got, want, atol=LOGIT_TOL[team.dtype], rtol=0)


def test_sampled_logprobs_are_the_teacher_forced_ones(team):
    requests = [(r, _prompt(team, r, f"what is {i} plus {i}?")) for i, r in enumerate(team.roles)]
    out = sample_many(team, requests, SamplingConfig(temperature=1.0, max_new_tokens=10), num_samples=2)
    for (role, _), group in zip(requests, out, strict=True):
        lps = team.logprobs(role, [s.prompt_ids for s in group], [s.completion_ids for s in group], 1.0)
        for s, lp in zip(group, lps, strict=True):
            assert len(s.logprobs) == len(s.completion_ids) == len(lp)
            torch.testing.assert_close(torch.tensor(s.logprobs), lp.float(), atol=LOGPROB_TOL[team.dtype], rtol=0)


def test_greedy_tokens_are_the_models_top_tokens(team):
    """Every greedy token of the continuous engine (rows of every role, leaving and joining) is the top token of a
    teacher-forced pass over the same ids, up to the dtype's rounding (in float32: exactly generate's)."""
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=10)
    requests = [(team.roles[i % 5], _prompt(team, team.roles[i % 5], "q" * (i + 1))) for i in range(7)]
    with ContinuousSampler(team, sampling, max_rows=3) as sampler:
        for i, (role, prompt) in enumerate(requests):
            sampler.submit(role, prompt, i)
        got = {}
        while sampler.busy:
            got.update(dict(sampler.step()))
    for i, (role, prompt) in enumerate(requests):
        sample = got[i]
        if team.dtype == "float32":
            assert sample.completion_ids == team.generate(role, [prompt], sampling)[0][0].completion_ids
        ids = torch.tensor([prompt + sample.completion_ids])
        with torch.no_grad(), team.use_role(role) as model:
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        chosen = logits.gather(1, torch.tensor(sample.completion_ids)[:, None]).squeeze(1)
        assert (logits.max(1).values - chosen).max() <= LOGIT_TOL[team.dtype]


class _Largest(TorchDispatchMode):
    """The largest output of any copy, and the largest operand of any batched product, while active."""

    def __init__(self) -> None:
        super().__init__()
        self.copy, self.bmm_operand = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if "copy" in func.__name__ and isinstance(out, torch.Tensor):
            self.copy = max(self.copy, out.numel())
        if func.__name__.startswith("bmm"):
            self.bmm_operand = max([self.bmm_operand] + [a.numel() for a in args if isinstance(a, torch.Tensor)])
        return out


def test_a_prefill_and_decode_copy_no_weight(team):
    """The output layer's product of the rows' last positions is one plain product (joy_agents.head: a batched
    one broadcasts the weight to every row, which bfloat16 kernels copy): no copy and no batched operand as large
    as the output weight, in either dtype."""
    head = team.model_for("master").get_base_model().lm_head.weight
    requests = [(role, _prompt(team, role, f"question {i}")) for i, role in enumerate(team.roles)]
    with _Largest() as largest:
        sample_many(team, requests, SamplingConfig(temperature=0.0, max_new_tokens=4))
    assert 0 < largest.copy < head.numel()
    assert largest.bmm_operand < head.numel()


def test_auto_follows_the_cpus_bfloat16_units(monkeypatch):
    monkeypatch.delenv(dtypes.AUTO_DTYPE_VARIABLE, raising=False)
    monkeypatch.setattr(dtypes, "cpu_bfloat16_units", lambda: "AVX512-BF16")
    dtype, why = dtypes.resolve_dtype("auto", "cpu")
    assert dtype == "bfloat16" and "AVX512-BF16" in why
    assert dtypes.resolve_dtype("auto", "cpu", use_lora=False)[0] == "float32"  # trained weights stay float32
    monkeypatch.setattr(dtypes, "cpu_bfloat16_units", lambda: None)
    dtype, why = dtypes.resolve_dtype("auto", "cpu")
    assert dtype == "float32" and "no native bfloat16" in why
    assert dtypes.resolve_dtype("bfloat16", "cpu") == ("bfloat16", "set")
    monkeypatch.setenv(dtypes.AUTO_DTYPE_VARIABLE, "bfloat16")
    assert dtypes.resolve_dtype("auto", "cpu")[0] == "bfloat16"
    monkeypatch.setenv(dtypes.AUTO_DTYPE_VARIABLE, "float64")
    with pytest.raises(ValueError, match="JOY_AUTO_DTYPE must be one of"):
        dtypes.resolve_dtype("auto", "cpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        TeamConfig(model="m", dtype="half")


def test_the_sft_trainers_auto_is_the_teams_but_a_base_trained_whole_stays_float32(monkeypatch):
    from joy_trainers.sft import auto_dtype

    monkeypatch.setenv(dtypes.AUTO_DTYPE_VARIABLE, "bfloat16")
    assert auto_dtype() == "bfloat16" and auto_dtype(whole_base=True) == "float32"


def test_torch_reports_this_cpus_bfloat16_units_as_proc_cpuinfo_does():
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo here")
    has = " avx512_bf16" in flags or " amx_bf16" in flags
    assert (dtypes.cpu_bfloat16_units() is not None) == has


def test_an_auto_team_is_built_in_the_chosen_dtype_and_says_why(tiny_dir, monkeypatch):
    monkeypatch.setenv(dtypes.AUTO_DTYPE_VARIABLE, "bfloat16")
    team = TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4))
    assert team.config.dtype == "auto" and team.dtype == "bfloat16" and "JOY_AUTO_DTYPE" in team.dtype_reason
    assert team.model_for("qa").get_base_model().lm_head.weight.dtype == torch.bfloat16
    full = TeamPolicy(TeamConfig(model=str(tiny_dir), roles=("qa",), use_lora=False))
    assert full.dtype == "float32" and next(full.model_for("qa").parameters()).dtype == torch.float32
