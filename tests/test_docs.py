"""The trainer pages under docs/trainers/ cannot drift from the code: their options tables are generated
from the Config dataclasses, and every field has a docstring for ``--list-options`` to print."""

from __future__ import annotations

import importlib.util
import os

import pytest

from joy_trainers import TRAINERS
from joy_trainers.cli import load_trainer
from joy_trainers.options import config_options

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs", "trainers")


def _updater():
    spec = importlib.util.spec_from_file_location("update_options", os.path.join(DOCS, "update_options.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_built_in_trainer_has_a_page_with_a_current_options_table():
    updater = _updater()
    assert set(updater.PAGES) == set(TRAINERS)
    assert updater.main(["--check"]) == 0, "run python docs/trainers/update_options.py"


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_the_page_lists_every_option_with_its_default(trainer):
    page = open(os.path.join(DOCS, f"{trainer}.md")).read()
    for option in config_options(load_trainer(trainer).config_class):
        assert f"| `{option.name}` |" in page, option.name
        assert option.doc, f"{trainer}: option {option.name} has no docstring under its field"


def test_a_stale_table_is_reported(tmp_path):
    updater = _updater()
    page = f"# x\n\n{updater.BEGIN}\n| stale |\n{updater.END}\n\nmore text\n"
    fresh = updater.render(page, "grpo")
    assert "| stale |" not in fresh and "| `group_size` |" in fresh and fresh.endswith("\n\nmore text\n")
    with pytest.raises(ValueError, match="marker"):
        updater.render("# no markers\n", "grpo")
