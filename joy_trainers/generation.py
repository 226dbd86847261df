"""The generation settings of a run, built in one place: a run's Config makes its
:class:`~joy_agents.sampling.settings.GenerationSettings` once (``cfg.generation_settings()``, through
:func:`run_settings`), every trainer writes them into ``results.json`` (``"generation"``), and the training
rollouts, the trainers' evaluations and ``joy-eval`` (:func:`saved_settings`, then its command-line overrides)
sample whole turns under them:

    settings = cfg.generation_settings()
    engine = RolloutEngine(team, env_id, "train", seed, RolloutConfig(settings, keep_snapshots=True))
    engine.run(tasks, settings.sampling(temperature=1.2))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joy_agents.sampling.settings import GenerationSettings, VLLMConfig

__all__ = ["run_settings", "saved_settings", "sft_prompt_tokens"]


def run_settings(cfg: Any, *, max_cycles: int, max_prompt_tokens: int) -> GenerationSettings:
    """The generation settings of a run's Config ``cfg`` (a :class:`~joy_trainers.run_config.RunConfig`): its
    ``max_new_tokens``, ``rollout_engine``, ``draft_tokens``, ``draft_max_rows`` and ``vllm_options``, with the
    turns per episode and prompt tokens the trainer's Config states."""
    return GenerationSettings(
        max_new_tokens=cfg.max_new_tokens,
        max_cycles=max_cycles,
        max_prompt_tokens=max_prompt_tokens,
        engine=cfg.rollout_engine,
        draft_tokens=cfg.draft_tokens,
        draft_max_rows=cfg.draft_max_rows,
        vllm=VLLMConfig.from_options(cfg.vllm_options),
    )


def sft_prompt_tokens(max_new_tokens: int, max_length: int) -> int:
    """The prompt tokens an ``sft`` run's evaluations keep: ``max_length - max_new_tokens``, the view it trained
    on (at least 16)."""
    return max(16, max_length - max_new_tokens)


def saved_settings(results: Mapping[str, Any]) -> GenerationSettings:
    """The generation settings a run trained and evaluated under, from its ``results.json``: its
    ``"generation"`` block, or, for a run saved before it had one, rebuilt from its saved ``"config"``.

    Such a config states the limits of an RL run (``max_new_tokens``, ``max_cycles``, ``max_prompt_tokens``), or of
    an ``sft`` run (prompts cut to ``max_length - max_new_tokens``; ``eval_max_new_tokens`` in runs saved before
    the rename; ``eval_max_cycles`` turns). A run holding neither is a one-line ``ValueError`` naming what is
    missing."""
    if "generation" in results:
        return GenerationSettings.from_dict(results["generation"])
    config = results.get("config")
    if not isinstance(config, Mapping):
        raise ValueError("it holds neither generation settings nor a config: it was not written by joy-train")
    if "max_prompt_tokens" in config:  # an RL run
        needed = ["max_new_tokens", "max_cycles", "max_prompt_tokens"]
        missing = [k for k in needed if k not in config]
        limits = {} if missing else {k: int(config[k]) for k in needed}
    else:  # an sft run
        cap = "max_new_tokens" if "max_new_tokens" in config else "eval_max_new_tokens"
        missing = [k for k in ("max_length", cap, "eval_max_cycles") if k not in config]
        if not missing:
            new = int(config[cap])
            limits = {
                "max_new_tokens": new,
                "max_cycles": int(config["eval_max_cycles"]),
                "max_prompt_tokens": sft_prompt_tokens(new, int(config["max_length"])),
            }
    if missing:
        raise ValueError(
            f"the run's saved config lacks {missing}; it was not written by joy-train's sft or RL trainers"
        )
    engine = {
        name: config[key]
        for name, key in (
            ("engine", "rollout_engine"),
            ("draft_tokens", "draft_tokens"),
            ("draft_max_rows", "draft_max_rows"),
            ("vllm", "vllm_options"),
        )
        if config.get(key) is not None
    }
    try:
        return GenerationSettings.from_dict({**limits, **engine})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"its config: {exc}") from None
