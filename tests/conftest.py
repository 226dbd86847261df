import os
import sys

import pytest

# dtype="auto" picks bfloat16 on CPUs with native bf16 products: the suite pins it to float32 so that it asserts the
# same numbers on every machine (subprocesses inherit it); tests of bfloat16 set the dtype themselves
os.environ.setdefault("JOY_AUTO_DTYPE", "float32")

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "custom_domain")


@pytest.fixture(scope="session")
def library_env_id():
    """The example custom domain, registered once per test session."""
    import joy_env

    sys.path.insert(0, EXAMPLES)
    from library_domain import SPEC

    joy_env.register_env(SPEC, overwrite=True)
    return SPEC.env_id


TINY_CORPUS_TASKS = 40
"""Expert tasks per env id in the corpus of the test tokenizer (the real build uses 300)."""


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """The embedded tiny model, built once per test session with a small corpus."""
    from joy_agents import tiny

    return tiny.build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", corpus_tasks=TINY_CORPUS_TASKS)


@pytest.fixture(scope="session")
def sft_run(tiny_dir, tmp_path_factory):
    """A run directory holding a team (tiny base, fresh rank-2 adapters) as the sft trainer writes it."""
    from joy_agents.policy import TeamConfig, TeamPolicy

    run = tmp_path_factory.mktemp("sft_run")
    TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4)).save(str(run / "team"))
    return str(run)


@pytest.fixture(scope="session")
def undocumented_metrics():
    """``check(trainer, rows)``: the metrics keys of ``rows`` that docs/trainers/<trainer>.md does not list
    (a key ``charts/reward/math`` is covered by ``charts/reward/<domain>``, a role's by ``<role>``)."""
    docs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "trainers")

    def check(trainer: str, rows: list[dict]) -> list[str]:
        with open(os.path.join(docs, f"{trainer}.md")) as f:
            page = f.read()
        keys = {k for r in rows for k in r}
        return sorted(
            k
            for k in keys
            if f"`{k}`" not in page and not any(f"`{k.rpartition('/')[0]}/{p}`" in page for p in ("<domain>", "<role>"))
        )

    return check


@pytest.fixture(scope="session")
def make_distinct_team(tiny_dir):
    """``make(seed)``: a fresh team on the tiny model whose roles' adapters differ (seeded noise on rank-4
    adapters), so that a row run through the wrong adapter would show."""

    def make(seed: int = 0):
        import torch

        from joy_agents.policy import TeamConfig, TeamPolicy

        team = TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=4, lora_alpha=8))
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for role in team.roles:
                for p in team.trainable_parameters(role):
                    p.add_(torch.randn(p.shape, generator=gen) * 0.2)
        return team

    return make


@pytest.fixture(scope="session")
def distinct_team(make_distinct_team):
    """One :func:`make_distinct_team` team for the session. Read-only: tests must not train it."""
    return make_distinct_team(0)
