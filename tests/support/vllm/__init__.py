"""A stand-in for the part of vLLM's offline API that ``joy_agents.sampling.vllm`` uses (as in vllm 0.33:
``LLM(model, **options).generate(token prompts, sampling params, lora_request=...)``, ``SamplingParams``,
``vllm.lora.request.LoRARequest``), decoding with transformers and PEFT on the CPU, one prompt at a time.

It behaves as vLLM documents: a LoRA request is loaded from its folder the first time its id is seen; a row stops
at a stop token id or the model's EOS (kept in ``token_ids``) or when its text holds a stop string; ``logprobs=0``
returns the sampled token's raw log-prob per step. It records what it was asked (``LLM.instances``,
``llm.calls``, ``llm.loaded``) so tests can check the engine's requests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__version__ = "0.33.0+stand-in"


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = 16
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    logprobs: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.n > 1 and self.temperature == 0:  # as vLLM's own
            raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")
        if self.seed is not None:  # vLLM's CPU sampler: "CPU Generator does not use offset"
            raise RuntimeError("per-request seeds fail on vLLM's CPU build; the engine draws from its own seed")


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)


class LLM:
    instances: list[LLM] = []

    def __init__(self, model: str, *, tokenizer: str | None = None, dtype: str = "auto", seed: int = 0, **options: Any):
        from peft import PeftModel  # noqa: F401  (what a LoRA-enabled engine needs)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_path, self.options = model, dict(options, dtype=dtype, seed=seed)
        torch_dtype = torch.float32 if dtype == "auto" else getattr(torch, dtype)
        self.base = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer or model)
        self.peft: Any = None
        self.loaded: list[tuple[int, str]] = []
        self.calls: list[dict[str, Any]] = []
        self.generator = torch.Generator().manual_seed(seed)
        LLM.instances.append(self)

    def _activate(self, lora: Any) -> Any:
        from peft import PeftModel

        if lora is None:
            return self.base
        name = str(lora.lora_int_id)
        if self.peft is None:
            self.peft = PeftModel.from_pretrained(self.base, lora.lora_path, adapter_name=name).eval()
            self.loaded.append((lora.lora_int_id, lora.lora_path))
        elif name not in self.peft.peft_config:
            self.peft.load_adapter(lora.lora_path, adapter_name=name)
            self.loaded.append((lora.lora_int_id, lora.lora_path))
        self.peft.set_adapter(name)
        return self.peft

    def generate(
        self, prompts: Any, sampling_params: Any = None, *, use_tqdm: Any = True, lora_request: Any = None, **_: Any
    ) -> list[RequestOutput]:
        prompts = prompts if isinstance(prompts, list) else [prompts]
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        loras = lora_request if isinstance(lora_request, list) else [lora_request] * len(prompts)
        assert len(params) == len(prompts) == len(loras), "prompts, params and lora requests must pair up"
        self.calls.append({"prompts": len(prompts), "loras": [None if r is None else r.lora_int_id for r in loras]})
        out = []
        for i, (prompt, p, lora) in enumerate(zip(prompts, params, loras, strict=True)):
            ids = list(prompt["prompt_token_ids"])
            model = self._activate(lora)
            completions = [self._complete(model, ids, p, k) for k in range(p.n)]
            out.append(RequestOutput(str(i), ids, completions))
        return out

    def _complete(self, model: Any, ids: list[int], p: SamplingParams, index: int) -> CompletionOutput:
        stops = [p.stop] if isinstance(p.stop, str) else list(p.stop or [])
        eos = self.base.generation_config.eos_token_id
        eos_ids = set([eos] if isinstance(eos, int) else (eos or []))
        stop_ids = set(p.stop_token_ids or []) | eos_ids
        tokens: list[int] = []
        logprobs: list[dict[int, Logprob]] = []
        reason, stop_reason = "length", None
        cache = None
        feed = torch.tensor([ids])
        with torch.no_grad():
            while len(tokens) < p.max_tokens:
                result = model(input_ids=feed, past_key_values=cache, use_cache=True)
                cache = result.past_key_values
                logits = result.logits[0, -1].float()
                raw = torch.log_softmax(logits, -1)
                if p.temperature == 0:
                    tok = int(logits.argmax())
                else:
                    probs = torch.softmax(logits / p.temperature, -1)
                    tok = int(torch.multinomial(probs, 1, generator=self.generator))
                tokens.append(tok)
                if p.logprobs is not None:
                    logprobs.append({tok: Logprob(float(raw[tok]))})
                feed = torch.tensor([[tok]])
                if tok in stop_ids:
                    reason, stop_reason = "stop", (tok if tok not in eos_ids else None)
                    break
                text = self.tokenizer.decode(tokens, skip_special_tokens=p.skip_special_tokens)
                hit = next((s for s in stops if s in text), None)
                if hit is not None:
                    reason, stop_reason = "stop", hit
                    break
        text = self.tokenizer.decode(tokens, skip_special_tokens=p.skip_special_tokens)
        if isinstance(stop_reason, str) and not p.include_stop_str_in_output:
            text = text[: text.index(stop_reason)]
        return CompletionOutput(
            index, text, tokens, None, logprobs if p.logprobs is not None else None, reason, stop_reason
        )
