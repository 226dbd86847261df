"""One contract per tau2 domain: each domain package exports a ``Tau2Domain``, and nothing outside a domain's package
branches on a domain's name. These tests need no tau2 data."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from joy_env.core import Tool
from joy_env.domains import tau2
from joy_env.domains.tau2 import contract, tooling

TAU2 = Path(tau2.__file__).parent
JOY_ENV = TAU2.parents[1]


@pytest.mark.parametrize("name", contract.DOMAINS)
def test_each_domain_package_exports_its_contract(name):
    package = importlib.import_module(contract.PACKAGES[name])
    spec = tau2.domain(name)
    assert spec is package.DOMAIN and spec.name == name
    assert spec.write_tools == frozenset(package.WRITE_TOOLS)
    assert {"train", "test", "all"} <= set(spec.splits) and spec.data_files
    assert spec.tools and all(isinstance(t, Tool) for t in spec.tools + spec.user_tools)
    assert spec.service and spec.serves and spec.solo_role
    # the customer's tools are the agent's in the solo protocol and the customer's in the interactive one
    assert spec.agent_tools("solo") == spec.tools + spec.user_tools and spec.agent_tools("interactive") == spec.tools


@pytest.mark.parametrize("name", contract.DOMAINS)
def test_every_domain_declares_its_tools_the_same_way(name):
    package = importlib.import_module(contract.PACKAGES[name])
    specs = getattr(package.schemas, "SPECS", None) or package.schemas.AGENT_SPECS + package.schemas.USER_SPECS
    assert all(isinstance(s, tooling.ToolSpec) for s in specs)
    tools = tau2.domain(name).tools + tau2.domain(name).user_tools
    assert [t.name for t in tools] == [s.name for s in specs] == [s.body.__name__ for s in specs]
    assert [t.parameters for t in tools] == [s.parameters for s in specs]


def test_a_contract_refuses_repeated_tool_names_and_missing_splits():
    retail = tau2.domain("retail")
    kwargs = {f: getattr(retail, f) for f in ("name", "data_files", "load_db", "build_db", "audit", "service")}
    kwargs.update(serves=retail.serves, solo_role=retail.solo_role)
    with pytest.raises(ValueError, match="appear more than once"):
        contract.Tau2Domain(**kwargs, splits=retail.splits, tools=retail.tools, user_tools=retail.tools[:1])
    with pytest.raises(ValueError, match="lack"):
        contract.Tau2Domain(**kwargs, splits=("train", "all"), tools=retail.tools)


def test_an_unknown_domain_is_one_line():
    with pytest.raises(ValueError, match="domain must be one of 'retail', 'airline', 'telecom', got 'shop'"):
        tau2.domain("shop")


def _branches_on_a_domain_name(path: Path) -> list[str]:
    """``x == "airline"``, ``x in ("retail", ...)``, and dicts keyed by domain names, in ``path``."""
    names = set(contract.DOMAINS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            literals = [c for p in parts for c in ast.walk(p) if isinstance(c, ast.Constant)]
            if any(c.value in names for c in literals if isinstance(c.value, str)):
                found.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value in names for k in node.keys
        ):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_nothing_outside_a_domain_package_branches_on_a_domain_name():
    # the env's own modules and tau2's shared ones (the other built-in domains have their own words: a flight's
    # "airline" field in the general domain's data is not tau2's airline)
    checked = [*JOY_ENV.glob("*.py"), *(p for p in TAU2.glob("*.py") if p.name != "contract.py")]
    assert TAU2 / "spec.py" in checked and JOY_ENV / "builtin.py" in checked and len(checked) > 20
    assert [hit for p in checked for hit in _branches_on_a_domain_name(p)] == []
    # the table of domains is the one place that names them all
    assert len(_branches_on_a_domain_name(TAU2 / "contract.py")) == 1
