"""Every name that plugins, benchmarks, examples, tests or the README import from JoyAgents keeps importing,
from the place it was imported from, under both spellings (``from M import X`` and ``M.X``)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

PUBLIC = {
    "joy_env": [
        "Domain",
        "EnvSpec",
        "SPLITS",
        "SubTask",
        "Task",
        "Tool",
        "ToolContext",
        "ToolError",
        "database",
        "expert_action",
        "list_envs",
        "make",
        "register_env",
        "run_expert_episode",
    ],
    "joy_agents": [
        "Branch",
        "GenerationSettings",
        "MemoryBank",
        "MemoryConfig",
        "Node",
        "RolloutConfig",
        "RolloutEngine",
        "Sample",
        "SamplingConfig",
        "TeamConfig",
        "TeamPolicy",
        "Trajectory",
        "build_tiny_model",
        "expert_policy",
        "summarize",
    ],
    # the team policy's module keeps the names it documents, wherever they are defined
    "joy_agents.policy": [
        "PROMPT_STYLES",
        "Sample",
        "SamplingConfig",
        "TeamConfig",
        "TeamPolicy",
        "attach_role_adapters",
        "parameter_bytes",
        "prompt_view",
    ],
    "joy_trainers": ["ENTRY_POINT_GROUP", "TRAINERS", "available_trainers", "rl"],
    "joy_trainers.base": ["BaseTrainer", "Trained"],
    "joy_trainers.distributed": [
        "all_gather_objects",
        "barrier",
        "is_main",
        "on_main",
        "say",
        "shard",
        "start_processes",
        "unshard",
        "world",
    ],
    # the names of joy_trainers.rl, the plugin SDK
    "joy_trainers.rl": [
        "Drawn",
        "Group",
        "MetricsLog",
        "RLConfig",
        "ReferencePolicy",
        "RunDir",
        "RunState",
        "Scoring",
        "Timer",
        "UpdateConfig",
        "advantages_of",
        "all_gather_objects",
        "all_reduce_sum",
        "check_inputs",
        "checkpoint",
        "draw_groups",
        "evaluate",
        "evolve_memory",
        "finish",
        "latest_checkpoint",
        "load_checkpoint",
        "make_optimizers",
        "outcome_of",
        "plot_rewards",
        "policy_update",
        "run_steps",
        "save_checkpoint",
        "select_global",
        "select_top_k",
        "sft_team",
        "shard",
        "start_config",
        "tiny_sft_dir",
        "tiny_sft_values",
        "trajectory_groups",
        "update_config",
        "update_roles",
        "update_selected",
        "world",
        "write_outputs",
    ],
    "joy_trainers.sft": [
        "LOSSES",
        "SFTConfig",
        "SFTTrainer",
        "bucketed_order",
        "collate_left",
        "collate_shared_prefix",
        "completion_loss",
        "prefix_groups",
        "prefix_sharing_supported",
        "resolve_model",
        "sft_rows",
        "write_run",
    ],
    "joy_trainers.presets": [
        "AUTO_SFT_PRESETS",
        "SFT_PRESETS",
        "SMOL_MODEL",
        "SMOL_RL",
        "TINY_MAX_PROMPT_TOKENS",
    ],
    "joy_trainers.run_config": ["RunConfig"],
    "joy_trainers.generation": ["run_settings", "saved_settings", "sft_prompt_tokens"],
    "joy_trainers.evaluation": ["evaluate_config", "evaluate_team"],
    # the sampling layer: one interface, three engines, the settings that choose them
    "joy_agents.sampling": [
        "ContinuousSampler",
        "ENGINES",
        "EngineStats",
        "GenerateSampler",
        "GenerationSettings",
        "Sampler",
        "VLLMConfig",
        "VLLMSampler",
        "drain",
        "make_sampler",
        "sample_many",
    ],
    "joy_trainers.losses": [
        "LOSS_TYPES",
        "SCALE_REWARDS",
        "gae",
        "group_advantages",
        "kl_k3",
        "policy_loss",
        "reward_spread",
        "scale_mode",
        "value_loss",
    ],
    "joy_trainers.cli": ["build_config", "eval_main", "load_trainer", "parse_overrides", "train_main"],
    "joy_trainers.grpo": ["GRPOConfig", "GRPOTrainer", "PRESETS"],
    "joy_trainers.joyagents_grpo": ["JoyAgentsGRPOConfig", "JoyAgentsGRPOTrainer", "PRESETS"],
    "joy_trainers.mappo": ["Critic", "MAPPOConfig", "MAPPOTrainer", "PRESETS", "global_states", "turn_rewards"],
    "joy_env.domains.tau2": ["DOMAINS", "Tau2Data", "Tau2Domain", "domain", "env_spec", "find_data", "load"],
    "joy_env.domains.tau2.contract": ["DOMAINS", "PACKAGES", "Tau2Domain", "check_domain", "domain"],
    "joy_env.domains.tau2.tooling": ["ToolSpec", "make_tools", "params", "spec", "string", "strings"],
    "joy_env.domains.tau2.airline": ["DOMAIN", "SPLITS", "TOOLS", "WRITE_TOOLS", "build_db", "load_db"],
    "joy_env.domains.tau2.telecom": ["DOMAIN", "AGENT_TOOLS", "USER_TOOLS", "assertions_hold", "prepare_task"],
    # tau2-bench retail: the package re-exports its submodules' public names
    "joy_env.domains.tau2.retail": [
        "AUDIT",
        "DATA_FILES",
        "DOMAIN",
        "INSTALL_HINT",
        "MAX_POW_BITS",
        "ROLE_PROMPT",
        "SPLITS",
        "TASK_PREFIX",
        "TOOLS",
        "WRITE_TOOLS",
        "RetailData",
        "Tau2TaskSource",
        "build_db",
        "calculate_expression",
        "domain",
        "dump_db",
        "env_spec",
        "find_tau2_data",
        "gold_answer",
        "load_retail",
        "render_request",
        "system_prompt",
        "task_source",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_still_import(module):
    # `from M import X` is __import__(M, fromlist=[X]): it also imports a submodule M.X
    imported = __import__(module, fromlist=PUBLIC[module])
    missing = [name for name in PUBLIC[module] if not hasattr(imported, name)]
    assert not missing, f"{module} lost {missing}"
    assert importlib.import_module(module) is imported  # and the `import M; M.X` spelling sees the same


def test_rl_submodules_and_the_package_hold_the_same_objects():
    from joy_trainers import rl
    from joy_trainers.rl import checkpoints, groups, loop, step, update

    assert rl.policy_update is update.policy_update and rl.Group is groups.Group
    assert rl.save_checkpoint is checkpoints.save_checkpoint and rl.run_steps is loop.run_steps
    assert rl.metrics_row is step.metrics_row and set(rl.__all__) >= set(PUBLIC["joy_trainers.rl"])
    for name in rl.__all__:
        assert hasattr(rl, name), name


def test_no_compatibility_shims_and_no_rl_trainer_imports_the_sft_module():
    from joy_trainers import rl, sft
    from joy_trainers.rl import start

    assert not hasattr(rl, "step_row") and not hasattr(sft, "results_table") and not hasattr(start, "_legacy_dir")
    for name in ("grpo", "joyagents_grpo", "mappo"):
        path = Path(__file__).parent.parent / "joy_trainers" / f"{name}.py"
        assert "joy_trainers.sft" not in set(_imports(path)), f"{name}.py imports the sft module (presets: presets.py)"


def _imports(path):
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def test_packages_import_downwards_only_and_every_module_stays_readable():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for package, above in (("joy_env", {"joy_agents", "joy_trainers"}), ("joy_agents", {"joy_trainers"})):
        for path in (root / package).rglob("*.py"):
            bad = [m for m in _imports(path) if m.split(".")[0] in above]
            assert not bad, f"{path.relative_to(root)} imports {bad}; joy_env <- joy_agents <- joy_trainers"
    for path in [p for package in ("joy_env", "joy_agents", "joy_trainers") for p in (root / package).rglob("*.py")]:
        lines = len(path.read_text().splitlines())
        assert lines <= 800, f"{path.relative_to(root)} has {lines} lines; split it along its sections"


def test_the_rl_modules_import_each_other_without_a_circle():
    """Every import between ``joy_trainers.rl``'s modules, type-only ones included, points one way: the pure
    pieces (groups, update, metrics) know no ``RunState``; the state sits above them, the step's operations
    above it, the loop and the trainer on top."""
    import ast

    package = Path(__file__).resolve().parent.parent / "joy_trainers" / "rl"
    edges: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        if path.stem == "__init__":
            continue
        names = edges.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("joy_trainers.rl."):
                names.add(node.module.rsplit(".", 1)[1])
    assert "state" not in edges["groups"] | edges["update"] | edges["metrics"]

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in edges.get(start, ()))

    circles = sorted(m for m in edges if reaches(m, m, set()))
    assert not circles, f"modules of joy_trainers.rl on an import circle: {circles}"
