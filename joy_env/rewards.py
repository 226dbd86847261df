"""The reward module: R = R_A + R_F - R_E, and the public scoring functions.

=============  ==================================================================================
Term           Meaning
=============  ==================================================================================
``R_A``        accuracy in [0, 1] (times ``accuracy_weight``): the product of the task's checks --
               route (every gold sub-agent was called), required tool calls of each sub-agent
               (:func:`score_calls`), final database equal to the gold one, and the master's final
               answer (:func:`score_answer`). An episode that ends without a final answer has R_A = 0.
               tau2-bench tasks (answer type ``tau2``) have the checks of their reward basis
               instead: the database, state assertions, :func:`score_tau2_actions`,
               :func:`score_communicate`.
``R_F``        format, ``format_weight`` times the share of agent turns that were well formed
               (parseable action, known tool, arguments valid against the tool's schema).
``R_E``        efficiency cost: ``turn_cost`` per agent turn and ``call_cost`` per tool call beyond the
               gold solution, capped at ``efficiency_cap``.
=============  ==================================================================================

With ``partial_credit`` p > 0, R_A = (1 - p) * product + p * mean of the checks: a denser signal for
a team that rarely gets every check right (trainers use it for training rollouts only).

*Success* means every check holds (R_A = 1 whatever ``partial_credit``). The environment reports the
breakdown per episode and per node in ``infos``; the final reward goes to every agent that acted
(cooperative team reward).

The two contract functions, :func:`score_answer` and :func:`score_calls`, are pure and usable alone::

    >>> score_answer("The total is $1,234.50.", "1234.5", "math")
    1.0
    >>> score_calls([{"name": "get_weather", "arguments": {"city": "Paris"}}],
    ...             [{"get_weather": {"city": ["Paris", "paris"], "unit": ["", "celsius"]}}])
    1.0
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

__all__ = [
    "RewardConfig",
    "score_answer",
    "score_calls",
    "score_facts",
    "score_communicate",
    "score_tau2_actions",
    "tau2_action_matches",
    "extract_number",
    "normalize_answer",
    "token_f1",
    "call_matches",
]


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the reward terms. Pass as ``joy_env.make(..., reward_config=RewardConfig(...))``."""

    accuracy_weight: float = 1.0
    """Multiplies R_A (accuracy in [0, 1])."""
    format_weight: float = 0.2
    """R_F = format_weight * share of well-formed agent turns."""
    turn_cost: float = 0.02
    """R_E cost per agent turn beyond the gold solution's turns."""
    call_cost: float = 0.02
    """R_E cost per tool call (``call_agent`` included) beyond the gold solution's calls."""
    efficiency_cap: float = 0.2
    """R_E never exceeds this."""
    partial_credit: float = 0.0
    """Share p in [0, 1] of R_A given as the mean of the task's checks instead of their product:
    R_A = (1 - p) * product + p * mean. 0 (the default) scores success only."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"RewardConfig.{name} must be a finite number >= 0, got {value!r}; "
                    "use e.g. RewardConfig(format_weight=0.1)"
                )
        if self.partial_credit > 1:
            raise ValueError(
                f"RewardConfig.partial_credit must be in [0, 1], got {self.partial_credit!r}; "
                "use e.g. RewardConfig(partial_credit=0.5)"
            )

    def accuracy(self, checks: Mapping[str, float], answered: bool) -> float:
        """R_A of an episode with these check values (each in [0, 1]); 0 without a final answer."""
        if not answered:
            return 0.0
        product = float(math.prod(checks.values()))
        if not self.partial_credit or not checks:
            return product
        mean = sum(checks.values()) / len(checks)
        return (1.0 - self.partial_credit) * product + self.partial_credit * mean


# --------------------------------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------------------------------

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\d])")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = frozenset(string.punctuation)


def extract_number(text: str) -> Fraction | None:
    """The final numeric answer in ``text`` as an exact fraction, or ``None``.

    Takes the content of the last ``\\boxed{}`` if any, else what follows the last ``####``, else
    what follows a last ``A:`` / ``answer:``; within that, the last number. Thousands separators,
    ``$``, units, a trailing ``.0`` and simple fractions ``3/4`` are handled.
    """
    if not isinstance(text, str):
        return None
    text = text[-4000:]
    boxed = _BOXED.findall(text)
    if boxed:
        text = boxed[-1]
    elif "####" in text:
        text = text.rsplit("####", 1)[1]
    numbers = _NUMBER.findall(text.replace("$", " ").replace("\u2212", "-"))
    if not numbers:
        return None
    raw = numbers[-1].replace(",", "").replace(" ", "")
    try:
        if "/" in raw:
            num, den = raw.split("/")
            return Fraction(Decimal(num)) / Fraction(Decimal(den)) if Decimal(den) != 0 else None
        return Fraction(Decimal(raw))
    except (InvalidOperation, ValueError, ZeroDivisionError):
        return None


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: lowercase, drop punctuation and articles, collapse whitespace."""
    text = "".join(c for c in text.lower() if c not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    """Token-level F1 of the normalised strings (1.0 for an exact match)."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


_MONEY_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DECIMAL = re.compile(r"\d+\.\d+")


def _canonical_numbers(text: str) -> str:
    def canon(m: re.Match[str]) -> str:
        s = m.group(0).rstrip("0").rstrip(".")
        return s or "0"

    return _DECIMAL.sub(canon, _MONEY_COMMA.sub("", text))


def _fact_text(text: str) -> str:
    text = _canonical_numbers(text.lower().replace("$", " "))
    return " ".join(text.split())


def _bounded(text: str, fact: str) -> bool:
    """Whether ``fact`` occurs in ``text`` with no letter or digit glued to either end (and no decimal
    part: ``200`` does not occur in ``200.03``)."""
    start = text.find(fact)
    while start >= 0:
        end = start + len(fact)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        ok = not before.isalnum() and not after.isalnum()
        if ok and before == "." and start >= 2 and text[start - 2].isdigit():
            ok = False
        if ok and after == "." and end + 1 < len(text) and text[end + 1].isdigit():
            ok = False
        if ok:
            return True
        start = text.find(fact, start + 1)
    return False


def score_facts(prediction: str, facts: Sequence[str]) -> float:
    """Share of ``facts`` found in ``prediction`` (case-insensitive, on word boundaries, numbers
    compared in canonical form: ``$1,299.50`` matches ``1299.5``, ``200`` does not match ``200.03``)."""
    if not facts:
        return 1.0
    pred = _fact_text(prediction)
    found = 0
    for fact in facts:
        f = _fact_text(str(fact)).strip(" .,;:")
        if f and _bounded(pred, f):
            found += 1
    return found / len(facts)


def score_communicate(prediction: str, infos: Sequence[str]) -> float:
    """tau2-bench's communicate check: 1.0 if every string of ``infos`` occurs in ``prediction``, else 0.0.

    tau2's rule exactly: case-insensitive substring search in the prediction with its commas removed
    (``"1,093.34"`` contains ``"1093.34"``; an info that holds a comma never matches).
    """
    if not isinstance(prediction, str):
        return 0.0
    said = prediction.lower().replace(",", "")
    return float(all(str(info).lower() in said for info in infos))


def tau2_action_matches(gold: Mapping[str, Any], call: Mapping[str, Any]) -> bool:
    """tau2-bench's rule for one gold action and one tool call: the same tool name, and equal values of the
    arguments compared. Those are the gold action's ``compare_args`` when it names them (an empty list:
    the name alone), else the arguments the *call* passed, so a call that leaves out an argument of the
    gold action still matches on the others (tau2's rule, kept as it is)."""
    if not isinstance(call, Mapping) or call.get("name") != gold.get("name"):
        return False
    arguments = call.get("arguments")
    arguments = arguments if isinstance(arguments, Mapping) else {}
    wanted = gold.get("arguments") or {}
    names = gold.get("compare_args")
    keys = list(arguments) if names is None else list(names)
    if not keys:
        return True
    return {k: v for k, v in arguments.items() if k in keys} == {k: v for k, v in wanted.items() if k in keys}


def score_tau2_actions(calls: Sequence[Mapping[str, Any]], gold_actions: Sequence[Mapping[str, Any]]) -> float:
    """tau2-bench's action check: 1.0 if every gold action (``{"name", "arguments", "compare_args"}``) matches
    at least one of ``calls`` (every call made, whatever its result) by :func:`tau2_action_matches`, else 0.0.

    >>> score_tau2_actions([{"name": "reboot_device", "arguments": {}}], [{"name": "reboot_device", "arguments": {}}])
    1.0
    """
    return float(all(any(tau2_action_matches(gold, call) for call in calls) for gold in gold_actions))


def score_answer(prediction: str, gold: str, domain: str) -> float:
    """Score a final answer against the gold answer.

    Args:
        prediction: the agent's answer text (the content of ``<answer>``, or any text).
        gold: the gold answer. For ``ecommerce``, ``general`` and ``facts`` it is one or more required
            facts separated by newlines.
        domain: ``math`` (1.0 iff the final numbers are equal; see :func:`extract_number`),
            ``qa`` (normalised exact match, else token F1), ``ecommerce`` / ``general`` / ``facts``
            (share of the facts contained, see :func:`score_facts`), ``none`` (always 1.0).

    Returns:
        A score in [0, 1].
    """
    if not isinstance(prediction, str):
        return 0.0
    if domain == "math":
        p, g = extract_number(prediction), extract_number(gold)
        return float(p is not None and g is not None and p == g)
    if domain == "qa":
        if normalize_answer(prediction) == normalize_answer(gold):
            return 1.0
        return token_f1(prediction, gold)
    if domain in ("ecommerce", "general", "facts"):
        return score_facts(prediction, [f for f in gold.split("\n") if f.strip()])
    if domain == "none":
        return 1.0
    raise ValueError(
        f"score_answer: unknown domain {domain!r}; valid: 'math', 'qa', 'ecommerce', 'general', 'facts', 'none'"
    )


# --------------------------------------------------------------------------------------------------
# Tool calls (BFCL acceptable-values form)
# --------------------------------------------------------------------------------------------------

_STRIP_CHARS = str.maketrans("", "", " ,./-_*^'\"")


def _standardize(text: str) -> str:
    return text.lower().translate(_STRIP_CHARS)


_TYPES_CACHE: dict[int, tuple[Any, dict[str, dict[str, Any]]]] = {}


def _param_types(functions: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """``{function name: {param: schema}}`` from OpenAI-style or bare function schemas."""
    cached = _TYPES_CACHE.get(id(functions))
    if cached is not None and cached[0] is functions:
        return cached[1]
    out: dict[str, dict[str, Any]] = {}
    for f in functions or ():
        f = f.get("function", f)
        params = (f.get("parameters") or {}).get("properties") or {}
        out[str(f.get("name"))] = dict(params)
    if isinstance(functions, tuple | list) and len(_TYPES_CACHE) < 4096:
        _TYPES_CACHE[id(functions)] = (functions, out)  # keeps ``functions`` alive, so the id stays valid
    return out


def _value_ok(value: Any, acceptable: Any, schema: Mapping[str, Any] | None) -> bool:
    kind = (schema or {}).get("type")
    if isinstance(value, bool) or isinstance(acceptable, bool):
        return isinstance(value, bool) and isinstance(acceptable, bool) and value == acceptable
    if isinstance(value, (int, float)):
        if kind == "integer" and not isinstance(value, int):
            return False
        if kind == "string":
            return False
        return isinstance(acceptable, (int, float)) and value == acceptable
    if isinstance(value, str):
        if kind in ("integer", "number", "float"):
            return False
        return isinstance(acceptable, str) and _standardize(value) == _standardize(acceptable)
    if isinstance(value, list):
        if not isinstance(acceptable, list) or len(value) != len(acceptable):
            return False
        item = (schema or {}).get("items")
        return all(_value_ok(v, a, item) for v, a in zip(value, acceptable, strict=False))
    if isinstance(value, dict):
        if not isinstance(acceptable, dict):
            return False
        props = (schema or {}).get("properties") or {}
        # nested BFCL form: {key: [acceptable values]}; plain form: {key: value}
        for key, acc in acceptable.items():
            options = acc if isinstance(acc, list) else [acc]
            if key not in value:
                if "" not in options:
                    return False
            elif not any(_value_ok(value[key], a, props.get(key)) for a in options if a != "" or value[key] == ""):
                return False
        return all(k in acceptable for k in value)
    return value is None and acceptable is None


def call_matches(
    predicted: Mapping[str, Any], gold: Mapping[str, Any], functions: Sequence[Mapping[str, Any]] | None = None
) -> bool:
    """Whether one predicted call ``{"name", "arguments"}`` satisfies one gold call
    ``{name: {arg: [acceptable values]}}`` (BFCL rules; see :func:`score_calls`)."""
    return _matches(predicted, gold, _param_types(functions))


def _matches(predicted: Any, gold: Any, types_by_function: Mapping[str, Mapping[str, Any]]) -> bool:
    if not isinstance(predicted, Mapping) or not isinstance(gold, Mapping) or len(gold) != 1:
        return False
    ((gold_name, gold_args),) = gold.items()
    name = predicted.get("name")
    if not isinstance(name, str) or (name != gold_name and name.replace(".", "_") != gold_name.replace(".", "_")):
        return False
    args = predicted.get("arguments") or {}
    if not isinstance(args, Mapping):
        return False
    types = types_by_function.get(gold_name, {})
    for arg in args:
        if arg not in gold_args:
            return False  # unknown or unexpected argument
    for arg, acceptable in gold_args.items():
        options = acceptable if isinstance(acceptable, list) else [acceptable]
        if arg not in args:
            if "" not in options:
                return False
            continue
        value = args[arg]
        if not any(_value_ok(value, a, types.get(arg)) for a in options if not (a == "" and value != "")):
            return False
    return True


def _max_matching(ok: list[list[bool]]) -> int:
    """Size of a maximum bipartite matching (rows: predicted, columns: gold)."""
    n_gold = len(ok[0]) if ok else 0
    owner = [-1] * n_gold

    def augment(i: int, seen: list[bool]) -> bool:
        for j in range(n_gold):
            if ok[i][j] and not seen[j]:
                seen[j] = True
                if owner[j] < 0 or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return sum(augment(i, [False] * n_gold) for i in range(len(ok)))


def score_calls(
    predicted: list[dict],
    gold: list[dict],
    functions: list[dict] | None = None,
    ordered: bool = False,
    allow_extra: bool = False,
) -> float:
    """Score predicted tool calls against gold calls in BFCL's acceptable-values form.

    Args:
        predicted: ``[{"name": ..., "arguments": {...}}, ...]``.
        gold: ``[{name: {arg: [acceptable values, ...]}}, ...]``; ``""`` in a list means the argument
            may be omitted.
        functions: optional JSON schemas of the functions (OpenAI ``{"type": "function", "function":
            {...}}`` or bare ``{"name", "parameters"}``). With them, type rules apply as in BFCL: an
            int is accepted for a number (float), a float is not accepted for an integer, a string is
            not accepted for a number. Unknown arguments are always wrong. Strings are compared
            case-insensitively ignoring spaces and ``,./-_*^'"``.
        ordered: if ``True`` the i-th predicted call is compared with the i-th gold call; otherwise the
            best one-to-one matching is used.
        allow_extra: if ``True`` extra predicted calls are not counted against the score (recall);
            otherwise (BFCL) the denominator is ``max(len(predicted), len(gold))``.

    Returns:
        Matched calls divided by ``max(len(predicted), len(gold))`` (or ``len(gold)`` with
        ``allow_extra``): 1.0 exactly when every gold call is matched (and, without ``allow_extra``,
        nothing else was called). Two empty lists score 1.0.
    """
    predicted, gold = list(predicted or []), list(gold or [])
    denom = len(gold) if allow_extra else max(len(predicted), len(gold))
    if denom == 0:
        return 1.0
    types = _param_types(functions)
    if ordered:
        matched = sum(_matches(p, g, types) for p, g in zip(predicted, gold, strict=False))
    else:
        matched = _max_matching([[_matches(p, g, types) for g in gold] for p in predicted])
    return matched / denom
