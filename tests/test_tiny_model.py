"""The embedded tiny model: build, cache, determinism, tokenizer and chat template, loading and generation."""

import hashlib
import json
import os
import shutil
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from joy_agents import tiny  # noqa: E402

CORPUS_TASKS = 40  # expert tasks per env id: a smaller corpus than the default keeps builds at seconds


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def loaded(tiny_dir):
    tok = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir)
    return tok, model


@pytest.fixture(scope="session")
def turns():
    """Expert turns on validation tasks: text the tokenizer never saw (its corpus is train only)."""
    return tiny.expert_turns(4, split="validation")


def test_loads_through_auto_classes(tiny_dir, loaded):
    tok, model = loaded
    assert isinstance(model, transformers.Qwen2ForCausalLM)
    assert model.dtype == torch.float32
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.config.vocab_size == len(tok) <= 4096  # 4096 with the default corpus; less with a small one
    assert tok.bos_token is None and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.padding_side == "left"
    assert model.generation_config.eos_token_id == [tok.convert_tokens_to_ids("<|im_end|>"), 6]
    assert model.generation_config.pad_token_id == tok.pad_token_id == 0
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 < n < 3_000_000
    info = json.loads((tiny_dir / "build_info.json").read_text())
    assert info["n_params"] == n and info["corpus_tasks"] == CORPUS_TASKS and info["size"] == "tiny"


def test_special_and_added_tokens_are_single_ids(loaded):
    tok, _ = loaded
    for i, t in enumerate(tiny.SPECIAL_TOKENS + tiny.ADDED_TOKENS):
        assert tok(t, add_special_tokens=False).input_ids == [i]
    ids = tok('x<tool_call>{"a": 1}</tool_call><answer>9</answer><|im_end|>', add_special_tokens=False).input_ids
    nine = tok("9", add_special_tokens=False).input_ids
    assert ids[1] == 3 and 4 in ids and ids[-4:] == [5, *nine, 6, 2]
    assert tok("hi").input_ids == tok("hi", add_special_tokens=False).input_ids  # no BOS / EOS added
    # protocol markers survive skip_special_tokens, the chat markers do not
    assert tok.decode([1, 5, 6, 2], skip_special_tokens=True) == "<answer></answer>"


def test_tokenizer_json_and_auto_tokenizer_agree(tiny_dir, loaded, turns):
    """AutoTokenizer rebuilds a Qwen2Tokenizer from vocab and merges; it must encode like tokenizer.json."""
    from tokenizers import Tokenizer

    tok, _ = loaded
    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    samples = [t["completion"] for t in turns[:40]] + [m["content"] for t in turns[:40] for m in t["messages"]]
    samples += ["Héllo  wörld\n\n\t 12345.67 $3,000 café ünïcode\r\n", " leading space", "trailing space "]
    for s in samples:
        ids = tok(s, add_special_tokens=False).input_ids
        assert ids == raw.encode(s, add_special_tokens=False).ids
        assert tok.decode(ids) == s


def test_chat_template_renders_env_messages_with_compact_tools(loaded, turns):
    tok, _ = loaded
    ecommerce = next(t for t in turns if t["agent"] == "ecommerce" and len(t["messages"]) > 2)
    assert any(m["role"] == "tool" and m.get("name") for m in ecommerce["messages"])
    text = tok.apply_chat_template(
        ecommerce["messages"], tools=ecommerce["tools"], add_generation_prompt=True, tokenize=False
    )
    system = ecommerce["messages"][0]["content"]
    assert text.startswith("<|im_start|>system\n" + system + "\n\n# Tools\n")
    assert "\n- get_order_details(order_id: string)\n" in text
    assert "- search_products(query?: string, category?: string" in text
    assert '"properties"' not in text and "description" not in text  # no JSON schemas
    assert "<|im_start|>user\n<tool_response>\n{" in text and "}\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    for m in ecommerce["messages"][1:]:
        assert m["content"] in text
    # no tools: no tool section; consecutive tool results share one user turn
    plain = tok.apply_chat_template(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": '<tool_call>{"name": "f", "arguments": {}}</tool_call>'},
            {"role": "tool", "name": "f", "content": "1"},
            {"role": "tool", "name": "f", "content": "2"},
        ],
        tokenize=False,
    )
    assert plain == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>{"name": "f", "arguments": {}}</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    )
    assert tok.chat_template == tiny.CHAT_TEMPLATE


def test_prompt_plus_completion_ids_round_trip(loaded, turns):
    tok, _ = loaded
    assert len(turns) >= 50 and {t["agent"] for t in turns} == {"master", "qa", "ecommerce", "general", "math"}
    for t in turns:
        prompt = tok.apply_chat_template(t["messages"], tools=t["tools"], add_generation_prompt=True, return_dict=False)
        completion = tok(t["completion"] + "<|im_end|>", add_special_tokens=False).input_ids
        full = tok.apply_chat_template(
            t["messages"] + [{"role": "assistant", "content": t["completion"]}], tools=t["tools"], return_dict=False
        )
        assert full[: len(prompt) + len(completion)] == prompt + completion, t["task_id"]
        assert full[len(prompt) + len(completion) :] == tok("\n", add_special_tokens=False).input_ids
        assert tok.decode(completion) == t["completion"] + "<|im_end|>"
    extra = [" leading space", "<think>plan</think><answer>42</answer>", "trailing  ", "caf\u00e9 {}\n\n\tok"]
    for text in extra:
        prompt = tok.apply_chat_template(turns[0]["messages"], add_generation_prompt=True, return_dict=False)
        completion = tok(text + "<|im_end|>", add_special_tokens=False).input_ids
        full = tok.apply_chat_template(
            turns[0]["messages"] + [{"role": "assistant", "content": text}], return_dict=False
        )
        assert full[: len(prompt) + len(completion)] == prompt + completion, text
    # the assistant mask covers exactly each assistant message and its <|im_end|>
    t = max(turns, key=lambda t: len(t["messages"]))
    conversation = t["messages"] + [{"role": "assistant", "content": t["completion"]}]
    out = tok.apply_chat_template(conversation, tools=t["tools"], return_assistant_tokens_mask=True)
    masked = [i for i, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    expected = [i for m in conversation if m["role"] == "assistant" for i in tok(m["content"] + "<|im_end|>").input_ids]
    assert masked == expected and sum(m["role"] == "assistant" for m in conversation) > 1


def test_same_seed_same_files_other_seed_other_weights(tmp_path, tiny_dir):
    again = tiny.build_tiny_model(tmp_path / "again", corpus_tasks=CORPUS_TASKS)
    for name in ("tokenizer.json", "model.safetensors", "config.json", "generation_config.json"):
        assert _sha(again / name) == _sha(tiny_dir / name), name
    # the tokenizer does not depend on the seed, the weights do
    rng = torch.random.get_rng_state()
    other = tiny.build_tiny_model(tmp_path / "seed1", seed=1, corpus_tasks=CORPUS_TASKS)
    assert torch.equal(torch.random.get_rng_state(), rng)  # the caller's RNG is left alone
    assert _sha(other / "tokenizer.json") == _sha(tiny_dir / "tokenizer.json")
    assert _sha(other / "model.safetensors") != _sha(tiny_dir / "model.safetensors")


def test_cache_is_reused_and_force_rebuilds(tmp_path, monkeypatch, tiny_dir):
    monkeypatch.setenv("JOY_CACHE_DIR", str(tmp_path / "cache"))
    assert tiny.default_cache_dir() == tmp_path / "cache"
    # a complete build found in place is returned without work
    info = tiny_dir / "build_info.json"
    mtime = info.stat().st_mtime_ns
    start = time.perf_counter()
    assert tiny.build_tiny_model(tiny_dir, corpus_tasks=CORPUS_TASKS) == tiny_dir
    assert time.perf_counter() - start < 0.5
    assert info.stat().st_mtime_ns == mtime
    # asking for other parameters than the cached build holds is an error that names the fix
    with pytest.raises(ValueError, match="force=True"):
        tiny.build_tiny_model(tiny_dir, seed=3, corpus_tasks=CORPUS_TASKS)
    # the default directory lives under $JOY_CACHE_DIR; force rebuilds it in place, leaving no temp dirs
    path = tiny.build_tiny_model(corpus_tasks=CORPUS_TASKS)
    assert path == tmp_path / "cache" / f"tiny-tiny-seed0-v{tiny.BUILD_VERSION}-c{CORPUS_TASKS}"
    first = (path / "build_info.json").stat().st_mtime_ns
    assert tiny.build_tiny_model(corpus_tasks=CORPUS_TASKS) == path
    assert (path / "build_info.json").stat().st_mtime_ns == first
    assert tiny.build_tiny_model(corpus_tasks=CORPUS_TASKS, force=True) == path
    assert (path / "build_info.json").stat().st_mtime_ns != first
    assert _sha(path / "model.safetensors") == _sha(tiny_dir / "model.safetensors")
    assert sorted(p.name for p in path.parent.iterdir()) == [f".{path.name}.lock", path.name]  # no temp dirs


def test_publish_race_keeps_the_winner(tmp_path, tiny_dir):
    """A builder that loses the rename race discards its own build and uses the winner's."""
    wanted = {"size": "tiny", "seed": 0, "corpus_tasks": CORPUS_TASKS}
    out = tmp_path / "model"
    shutil.copytree(tiny_dir, out)  # the winner
    winner = _sha(out / "build_info.json")
    loser = tmp_path / ".model.tmp-x"
    shutil.copytree(tiny_dir, loser)
    (loser / "marker").write_text("loser")
    assert tiny._publish(loser, out, force=False, wanted=wanted) == out
    assert not loser.exists() and not (out / "marker").exists() and _sha(out / "build_info.json") == winner


def test_build_of_another_version_is_replaced(tmp_path, tiny_dir):
    out = tmp_path / "model"
    out.mkdir()
    (out / "build_info.json").write_text(json.dumps({"version": 0, "files": []}))
    (out / "model.safetensors").write_text("old")
    assert tiny.build_tiny_model(out, corpus_tasks=CORPUS_TASKS) == out
    assert json.loads((out / "build_info.json").read_text())["version"] == tiny.BUILD_VERSION
    assert _sha(out / "model.safetensors") == _sha(tiny_dir / "model.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock", "model"]  # no temporary directory


def test_build_made_before_the_env_changed_is_rebuilt(tmp_path, tiny_dir, monkeypatch):
    out = tmp_path / "model"
    shutil.copytree(tiny_dir, out)
    info = json.loads((out / "build_info.json").read_text())
    assert info["env_fingerprint"] == tiny.env_fingerprint()
    assert tiny.build_tiny_model(out, corpus_tasks=CORPUS_TASKS) == out
    assert json.loads((out / "build_info.json").read_text()) == info  # current: reused as is
    monkeypatch.setattr(tiny, "env_fingerprint", lambda: "changed-env")
    assert tiny.build_tiny_model(out, corpus_tasks=CORPUS_TASKS) == out
    assert json.loads((out / "build_info.json").read_text())["env_fingerprint"] == "changed-env"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock", "model"]  # no temporary directory


def test_refuses_foreign_directories_and_bad_arguments(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(RuntimeError, match="not empty"):
        tiny.build_tiny_model(foreign, corpus_tasks=CORPUS_TASKS, force=True)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="size must be one of"):
        tiny.build_tiny_model(tmp_path / "x", size="huge")
    with pytest.raises(ValueError, match="corpus_tasks"):
        tiny.build_tiny_model(tmp_path / "x", corpus_tasks=0)
    assert not (tmp_path / "x").exists()


def test_tiny_config_sizes():
    cfg = tiny.tiny_config(4096, "tiny")
    assert isinstance(cfg, transformers.Qwen2Config)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (128, 4, 4, 2)
    assert cfg.max_position_embeddings == 4096 and cfg.tie_word_embeddings and cfg.eos_token_id == 2
    with torch.device("meta"):
        small = transformers.Qwen2ForCausalLM(tiny.tiny_config(8192, "small"))
    assert 15_000_000 < sum(p.numel() for p in small.parameters()) < 25_000_000
    with pytest.raises(ValueError, match="vocab_size"):
        tiny.tiny_config(5, "tiny")


def test_forward_and_generate(loaded, turns):
    tok, model = loaded
    batch = [turns[0], turns[-1]]
    enc = tok.apply_chat_template(
        [t["messages"] for t in batch],
        tools=batch[0]["tools"],
        add_generation_prompt=True,
        padding=True,
        return_tensors="pt",
    )
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert mask[:, -1].all() and (ids[mask == 0] == tok.pad_token_id).all()  # left padding
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    assert logits.shape == (*ids.shape, len(tok)) and torch.isfinite(logits).all()
    torch.manual_seed(0)
    out = model.generate(**enc, max_new_tokens=8, do_sample=True, temperature=1.0, top_p=0.9)
    assert out.shape[0] == 2 and ids.shape[1] < out.shape[1] <= ids.shape[1] + 8
    assert torch.equal(out[:, : ids.shape[1]], ids)
    greedy = model.generate(**enc, max_new_tokens=8, do_sample=False)
    again = model.generate(**enc, max_new_tokens=8, do_sample=False)
    assert torch.equal(greedy, again)
    assert isinstance(tok.decode(out[0, ids.shape[1] :]), str)


def test_import_builds_nothing():
    import subprocess
    import sys

    code = "import sys, joy_agents.tiny; print('torch' in sys.modules, 'transformers' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert res.stdout.split() == ["False", "False"]
