import os
import sys

import pytest

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
