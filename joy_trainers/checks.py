"""Checks of a run's inputs that ``joy-train`` and ``joy-eval`` make before any long work (building a model,
SFT, loading a team), each failing with a one-line :class:`~joy_trainers.errors.UsageError` that names the
option, the value seen and the fix."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import joy_env
from joy_agents.models import SMOLLM2_ALIASES
from joy_agents.tiny import TINY_LLAMA, TINY_MODELS
from joy_env.registry import COMMON_KWARGS, get_spec
from joy_trainers.errors import UsageError, shown
from joy_trainers.ranges import COUNT_MAX
from joy_trainers.rundir import read_json


def check_env_id(env_id: str, option: str = "env_id") -> None:
    """``env_id`` must be registered (the built-in ids, or one registered with ``joy_env.register_env``)."""
    ids = joy_env.list_envs()
    if env_id not in ids:
        raise UsageError(f"{option} {env_id!r} is not a registered env id; valid: {', '.join(ids)}")


def env_kwargs_problem(env_id: str, env_kwargs: Any, option: str = "env_kwargs") -> str | None:
    """Why ``env_kwargs`` cannot be the task-source options of ``joy_env.make(env_id, ...)`` (``None`` when its
    names are fine): it must map names to values, each name one of the env id's source options (e.g.
    ``source``, ``path`` for ``joy/ecommerce-v0``), never an option the trainer sets itself (``split``,
    ``seed``, ...). Values are checked by :func:`check_env_options`, which makes the env. An unregistered
    ``env_id`` is left to :func:`check_env_id`."""
    if not isinstance(env_kwargs, Mapping) or not all(isinstance(k, str) for k in env_kwargs):
        return f'{option} must map option names to values, e.g. {{"source": "tau2"}}, got {shown(env_kwargs)}'
    reserved = [k for k in env_kwargs if k in COMMON_KWARGS]
    if reserved:
        return (
            f"{option} cannot set {reserved}: the trainer sets {', '.join(COMMON_KWARGS)} itself (use its seed, "
            "eval_split and max_cycles options)"
        )
    if env_id not in joy_env.list_envs():
        return None
    valid = get_spec(env_id).source_kwargs
    unknown = [k for k in env_kwargs if k not in valid]
    if unknown:
        takes = f"valid names: {', '.join(valid)}" if valid else "it takes none (leave env_kwargs empty)"
        return f"{option} has unknown name(s) {shown(unknown)} for {env_id}; {takes}"
    return None


def check_env_options(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    seed: int,
    splits: Mapping[str, str],
    *,
    option: str = "env_kwargs",
    env_option: str = "env_id",
    names_checked: bool = False,
) -> dict[str, Any]:
    """``joy_env.make(env_id, split=..., seed=seed, **env_kwargs)`` must work for every split a run reads
    (``splits`` maps the option naming a split, e.g. ``eval_split``, to its value): the env id, the
    ``env_kwargs`` names and values (a missing optional install included) and the splits, each failure one
    line naming the option (``option`` and ``env_option``: how the caller names the two). A trainer's config
    has checked the ``env_kwargs`` names already (``names_checked``: not again). Returns the envs
    built, by split (a run reads its task counts from them; the worlds behind them are built once per
    process and shared by the envs the run makes later)."""
    check_env_id(env_id, env_option)
    problem = None if names_checked else env_kwargs_problem(env_id, env_kwargs, option)
    if problem:
        raise UsageError(problem)
    envs: dict[str, Any] = {}
    for name, split in splits.items():
        try:
            envs[split] = joy_env.make(env_id, split=split, seed=seed, **env_kwargs)
        except (ImportError, OSError) as exc:  # e.g. source="tau2" without its data installed
            raise UsageError(f"{option} {shown(dict(env_kwargs), 200)}: {exc}") from None
        except (TypeError, ValueError) as exc:
            what = f"{env_id} with {option} {shown(dict(env_kwargs), 200)}" if env_kwargs else env_id
            if "split must be one of" in str(exc):
                raise UsageError(f"{name} {split!r}: {what} has no such split ({exc})") from None
            raise UsageError(f"{what}: {exc}") from None
    return envs


def check_team_dir(team: Path, option: str) -> None:
    """``team`` must be a team directory written by ``TeamPolicy.save`` (``team.json`` in it)."""
    if not (team / "team.json").is_file():
        run = team.parent
        if run.exists() and not run.is_dir():
            raise UsageError(
                f"{option} {str(run)!r} is a file, not a run directory; pass a run directory written by joy-train"
            )
        what = "does not exist" if not run.exists() else f"holds no {team.name}/team.json"
        hint = ""
        if (run / "checkpoints").is_dir():
            hint = f" (the run did not finish; continue it with joy-train --resume --output-dir {run})"
        raise UsageError(f"{option} {str(run)!r} {what}{hint}; pass a run directory written by joy-train")


def check_team_weights(team: Path, option: str) -> None:
    """The weights files of the team saved in ``team`` (its adapters, and its base and separate models where
    they are local directories) must be sound (:mod:`joy_agents.weight_files`: a safetensors header that fits its
    file, a torch file of tensors only), checked before any is loaded: one line naming the file otherwise."""
    from joy_agents.weight_files import check_weights_dir

    config = read_team_config(team, option)
    models = [str(config["model"]), *(str(m) for m in (config.get("separate_models") or {}).values())]
    roles = [str(r) for r in config["roles"]]
    dirs = [team / r for r in roles]
    dirs += [Path(os.path.normpath(team / m)) if m.startswith(("./", "../")) else Path(m) for m in models]
    try:
        for d in dirs:
            check_weights_dir(str(d))
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def check_team_models(team: Path, run_dir: Path, option: str) -> None:
    """The models the ``team.json`` of ``team`` names (its base and separate models) must not take a run directory
    out of itself or onto the network: a relative path must stay inside ``run_dir``, and a Hugging Face name must
    be in the local cache (or be an embedded model), so that loading the team never downloads; a local absolute
    path is the user's own. One line naming the file and the model otherwise."""
    config = read_team_config(team, option)
    file = team / "team.json"
    root = os.path.abspath(run_dir)
    for model in [config["model"], *(config.get("separate_models") or {}).values()]:
        if model.startswith(("./", "../")):
            resolved = os.path.normpath(os.path.join(os.path.abspath(team), model))
            if os.path.commonpath([resolved, root]) != root:
                raise UsageError(
                    f"{option}: {file} names the model {model!r}, a path that leaves the run directory {run_dir}; a "
                    f'run names its own models inside it: edit "model" in {file} to the model\'s absolute path'
                )
        elif not (
            model in TINY_MODELS
            or model.lower() in SMOLLM2_ALIASES
            or model.startswith(("/", "~"))
            or model.endswith(".gguf")
            or _in_hub_cache(model)
        ):
            raise UsageError(
                f"{option}: {file} names the model {model!r}, which is neither a local path nor in the local Hugging "
                "Face cache; a run directory never makes joy-train or joy-eval download a model: download it "
                f'yourself (hf download {model}) or edit "model" in {file}'
            )


def _in_hub_cache(name: str) -> bool:
    """Whether the Hugging Face model ``name`` (``org/name`` or ``name``) has its ``config.json`` in the local cache
    (looked up on disk only)."""
    if name.count("/") > 1 or name.startswith((".", "~")) or not name.strip():
        return False
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - an unusual name or cache: not there
        return False


def team_roles(team: Path) -> tuple[str, ...]:
    """The roles of the team saved in ``team`` (read from its ``team.json``, without loading any weights); ()
    when the file does not say."""
    try:
        roles = json.loads((team / "team.json").read_text())["config"]["roles"]
    except (OSError, ValueError, KeyError, TypeError):
        return ()
    return tuple(str(r) for r in roles) if isinstance(roles, list) else ()


def check_team_roles(roles: tuple[str, ...], env: Any, env_id: str, env_kwargs: Mapping[str, Any], option: str) -> None:
    """A team must have a role for every agent of ``env`` (``env.possible_agents``): one line naming the
    missing roles and the fix; a team with more roles than the env is fine. With a dialogue whose customer the
    team plays (``customer="team"``), ``customer`` is one of them. Empty ``roles`` (not known) pass."""
    missing = [a for a in env.possible_agents if a not in roles]
    if not missing or not roles:
        return
    where = f"{env_id} with env_kwargs {dict(env_kwargs)}" if env_kwargs else env_id
    sft = f"joy-train --trainer sft --set env_id={env_id}"
    if env_kwargs:
        sft += f" --set env_kwargs='{json.dumps(dict(env_kwargs), default=str)}'"
    fix = f"start from a team trained on that env ({sft})"
    if getattr(env, "customer", None) in missing:
        fix += ', or let the env play the customer (env_kwargs "customer": "scripted")'
    raise UsageError(
        f"{option}: the team has no role {', '.join(missing)}, which {where} has (the team's roles: "
        f"{', '.join(roles)}); {fix}"
    )


def check_model(model: str, option: str = "model", hub: bool = True) -> None:
    """A ``model`` written as a local path (absolute, ``./``, ``../``, ``~`` or a ``.gguf`` file) must exist; with
    ``hub``, a Hugging Face name (``org/name``) that is not in the local cache must be reachable
    (:func:`hub_problem`: one request, no retries), so that a model that is neither here nor downloadable is one
    line before any work, not a download error after it. The embedded models are always there."""
    if model in (*TINY_MODELS, TINY_LLAMA, *SMOLLM2_ALIASES):
        return
    path_like = model.startswith(("/", "./", "../", "~")) or model.endswith(".gguf")
    if path_like and not _exists(Path(model).expanduser()):
        raise UsageError(
            f"{option}={shown(model)}: no such model (no file or directory at that path); pass an existing model "
            f"directory or .gguf file, a Hugging Face name, or one of {', '.join((*TINY_MODELS, *SMOLLM2_ALIASES))}"
        )
    if hub and not path_like and not _exists(Path(model)) and not _in_hub_cache(model):
        problem = hub_problem(model)
        if problem:
            fix = (
                "pass the path of a local model directory, or a Hub name"
                if problem == NOT_A_HUB_NAME
                else f"download it on a machine with a network (hf download {model}) into this machine's cache, or "
                "pass the path of a local model directory"
            )
            raise UsageError(
                f"{option}={shown(model)} is neither a local directory nor in the local Hugging Face cache, and "
                f"{problem}; {fix}"
            )


def _exists(path: Path) -> bool:
    """Whether ``path`` exists (a name the filesystem cannot hold, too long or with a NUL, does not)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


NOT_A_HUB_NAME = "it is not a Hub model name (org/name)"
"""What :func:`hub_problem` says of a name the Hub cannot hold."""


def hub_problem(name: str) -> str | None:
    """Why the Hugging Face model ``name`` cannot be downloaded from here, in words (None: its ``config.json`` is
    there to download): offline mode, a name that is not a Hub name, no network, no such model, a gated one. One
    request for the file's metadata, without the download's retries."""
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return "HF_HUB_OFFLINE is set, so nothing is downloaded"
    try:
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError

        if constants.is_offline_mode():
            return "HF_HUB_OFFLINE is set, so nothing is downloaded"
        url = hf_hub_url(name, "config.json")
    except HFValidationError:
        return NOT_A_HUB_NAME
    except ImportError:  # no huggingface_hub: loading says so
        return None
    try:
        get_hf_file_metadata(url, timeout=10)
    except GatedRepoError:
        return "it is a gated model: accept its terms on the Hub and log in (hf auth login)"
    except RepositoryNotFoundError:
        return "the Hub has no model of that name (or it is private: log in with hf auth login)"
    except Exception as exc:  # noqa: BLE001 - no network, a proxy, a timeout: the Hub is not reachable
        return f"the Hugging Face Hub is not reachable ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
    return None


def check_sft_run(sft_run: str | None, model: str, data_seed: int = 0) -> None:
    """An RL run starts from ``sft_run``'s team, trained on the run's ``data_seed``, or from the automatic SFT
    team for the tiny models and SmolLM2 (its model's path is checked; the team's own base is checked where it
    is loaded)."""
    check_model(model, hub=False)
    if sft_run:
        check_team_dir(Path(sft_run) / "team", "sft_run")
        trained = read_results(Path(sft_run)).get("seed")
        if trained is not None and trained != data_seed:
            raise UsageError(
                f"sft_run {sft_run!r} was trained on data seed {trained}, but this run's data_seed is {data_seed}: "
                f"its entities and splits differ; pass --set data_seed={trained} (vary `seed` to repeat an RL run)"
            )
    elif model not in (*TINY_MODELS, *SMOLLM2_ALIASES):
        raise UsageError(
            f"model={model!r} needs sft_run (a run directory of `joy-train --trainer sft`); only these models are "
            f"fine-tuned automatically: {', '.join((*TINY_MODELS, *SMOLLM2_ALIASES))}"
        )


def sft_env_mismatch(sft_run: str | None, env_id: str, env_kwargs: dict[str, Any] | None) -> str | None:
    """A warning when ``sft_run`` was trained on another env id or other env options than the RL run's
    (a team trained on ``joy/qa-v0`` that RL goes on to train on ``joy/mixed-v0``); ``None`` if they agree or
    the SFT run does not say. Not an error: starting from a team of another env can be deliberate."""
    if not sft_run:
        return None
    config = read_results(Path(sft_run)).get("config")
    if not isinstance(config, dict) or "env_id" not in config:
        return None
    trained = (config["env_id"], config.get("env_kwargs") or {})
    if trained == (env_id, env_kwargs or {}):
        return None
    return (
        f"sft_run {sft_run!r} was trained on env_id={trained[0]!r}, env_kwargs={trained[1]!r}, but this run "
        f"trains on env_id={env_id!r}, env_kwargs={env_kwargs or {}!r}; pass --set env_id=... (and env_kwargs) "
        "to train on the SFT run's tasks"
    )


def read_results(run: Path) -> dict[str, Any]:
    """A run directory's ``results.json`` ({} if the run has none yet); a damaged one is a UsageError."""
    path = run / "results.json"
    if not path.is_file():
        return {}
    try:
        data = read_json(path, RESULTS_MAX_BYTES)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{' '.join(str(exc).split())} (the run crashed or is still writing it, or it was tampered with); rerun "
            "the run or remove the file"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a results object; it was not written by joy-train")
    if "config" in data and not isinstance(data["config"], dict):
        raise UsageError(f"{path}: its config is not an object; it was not written by joy-train")
    return data


RESULTS_MAX_BYTES = 16 * 2**20
"""The largest ``results.json`` read back."""
TEAM_FILE_MAX_BYTES = 2**20
"""The largest ``team.json`` read back."""


def read_team_config(team: Path, option: str) -> dict[str, Any]:
    """The ``config`` of the ``team.json`` in ``team``, checked as :class:`~joy_agents.policy.TeamConfig` checks
    its fields (types, names, values) before anything reads it: one line naming the file otherwise."""
    from joy_agents.policy import TeamConfig

    file = team / "team.json"
    try:
        data = read_json(file, TEAM_FILE_MAX_BYTES)
        config = data["config"]
        TeamConfig(**config)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = " ".join(str(exc).split())[:200] if isinstance(exc, (ValueError, TypeError)) else "unreadable"
        raise UsageError(f"{option}: {file} is damaged ({why}); it was not written by joy-train") from None
    return config


# ------------------------------------------------------------------------------------ sizes against the model
SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "max_position_embeddings", "vocab_size")
"""What :func:`model_shape` reads of a model's ``config.json``."""


def model_shape(model: str) -> dict[str, int] | None:
    """The width, depth, context and vocabulary of ``model`` (``hidden_size``, ``num_hidden_layers``,
    ``max_position_embeddings``, ``vocab_size``) read from its
    ``config.json`` without loading any weights: the embedded tiny models, a local model directory, or a Hugging
    Face name already in the local cache. None when it is not known without a download or a conversion."""
    from joy_agents import tiny

    if model in ("tiny", "tiny-small"):
        size = tiny.SIZES["tiny" if model == "tiny" else "small"]
        config: dict[str, Any] = {
            **size,
            "max_position_embeddings": tiny.MAX_POSITIONS,
            "vocab_size": size["bpe_vocab"],
        }
    else:
        path = Path(model).expanduser()
        if model == "tiny-base":
            path = tiny.tiny_base_dir()
        elif not path.is_dir():
            path = _cached_hub_dir(model) or path
        try:
            config = json.loads((path / "config.json").read_text())
        except (OSError, ValueError):
            return None
        if isinstance(config, dict) and isinstance(config.get("text_config"), dict):
            config = {**config, **config["text_config"]}  # a multimodal model: its language model's shape
    if not isinstance(config, dict) or not all(isinstance(config.get(k), int) for k in SHAPE_KEYS):
        return None
    return {k: int(config[k]) for k in SHAPE_KEYS}


def _cached_hub_dir(name: str) -> Path | None:
    """The local snapshot directory of the Hugging Face model ``name`` when its ``config.json`` is cached."""
    if name.count("/") != 1 or name.startswith(("/", ".", "~")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - an unusual name or cache: the shape is just not known
        return None
    return Path(found).parent if isinstance(found, str) else None


def team_model(team: Path) -> str | None:
    """The base model the team saved in ``team`` names (a path relative to it resolved), without loading it."""
    try:
        model = str(json.loads((team / "team.json").read_text())["config"]["model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return os.path.normpath(team / model) if model.startswith(("./", "../")) else model


def memory_bytes() -> int:
    """The memory a run's model works in: the first CUDA device's, else the machine's RAM (0: not known)."""
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(0).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def check_tokens_fit(shape: dict[str, int], model: str, tokens: int, scored: int, what: str, fix: str) -> None:
    """``tokens`` in one forward and backward, ``scored`` of them with output logits, must fit in
    :func:`memory_bytes`: a lower bound of what they need (each layer's input kept for the backward, in 2-byte
    numbers, and the logits in 4-byte ones) above it is one line naming ``what``, the estimate, the memory and
    ``fix``."""
    need = tokens * shape["hidden_size"] * shape["num_hidden_layers"] * 2 + scored * shape["vocab_size"] * 4
    have = memory_bytes()
    if have and need > have:
        raise UsageError(
            f"{what} ({tokens} tokens per forward) need at least {need / 2**30:.1f} GiB of activations on {model} "
            f"(hidden_size {shape['hidden_size']}, {shape['num_hidden_layers']} layers, vocabulary "
            f"{shape['vocab_size']}), more than the {have / 2**30:.1f} GiB there are; {fix}"
        )


def check_sft_sizes(cfg: Any, model: str | None = None) -> None:
    """An ``sft`` config's sizes against its model (``model``: where its shape is read, default ``cfg.model``),
    before any work: ``lora_r`` within the model's width, ``max_length`` within its context, and a batch
    (``batch_size`` rows of ``max_length`` tokens, or ``batch_tokens``) within the memory there is."""
    shape = model_shape(model or cfg.model)
    if shape is None:
        return
    name, width, context = cfg.model, shape["hidden_size"], shape["max_position_embeddings"]
    if cfg.lora_r > width:
        raise UsageError(
            f"lora_r={cfg.lora_r} is above the width of {name} (hidden_size {width}): a LoRA rank beyond it adds "
            f"nothing; set lora_r <= {width} (e.g. --set lora_r={min(16, width)})"
        )
    if cfg.max_length > context:
        raise UsageError(
            f"max_length={cfg.max_length} is above the context of {name} (max_position_embeddings {context}); "
            f"set max_length <= {context} (e.g. --set max_length={min(1024, context)})"
        )
    if cfg.batch_tokens:
        what, fix, tokens = f"batch_tokens={cfg.batch_tokens}", "lower batch_tokens", cfg.batch_tokens
    else:
        what, fix = f"batch_size={cfg.batch_size} rows of max_length={cfg.max_length}", "lower batch_size"
        tokens = cfg.batch_size * cfg.max_length
    check_tokens_fit(shape, name, tokens, tokens, what, f"{fix} (and raise grad_accum for the same effective batch)")


def check_rl_sizes(cfg: Any, model: str | None) -> None:
    """An RL config's sizes against the model of its starting team (``model``; None: not known), before any
    work: every turn (``max_prompt_tokens`` + ``max_new_tokens``, and mappo's ``critic_max_tokens``) within the
    model's context, the samples of a step within reason, and an update micro-batch within the memory there is."""
    samples = cfg.tasks_per_step * cfg.group_size
    if samples > COUNT_MAX:
        raise UsageError(
            f"tasks_per_step={cfg.tasks_per_step} x group_size={cfg.group_size} = {samples} samples per step, above "
            f"{COUNT_MAX}; lower tasks_per_step or group_size (e.g. --set tasks_per_step=8)"
        )
    shape = model_shape(model) if model else None
    if shape is None:
        return
    context, turn = shape["max_position_embeddings"], cfg.max_prompt_tokens + cfg.max_new_tokens
    if turn > context:
        raise UsageError(
            f"max_prompt_tokens={cfg.max_prompt_tokens} + max_new_tokens={cfg.max_new_tokens} = {turn} tokens per "
            f"turn is above the context of {cfg.model} ({context} tokens); lower them to a sum <= {context} (e.g. "
            f"--set max_prompt_tokens={max(1, context - cfg.max_new_tokens)})"
        )
    critic = getattr(cfg, "critic_max_tokens", None)
    if critic is not None and critic > context:
        raise UsageError(
            f"critic_max_tokens={critic} is above the context of {cfg.model} ({context} tokens); set "
            f"critic_max_tokens <= {context}"
        )
    check_tokens_fit(
        shape,
        cfg.model,
        cfg.micro_batch_size * turn,
        cfg.micro_batch_size * cfg.max_new_tokens,  # logits of the completions only
        f"micro_batch_size={cfg.micro_batch_size} sequences of up to {turn} tokens",
        "lower micro_batch_size (the update accumulates over micro-batches)",
    )


DOMAIN_WEIGHT_MAX = 1e6
"""The largest weight of one domain in ``domain_weights`` (a weight repeats that domain's candidates)."""


def _number_in(value: Any, low: float, high: float) -> bool:
    """Whether ``value`` is an int or float (not a bool) in ``[low, high]`` (a finite one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (not isinstance(value, float) or math.isfinite(value)) and low <= value <= high


def check_domain_weights(weights: Mapping[str, float], env: Any, sft_tasks: int, rl_fraction: float, seed: int) -> None:
    """``domain_weights`` against the domains of the SFT tasks of ``env`` (the candidates
    :func:`joy_agents.sft_data.build_sft_examples` draws from): every name one of them, and some weight > 0 on
    a domain there is. One line naming the value, the domains and the fix."""
    if not weights:
        return
    bad = {d: w for d, w in weights.items() if not _number_in(w, 0, DOMAIN_WEIGHT_MAX)}
    if bad:
        raise UsageError(
            f"domain_weights {shown(bad)}: each weight must be a number in [0, {int(DOMAIN_WEIGHT_MAX)}] (unlisted "
            "domains weigh 1); e.g. --set domain_weights='{\"qa\": 2.0}'"
        )
    from joy_agents.sft_data import split_train_tasks

    sft_indices, _ = split_train_tasks(env.num_tasks, rl_fraction, seed)
    pool = sft_indices[: min(len(sft_indices), sft_tasks * max(2, int(max(weights.values())) + 2))]
    domains = sorted({env.get_task(i).domain for i in pool})
    unknown = sorted(set(weights) - set(domains))
    if unknown:
        raise UsageError(
            f"domain_weights {shown(dict(weights))} names unknown domain(s) {shown(unknown)}; the domains of the SFT "
            f"tasks: {', '.join(domains)} (e.g. --set domain_weights='{{\"{domains[0]}\": 2.0}}')"
        )
    if all(float(weights.get(d, 1.0)) <= 0 for d in domains):
        raise UsageError(
            f"domain_weights {shown(dict(weights))} give every domain weight 0, which leaves no task to train on; give "
            f"at least one of {', '.join(domains)} a weight > 0 (unlisted domains weigh 1)"
        )


def model_config(model: str) -> dict[str, Any] | None:
    """The ``config.json`` of ``model`` as a dict, without loading weights or converting anything: the embedded
    tiny models (their shape), a local directory or a Hugging Face name in the local cache; None when not known."""
    from joy_agents import tiny

    if model in ("tiny", "tiny-small"):
        return {"architectures": ["Qwen2ForCausalLM"], **tiny.SIZES["tiny" if model == "tiny" else "small"]}
    path = tiny.tiny_base_dir() if model == "tiny-base" else Path(model).expanduser()
    if not path.is_dir():
        path = _cached_hub_dir(model) or path
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def check_vllm_team(team: Path | None, model: str | None, lora_r: int | None, option: str) -> None:
    """The ``vllm`` engine must be able to serve the run's starting team (the team saved in ``team``, or a team of
    ``model`` with rank-``lora_r`` adapters when it is yet to be trained): LoRA adapters on one base, a rank, an
    architecture and (on a CPU) a head size vLLM takes (:func:`joy_agents.sampling.vllm.serving_problem`); one line
    naming ``option`` otherwise. What is not known without loading anything is left to the engine's start."""
    from joy_agents.sampling.vllm import serving_problem

    saved: dict[str, Any] = {}
    if team is not None:
        try:
            saved = dict(json.loads((team / "team.json").read_text())["config"])
        except (OSError, ValueError, KeyError, TypeError):
            saved = {}
        model = team_model(team) or model
    base = model_config(model) if model else None
    problem = serving_problem(
        base,
        int(saved.get("lora_r", lora_r or 1)),
        bool(saved.get("use_lora", True)),
        saved.get("separate_models") or (),
    )
    if problem:
        raise UsageError(f"{option}=vllm cannot serve {team or model}: {problem}")
