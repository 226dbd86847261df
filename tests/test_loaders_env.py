"""The real-data loaders through ``joy_env.make``: BFCL files and GSM8K jsonl."""

import os

import pytest

import joy_env
from joy_env.expert import run_expert_episode
from joy_env.protocol import format_turn

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def test_bfcl_env_expert_and_tools():
    train = joy_env.make("joy/general-v0", source="bfcl", path=os.path.join(DATA, "bfcl"))
    splits = [s for s in joy_env.SPLITS if train.world.tasks.size(s) > 0]
    assert "train" in splits and len(splits) >= 2
    for split in splits:
        _check_bfcl_split(joy_env.make("joy/general-v0", source="bfcl", path=os.path.join(DATA, "bfcl"), split=split))


def _check_bfcl_split(env):
    for i in range(env.num_tasks):
        env.reset(options={"task_index": i})
        task = env.task
        assert task.meta["source"] == "bfcl"
        env.step(format_turn([{"name": "call_agent", "arguments": {"agent": "general", "query": task.route[0].query}}]))
        names = {t["function"]["name"] for t in env.infos["general"]["tools"]}
        assert names == {s["function"]["name"] if "function" in s else s["name"] for s in task.tools["general"]}
        env.reset(options={"task_index": i})
        result = run_expert_episode(env)
        assert result["success"], (task.task_id, result["accuracy"])


def test_bfcl_extra_call_fails_strict_matching():
    env = joy_env.make("joy/general-v0", source="bfcl", path=os.path.join(DATA, "bfcl"), split="train")
    env.reset(options={"task_index": 0})
    gold = env.task.route[0]
    env.step(format_turn([{"name": "call_agent", "arguments": {"agent": "general", "query": gold.query}}]))
    env.step(format_turn(list(gold.turns[0]) + [gold.turns[0][0]]))  # the gold calls plus a duplicate
    env.step(format_turn(answer="done"))
    env.step(format_turn(answer="done"))
    assert env.episode_breakdown["accuracy"]["calls"] < 1


def test_gsm8k_env_expert():
    path = os.path.join(DATA, "gsm8k_sample.jsonl")
    solved = 0
    for split in joy_env.SPLITS:
        env = joy_env.make("joy/math-v0", source="gsm8k", path=path, split=split)
        for i in range(env.num_tasks):
            env.reset(options={"task_index": i})
            assert run_expert_episode(env)["success"]
            solved += 1
    assert solved == sum(1 for line in open(path) if line.strip())


def test_loader_argument_errors():
    with pytest.raises(ValueError, match="gsm8k"):
        joy_env.make("joy/math-v0", source="gsm8k")
    with pytest.raises(ValueError, match="source must be"):
        joy_env.make("joy/math-v0", source="svamp")
    with pytest.raises(ValueError, match="only apply to source='bfcl'"):
        joy_env.make("joy/general-v0", categories=["simple"])
    with pytest.raises(TypeError, match="valid arguments"):
        joy_env.make("joy/qa-v0", source="gsm8k")
