"""The embedded tiny model: a tokenizer and a random-init Qwen2 model built offline from the env's own text.

Nothing can be downloaded in CI or on a fresh machine, so the project builds its own default model:

>>> from joy_agents.tiny import build_tiny_model
>>> path = build_tiny_model()            # built once (about 20 s on 2 CPU cores), then cached
>>> from transformers import AutoModelForCausalLM, AutoTokenizer
>>> tokenizer = AutoTokenizer.from_pretrained(path)      # the same code path as a real model
>>> model = AutoModelForCausalLM.from_pretrained(path)

What the build does
-------------------
1. **Corpus.** The scripted expert plays ``corpus_tasks`` tasks (default 300) of the *train* split of each
   built-in env (``joy_env.builtin.ENV_IDS``; tasks spread evenly over the split, data seed 0). Every
   agent's conversation (system prompt with its tools, queries, tool calls, tool results, answers) is
   rendered with :data:`CHAT_TEMPLATE`, so the tokenizer learns the real format (about 3,000 conversations,
   5.7 M characters). Validation and test text is never read.
2. **Tokenizer.** Byte-level BPE trained with ``tokenizers`` (at most 4096 tokens for ``size="tiny"``,
   8192 for ``"small"``), with Qwen2's normaliser and pre-tokeniser (NFC; words, single digits,
   punctuation runs and newlines split apart; byte level), so ``AutoTokenizer``, which rebuilds a
   ``Qwen2Tokenizer`` from the vocabulary and merges for a Qwen2 model, encodes exactly like
   ``tokenizer.json``. Special tokens ``<|endoftext|>`` (pad, id 0), ``<|im_start|>`` (1), ``<|im_end|>``
   (2, eos); added tokens ``<tool_call>``, ``</tool_call>``, ``<answer>``, ``</answer>``, ``<think>``,
   ``</think>``, ``<tool_response>``, ``</tool_response>`` (ids 3 to 10, kept by
   ``skip_special_tokens``): each is one token id, so a sampler can stop on ``</tool_call>`` or
   ``</answer>``. No BOS token, left padding, :data:`CHAT_TEMPLATE`.
3. **Model.** ``Qwen2ForCausalLM`` from :func:`tiny_config` (float32, tied embeddings, vocabulary
   ``len(tokenizer)``), initialised after ``torch.manual_seed(seed)`` (the caller's RNG state is restored).
   ``generation_config`` stops on ``<|im_end|>`` and ``</answer>`` and pads with ``<|endoftext|>``.

==========  =====================================================  ======================
``size``    shape                                                  with the default corpus
==========  =====================================================  ======================
``tiny``    hidden 128, 4 layers, 4 heads (2 KV), MLP 384          V 4096, 1.31 M params
``small``   hidden 512, 6 layers, 8 heads (2 KV), MLP 1408         V 7925, 21.0 M params
==========  =====================================================  ======================

Chat template
-------------
Qwen2.5 / Hermes conventions: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message; the system
message carries the tools, one compact line each (``- get_order_details(order_id: string)``; a ``?``
marks an optional argument), not full JSON schemas; tool results (role ``tool``) go in a user turn as
``<tool_response>\\n{content}\\n</tool_response>`` (consecutive results share one turn);
``add_generation_prompt`` appends ``<|im_start|>assistant\\n``. Assistant content is wrapped in
``{% generation %}`` so ``apply_chat_template(..., return_assistant_tokens_mask=True)`` marks the tokens
an SFT loss trains on. The ids of a prompt (``add_generation_prompt=True``) followed by the ids of a
completion ``<content><|im_end|>`` equal the ids of the whole conversation: no drift at the boundary
(for any content that does not start with a line break, which would merge with the one before it).

Cache
-----
``build_tiny_model()`` writes to ``$JOY_CACHE_DIR`` (default ``~/.cache/joyagents``) under
``tiny-{size}-seed{seed}-v1``. A directory holding a complete build (its
``build_info.json``) is returned as is, unless the ``joy_env`` source changed since
(:func:`env_fingerprint`: the corpus would differ) or the build version did; then it is rebuilt.
``force=True`` rebuilds. The build happens in a temporary directory next to the target and is renamed
into place in one step, so an interrupted build leaves nothing half-written and concurrent builders
end up sharing one complete build. The same seed gives byte-identical ``tokenizer.json`` and weights.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import pathlib
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import joy_env
from joy_env.builtin import ENV_IDS
from joy_env.expert import expert_action

try:
    import fcntl  # POSIX file locks for the cache (a stdlib module that Windows lacks)
except ImportError:  # pragma: no cover - Windows
    fcntl = None

logger = logging.getLogger(__name__)

BUILD_VERSION = 1
"""Bumped when a change to this module changes what a build contains (invalidates caches)."""
DEFAULT_TASKS_PER_ENV = 300
"""Train tasks per env id played by the expert for the tokenizer corpus."""
CORPUS_SEED = 0
"""Data seed of the envs that produce the corpus (fixed: the tokenizer does not depend on ``seed``)."""

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
"""Special tokens (ids 0, 1, 2); ``<|im_end|>`` is the EOS token, ``<|endoftext|>`` the pad token."""
ADDED_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<tool_response>",
    "</tool_response>",
)
"""Protocol markers, one token id each (ids 3 to 10); not special: decoding keeps them."""

SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "bpe_vocab": 4096,
        "hidden_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 384,
    },
    "small": {
        "bpe_vocab": 8192,
        "hidden_size": 512,
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1408,
    },
}
"""Model shapes per ``size``; ``bpe_vocab`` is the BPE vocabulary size (special and added tokens included)."""
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Pre-tokeniser split of Qwen2 tokenizers (words, single digits, punctuation runs, newlines, spaces)."""
MAX_POSITIONS = 4096
"""Context length of the tiny models (``max_position_embeddings`` and the tokenizer's ``model_max_length``)."""

CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system = messages[0]['content'] or '' -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}{%- set system = none -%}{%- set rest = messages -%}{%- endif -%}"
    "{%- if system is not none or tools -%}"
    "{{- '<|im_start|>system\\n' + (system if system is not none else 'You are a helpful assistant.') -}}"
    "{%- if tools -%}"
    '{{- \'\\n\\n# Tools\\nCall a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.\' -}}'
    "{%- for tool in tools -%}"
    "{%- set f = tool['function'] if tool['function'] is defined else tool -%}"
    "{%- set params = f.get('parameters') or {} -%}"
    "{%- set required = params.get('required') or [] -%}"
    "{{- '\\n- ' + f['name'] + '(' -}}"
    "{%- for name, p in (params.get('properties') or {}).items() -%}"
    "{%- set t = p.get('type', 'any') if p is mapping else 'any' -%}"
    "{%- if t is string and t == 'array' and p['items'] is defined and p['items'] is mapping"
    " and p['items'].get('type') is string -%}{%- set t = 'array[' + p['items']['type'] + ']' -%}"
    "{%- elif t is not string and t is iterable -%}{%- set t = t | join('|') -%}{%- endif -%}"
    "{{- (', ' if not loop.first else '') + name + ('' if name in required else '?') + ': ' + t | string -}}"
    "{%- endfor -%}"
    "{{- ')' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in rest -%}"
    "{%- if message['role'] == 'tool' -%}"
    "{%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + (message['content'] or '') | string + '\\n</tool_response>' -}}"
    "{%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{{- (message['content'] or '') | string -}}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set c = call['function'] if call['function'] is defined else call -%}"
    "{{- '<tool_call>' + {'name': c['name'], 'arguments': c['arguments']} | tojson + '</tool_call>' -}}"
    "{%- if not loop.last -%}{{- '\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') | string + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
"""Jinja chat template of the tiny tokenizer (Qwen2.5 / Hermes conventions, compact tools; see above)."""


def default_cache_dir() -> pathlib.Path:
    """``$JOY_CACHE_DIR`` if set, else ``~/.cache/joyagents``."""
    env = os.environ.get("JOY_CACHE_DIR")
    return pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "joyagents"


def cache_locks_work() -> bool:
    """Whether :func:`cache_lock` really locks here (POSIX); without it a process must not remove a temporary
    directory it did not create."""
    return fcntl is not None


@contextlib.contextmanager
def cache_lock(path: str | os.PathLike, waiting: str | None = None) -> Iterator[bool]:
    """Hold an exclusive lock on the file ``path`` for the block, so that one process builds a cache entry
    while the others wait for it (then find it built). Yields whether it had to wait; prints ``waiting``
    first if so. The lock dies with its process, so a crashed builder never blocks the next one. Where
    ``fcntl`` is missing (Windows) it does not lock: builds there still use private temporary directories."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fcntl is None:
        yield False
        return
    with open(path, "a+") as handle:
        waited = False
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waited = True
            if waiting:
                print(waiting, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield waited
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


TINY_MODELS = ("tiny-base", "tiny", "tiny-small")
"""Model names of the embedded tiny models (no download): the shipped pretrained base (:func:`tiny_base_dir`)
and the random-init builds of :func:`build_tiny_model` (sizes ``tiny`` and ``small``)."""

TINY_BASE_DIR = pathlib.Path(__file__).parent / "assets" / "tiny-base"
"""Where the package ships the pretrained tiny base (built by ``joy-build-tiny-base``)."""


def tiny_base_dir() -> pathlib.Path:
    """The pretrained tiny base shipped with the package (``model="tiny-base"``): the tiny model after a long
    training on the environment's expert conversations (:mod:`joy_trainers.tiny_base`). Loads with
    ``from_pretrained``; read-only."""
    if not (TINY_BASE_DIR / "build_info.json").is_file():
        raise FileNotFoundError(
            f"the pretrained tiny base is missing from {TINY_BASE_DIR}; this installation lacks the package data "
            "(reinstall joyagents) or build it: joy-build-tiny-base --out DIR, then copy DIR there"
        )
    return TINY_BASE_DIR


TINY_LLAMA = "tiny-llama"
"""Model string of a randomly initialised tiny Llama (the architecture of SmolLM2, tied head) with the tiny
base's tokenizer: the SmolLM2 code path (bf16, Llama layers) on a CPU in seconds, for tests and dry runs."""
TINY_LLAMA_VERSION = 1


def build_tiny_llama(out: str | os.PathLike | None = None, seed: int = 0) -> pathlib.Path:
    """A tiny Llama (hidden 64, 2 layers, 4 heads / 2 KV heads; random weights, seeded) with the shipped tiny base's
    tokenizer, chat template and generation config, written to ``out`` (default: in the cache, built once)."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    root = pathlib.Path(out) if out is not None else default_cache_dir() / f"{TINY_LLAMA}-s{seed}-v{TINY_LLAMA_VERSION}"
    if (root / "config.json").is_file() and (root / "model.safetensors").is_file():
        return root
    base = tiny_base_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.pad_token_id,
    )
    rng_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)
    finally:
        torch.random.set_rng_state(rng_state)
    model.generation_config = GenerationConfig.from_pretrained(str(base))
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.replace(tmp, root)  # atomic; another builder may have published first
        except OSError:
            if not (root / "model.safetensors").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def _check_size(size: str) -> dict[str, int]:
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    return SIZES[size]


def tiny_config(vocab_size: int, size: str = "tiny") -> Any:
    """The ``transformers.Qwen2Config`` of a tiny model of ``size`` ("tiny" or "small") for a tokenizer of
    ``vocab_size`` tokens (``len(tokenizer)``), with the tiny tokenizer's special token ids."""
    from transformers import Qwen2Config

    shape = _check_size(size)
    if not isinstance(vocab_size, int) or vocab_size < len(SPECIAL_TOKENS) + len(ADDED_TOKENS):
        raise ValueError(f"vocab_size must be an int >= {len(SPECIAL_TOKENS) + len(ADDED_TOKENS)}, got {vocab_size!r}")
    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=shape["hidden_size"],
        intermediate_size=shape["intermediate_size"],
        num_hidden_layers=shape["num_hidden_layers"],
        num_attention_heads=shape["num_attention_heads"],
        num_key_value_heads=shape["num_key_value_heads"],
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        initializer_range=0.02,
        tie_word_embeddings=True,
        use_cache=True,
        bos_token_id=None,
        eos_token_id=SPECIAL_TOKENS.index(IM_END),
        pad_token_id=SPECIAL_TOKENS.index(PAD_TOKEN),
        dtype="float32",
    )


# ---------------------------------------------------------------- corpus


def _spread(n_total: int, n: int) -> list[int]:
    """``n`` task indices spread evenly over ``range(n_total)``."""
    n = min(n, n_total)
    return [i * n_total // n for i in range(n)] if n > 0 else []


def _record_turn(env: Any, sink: list[dict[str, Any]], env_id: str, episode: int) -> str:
    """The expert's action, after appending the turn (what the agent saw and wrote) to ``sink``."""
    agent = env.agent_selection
    info = env.infos[agent]
    completion = expert_action(env)
    sink.append(
        {
            "env_id": env_id,
            "episode": episode,
            "task_id": info["task_id"],
            "agent": agent,
            "messages": [dict(m) for m in info["messages"]],
            "tools": info["tools"],
            "completion": completion,
        }
    )
    return completion


def expert_turns(
    tasks_per_env: int = DEFAULT_TASKS_PER_ENV,
    env_ids: Sequence[str] | None = None,
    split: str = "train",
    seed: int = CORPUS_SEED,
) -> list[dict[str, Any]]:
    """Every agent turn of scripted-expert episodes, deterministic.

    Plays ``tasks_per_env`` tasks (spread evenly over the split) of each env id (default: the five built-in
    ids) and returns one dict per turn: ``env_id``, ``episode`` (a counter), ``task_id``, ``agent``,
    ``messages`` (the chat messages the agent saw, system prompt first), ``tools`` (its tool schemas) and
    ``completion`` (the expert's text).
    """
    if not isinstance(tasks_per_env, int) or tasks_per_env < 1:
        raise ValueError(f"tasks_per_env must be an int >= 1, got {tasks_per_env!r}")
    turns: list[dict[str, Any]] = []
    episode = 0
    for env_id in env_ids if env_ids is not None else ENV_IDS:
        env = joy_env.make(env_id, split=split, seed=seed)
        for index in _spread(env.num_tasks, tasks_per_env):
            env.reset(options={"task_index": index})
            joy_env.run_expert_episode(env, partial(_record_turn, sink=turns, env_id=env_id, episode=episode))
            episode += 1
        env.close()
    return turns


def _frame_ends(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns that close a conversation (the agent's next turn in the episode does not extend it)."""
    ends = []
    last: dict[tuple[int, str], dict[str, Any]] = {}
    for turn in turns:
        key = (turn["episode"], turn["agent"])
        prev = last.get(key)
        if prev is not None and len(turn["messages"]) <= len(prev["messages"]):
            ends.append(prev)  # a fresh conversation of the same agent: the previous one is complete
        last[key] = turn
    ends.extend(last.values())
    return ends


def _render_corpus(turns: list[dict[str, Any]]) -> list[str]:
    """Each full conversation rendered with :data:`CHAT_TEMPLATE` (no vocabulary needed to render)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=CHAT_TEMPLATE)
    texts = []
    for turn in _frame_ends(turns):
        messages = turn["messages"] + [{"role": "assistant", "content": turn["completion"]}]
        texts.append(renderer.apply_chat_template(messages, tools=turn["tools"] or None, tokenize=False))
    return texts


# ---------------------------------------------------------------- tokenizer


def _segments(texts: Iterable[str]) -> Iterator[str]:
    """The text between the special and added tokens: the encoder cuts those out before the BPE sees the
    rest, so the trainer sees exactly what it will have to encode."""
    marker = re.compile("|".join(re.escape(t) for t in (*SPECIAL_TOKENS, *ADDED_TOKENS)))
    for text in texts:
        yield from (piece for piece in marker.split(text) if piece)


def _train_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:
    """Byte-level BPE trained on ``texts``, wrapped as a ``PreTrainedTokenizerFast``.

    The normaliser and pre-tokeniser are Qwen2's (NFC; split by :data:`PRETOKENIZE_REGEX`; byte level), so
    the tokenizer encodes the same whether it is loaded from ``tokenizer.json`` as is or rebuilt by
    ``transformers``' ``Qwen2Tokenizer`` (which ``AutoTokenizer`` picks for a Qwen2 model directory).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*SPECIAL_TOKENS, *ADDED_TOKENS],  # ids 0 to 10
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_segments(texts), trainer=trainer)
    # the trainer registers all its tokens as special; the protocol markers are plain added tokens (decoding
    # with skip_special_tokens keeps them), as in Qwen2.5
    state = json.loads(tok.to_str())
    for added in state["added_tokens"]:
        added["special"] = added["content"] in SPECIAL_TOKENS
        added["normalized"] = False
    tok = Tokenizer.from_str(json.dumps(state))
    for i, t in enumerate((*SPECIAL_TOKENS, *ADDED_TOKENS)):
        if tok.token_to_id(t) != i:
            raise RuntimeError(f"tokenizer build: {t!r} got id {tok.token_to_id(t)}, expected {i}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        padding_side="left",
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


# ---------------------------------------------------------------- build and cache


def env_fingerprint() -> str:
    """A digest of the ``joy_env`` package's source: the tokenizer corpus is the env's expert text, so a
    build made before the env changed is stale and is rebuilt (:func:`build_tiny_model`)."""
    root = pathlib.Path(joy_env.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _is_complete(path: pathlib.Path) -> dict[str, Any] | None:
    """The build info of a complete, current build in ``path`` (this build version, the installed env's
    text), else None."""
    try:
        info = json.loads((path / "build_info.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("version") != BUILD_VERSION:
        return None
    if info.get("env_fingerprint") != env_fingerprint():
        return None
    if not all((path / name).is_file() for name in info.get("files", [])):
        return None
    return info


def _check_matches(path: pathlib.Path, info: dict[str, Any], wanted: dict[str, Any]) -> None:
    diff = {k: (info.get(k), v) for k, v in wanted.items() if info.get(k) != v}
    if diff:
        seen = ", ".join(f"{k}={a!r} (asked {b!r})" for k, (a, b) in diff.items())
        raise ValueError(
            f"{path} holds a tiny model built with {seen}; pass force=True to rebuild it or choose another out_dir"
        )


def _publish(tmp: pathlib.Path, out: pathlib.Path, force: bool, wanted: dict[str, Any]) -> pathlib.Path:
    """Move the finished build ``tmp`` to ``out`` in one rename. Without ``force`` an existing complete build
    at ``out`` (a concurrent builder won the race) is kept and ``tmp`` removed. With ``force``, or when it is
    the build of another version, a previous build at ``out`` is swapped out and deleted."""
    if (out / "build_info.json").is_file() and (force or _is_complete(out) is None):
        trash = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        try:
            os.replace(out, trash / "old")
        except FileNotFoundError:  # another builder moved it first
            pass
        try:
            os.replace(tmp, out)
        except OSError:  # a concurrent forced build got there first: it is just as fresh
            shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(trash, ignore_errors=True)
        return out
    try:
        os.replace(tmp, out)  # atomic; replaces an empty directory, fails on a non-empty one
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        info = _is_complete(out)
        if info is not None:
            _check_matches(out, info, wanted)
        else:
            raise RuntimeError(
                f"cannot write the tiny model to {out}: it exists and is not a complete build (not empty, no valid "
                "build_info.json); remove it or choose another out_dir"
            ) from None
    return out


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_tiny_model(
    out_dir: str | os.PathLike | None = None,
    seed: int = 0,
    force: bool = False,
    size: str = "tiny",
    corpus_tasks: int = DEFAULT_TASKS_PER_ENV,
) -> pathlib.Path:
    """Build (or find in the cache) the embedded tiny model and return its directory.

    ``out_dir``: where the model lives (default ``default_cache_dir() / f"tiny-{size}-seed{seed}-v1"``, with
    ``-c{corpus_tasks}`` appended when ``corpus_tasks`` is not the default). ``seed``: weight initialisation.
    ``force``: rebuild even if a complete build is there. ``size``: "tiny" (about 1.3 M parameters) or
    "small" (about 21 M). ``corpus_tasks``: expert tasks per env id for the tokenizer corpus (fewer is
    faster). The directory loads with ``AutoTokenizer`` / ``AutoModelForCausalLM.from_pretrained``.
    """
    shape = _check_size(size)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if not isinstance(corpus_tasks, int) or corpus_tasks < 1:
        raise ValueError(f"corpus_tasks must be an int >= 1, got {corpus_tasks!r}")
    if out_dir is None:
        name = f"tiny-{size}-seed{seed}-v{BUILD_VERSION}"
        if corpus_tasks != DEFAULT_TASKS_PER_ENV:
            name += f"-c{corpus_tasks}"
        out = default_cache_dir() / name
    else:
        out = pathlib.Path(out_dir).expanduser()
    out = out.absolute()
    wanted = {"size": size, "seed": seed, "corpus_tasks": corpus_tasks}
    if not force:
        info = _is_complete(out)
        if info is not None:
            _check_matches(out, info, wanted)
            return out
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"out_dir {out} exists and is not a directory; choose another out_dir")
    if out.is_dir() and any(out.iterdir()) and not (out / "build_info.json").is_file():
        raise RuntimeError(
            f"out_dir {out} is not empty and holds no tiny model build (no build_info.json); refusing to "
            "overwrite it (remove it or choose another out_dir)"
        )

    out.parent.mkdir(parents=True, exist_ok=True)
    # one builder at a time: a second process waits, then finds the first one's build (and never swaps out
    # a build another process is publishing)
    with cache_lock(out.parent / f".{out.name}.lock", f"waiting for another process building {out}"):
        if not force:  # another process may have built it while this one waited
            info = _is_complete(out)
            if info is not None:
                _check_matches(out, info, wanted)
                return out
        return _build(out, shape, size, seed, corpus_tasks, force, wanted)


def _build(
    out: pathlib.Path,
    shape: dict[str, int],
    size: str,
    seed: int,
    corpus_tasks: int,
    force: bool,
    wanted: dict[str, Any],
) -> pathlib.Path:
    """Build the tiny model in a private temporary directory, then publish it at ``out`` (see ``_publish``)."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    logger.info("building the %s tiny model (seed %d) into %s", size, seed, out)
    start = time.perf_counter()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        fingerprint = env_fingerprint()
        turns = expert_turns(corpus_tasks)
        texts = _render_corpus(turns)
        tokenizer = _train_tokenizer(texts, shape["bpe_vocab"])
        tokenizer.save_pretrained(tmp)

        config = tiny_config(len(tokenizer), size)
        rng_state = torch.random.get_rng_state()
        try:
            torch.manual_seed(seed)
            model = Qwen2ForCausalLM(config).to(torch.float32)
        finally:
            torch.random.set_rng_state(rng_state)  # leave the caller's RNG stream untouched
        model.generation_config = GenerationConfig(
            eos_token_id=[tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids("</answer>")],
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=None,
        )
        model.save_pretrained(tmp)

        files = sorted(p.name for p in tmp.iterdir() if p.is_file())
        info = {
            "version": BUILD_VERSION,
            "env_fingerprint": fingerprint,
            **wanted,
            "vocab_size": len(tokenizer),
            "n_params": sum(p.numel() for p in model.parameters()),
            "corpus_conversations": len(texts),
            "corpus_chars": sum(map(len, texts)),
            "build_s": round(time.perf_counter() - start, 2),
            "files": files,
            "sha256": {name: _sha256(tmp / name) for name in files if name.endswith((".json", ".safetensors"))},
        }
        (tmp / "build_info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        return _publish(tmp, out, force, wanted)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
