"""The custom-domain API, exercised with the library example (no built-in domain involved)."""

import pytest
from pettingzoo.test import api_test, seed_test

import joy_env
from joy_env.core import Domain, Tool
from joy_env.expert import expert_action, run_expert_episode
from joy_env.protocol import format_turn


def test_library_expert_solves_every_task(library_env_id):
    for split in joy_env.SPLITS:
        env = joy_env.make(library_env_id, split=split)
        for i in range(env.num_tasks):
            env.reset(options={"task_index": i})
            result = run_expert_episode(env)
            assert result["success"], (split, i, result["accuracy"])
            assert result["R"] == pytest.approx(1.0 + env.reward_config.format_weight)


def test_library_api_and_seed(library_env_id):
    api_test(joy_env.make(library_env_id, max_cycles=12), num_cycles=200)
    seed_test(lambda: joy_env.make(library_env_id, max_cycles=12), num_cycles=100)


def test_wrong_write_fails_the_database_check(library_env_id):
    env = joy_env.make(library_env_id, split="test")
    env.reset(options={"task_index": 0})
    task = env.task
    sub = task.route[0]
    member = sub.turns[1][0]["arguments"]["member_id"]
    other = "B101" if sub.turns[1][0]["arguments"]["book_id"] != "B101" else "B102"
    wrong = {"name": "borrow_book", "arguments": {"member_id": member, "book_id": other}}
    env.step(expert_action(env))  # master calls the librarian
    env.step(format_turn([sub.turns[0][0], wrong]))  # borrows the wrong book (maybe refused)
    env.step(format_turn([sub.turns[1][0]]))  # then the right one
    env.step(expert_action(env))  # librarian answers
    env.step(expert_action(env))  # master answers
    result = env.episode_breakdown
    assert result["accuracy"]["calls"] == 1.0  # the required call was made ...
    refused = any(n["tool_errors"] for n in result["nodes"])
    assert result["accuracy"]["db"] == (1.0 if refused else 0.0)  # ... but an extra loan changes the db
    assert result["R_E"] > 0


def test_snapshot_restore_replays_identically_with_writes(library_env_id):
    env = joy_env.make(library_env_id, split="train")
    env.reset(seed=3)
    env.step(expert_action(env))
    env.step(expert_action(env))  # search
    snap = env.snapshot()
    first = []
    for agent in env.agent_iter():
        obs, rew, term, trunc, info = env.last()
        first.append((agent, obs["text"], rew, info.get("episode", {}).get("R")))
        env.step(None if term or trunc else expert_action(env))
    env.restore(snap)
    second = []
    for agent in env.agent_iter():
        obs, rew, term, trunc, info = env.last()
        second.append((agent, obs["text"], rew, info.get("episode", {}).get("R")))
        env.step(None if term or trunc else expert_action(env))
    assert first == second and first[-1][3] is not None
    # the borrow happened twice from the same snapshot: the db was restored in between
    assert env.episode_breakdown["accuracy"]["db"] == 1.0
    other = env.clone()
    assert other.snapshot().db_images == env.snapshot().db_images


def test_register_errors():
    tool = Tool("t", "d", {"type": "object", "properties": {}}, lambda ctx: 1)
    with pytest.raises(ValueError, match="already registered"):
        joy_env.register_env(joy_env.EnvSpec("joy/math-v0", (Domain("x", (tool,)),), lambda s, d: None))
    with pytest.raises(ValueError, match="distinct sub-agents"):
        joy_env.register_env(joy_env.EnvSpec("a/b-v0", (Domain("master", (tool,)),), lambda s, d: None))
    with pytest.raises(ValueError, match="duplicate tool"):
        joy_env.register_env(joy_env.EnvSpec("a/c-v0", (Domain("x", (tool, tool)),), lambda s, d: None))


def test_make_errors_list_valid_choices(library_env_id):
    with pytest.raises(ValueError, match="valid ids: joy/ecommerce-v0"):
        joy_env.make("joy/nope-v0")
    with pytest.raises(TypeError, match="valid arguments: split, seed, max_cycles"):
        joy_env.make(library_env_id, colour="red")
    with pytest.raises(ValueError, match="split must be one of"):
        joy_env.make(library_env_id, split="dev")
    with pytest.raises(ValueError, match="max_cycles"):
        joy_env.make(library_env_id, max_cycles=0)
    env = joy_env.make(library_env_id)
    with pytest.raises(ValueError, match="task_index must be"):
        env.reset(options={"task_index": 10**6})
    with pytest.raises(ValueError, match="not of this env's split"):
        env.reset(options={"task_id": "library/test/0"})


def test_reset_after_writes_restores_the_pristine_database(library_env_id):
    from joy_env import database

    env = joy_env.make(library_env_id, split="train")
    pristine = database.full_dump(env.world.pristine["librarian"])
    for i in range(5):
        env.reset(options={"task_index": i})
        run_expert_episode(env)
        assert database.full_dump(env._dbs["librarian"]) != pristine  # the episode lent a book
        env.reset(options={"task_index": i})
        assert database.full_dump(env._dbs["librarian"]) == pristine


def test_task_source_base_checks_split_and_index_for_every_source(library_env_id):
    import numpy as np

    from joy_env.domains import bfcl, ecommerce, general, math, mixed, qa

    seen = []

    class Counting(joy_env.TaskSourceBase):
        sizes = {"train": 3, "validation": 1, "test": 1}

        def build_task(self, split, index):
            seen.append((split, index, type(index)))
            return joy_env.make(library_env_id, split=split).get_task(index)

    src = Counting()
    assert src.size("train") == 3 and src.task("train", np.int64(2)).task_id.endswith("/train/2")
    assert seen == [("train", 2, int)]  # build_task sees a plain int
    sources = [src, general.task_source(0), qa.task_source(0), math.task_source(0)]
    db = joy_env.make("joy/mixed-v0").world.pristine["ecommerce"]
    sources += [ecommerce.task_source(0, db), mixed.task_source(0, db)]
    assert all(isinstance(s, joy_env.TaskSourceBase) for s in sources)
    assert issubclass(bfcl.BFCLTaskSource, joy_env.TaskSourceBase)
    for s in sources:
        with pytest.raises(ValueError, match="unknown split 'dev'"):
            s.size("dev")
        with pytest.raises(ValueError, match="unknown split"):
            s.task("dev", 0)
        n = s.size("test")
        for bad in (-1, n, True, 1.0, "0"):
            with pytest.raises(ValueError, match=rf"out of range for split 'test': expected 0 <= index < {n}"):
                s.task("test", bad)
    assert len(seen) == 1  # no rejected call reached build_task


def test_register_env_loader_builds_the_spec_once_on_first_use(library_env_id, monkeypatch):
    import dataclasses

    from joy_env import registry
    from joy_env.registry import get_spec, register_env_loader

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the ids below end with the test
    calls = []

    def loader():
        calls.append(1)
        return dataclasses.replace(get_spec(library_env_id), env_id="test/lazy-library-v0")

    register_env_loader("test/lazy-library-v0", loader, overwrite=True)
    assert "test/lazy-library-v0" in joy_env.list_envs() and calls == []
    env = joy_env.make("test/lazy-library-v0", split="test")
    env.reset(options={"task_index": 0})
    assert run_expert_episode(env)["success"]
    joy_env.make("test/lazy-library-v0")
    assert calls == [1]
    register_env_loader("test/wrong-id-v0", lambda: get_spec(library_env_id), overwrite=True)
    with pytest.raises(TypeError, match="must return an EnvSpec with that id, got 'example/library-v0'"):
        joy_env.make("test/wrong-id-v0")
    with pytest.raises(ValueError, match="already registered"):
        register_env_loader("test/lazy-library-v0", loader)


def test_builtin_ids_are_registered_like_custom_ones_and_cannot_be_replaced():
    import subprocess
    import sys

    tool = Tool("t", "d", {"type": "object", "properties": {}}, lambda ctx: 1)
    spec = joy_env.EnvSpec("joy/math-v0", (Domain("x", (tool,)),), lambda s, d: None)
    with pytest.raises(ValueError, match="built-in ids cannot be replaced"):
        joy_env.register_env(spec, overwrite=True)
    from joy_env.registry import register_env_loader

    with pytest.raises(ValueError, match="built-in ids cannot be replaced"):
        register_env_loader("joy/mixed-v0", lambda: spec, overwrite=True)
    # importing joy_env registers the built-in ids without importing their domains
    code = (
        "import sys, joy_env; from joy_env import registry; "
        "assert joy_env.list_envs()[:5] == list(joy_env.builtin.ENV_IDS), joy_env.list_envs(); "
        "assert not [m for m in sys.modules if m.startswith('joy_env.domains')]; "
        "assert callable(registry._REGISTRY['joy/qa-v0']); "
        "assert registry.get_spec('joy/qa-v0').agents[0] == 'master'; "
        "assert isinstance(registry._REGISTRY['joy/qa-v0'], joy_env.EnvSpec)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
