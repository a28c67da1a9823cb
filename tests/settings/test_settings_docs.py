"""The settings reference and `.env.example` agree with the settings models."""

from __future__ import annotations

import re
from pathlib import Path

from ragtopics.settings.docs import DOCS_PATH, render, settings_rows
from ragtopics.settings.env import Settings
from ragtopics.settings.topic import SETTINGS_MODELS, GraphRagTopicSettings

ENV_EXAMPLE = Path(__file__).resolve().parents[2] / ".env.example"


def test_docs_settings_md_is_up_to_date():
    assert DOCS_PATH.exists(), "docs/settings.md is missing: run python -m ragtopics.settings.docs"
    assert DOCS_PATH.read_text(encoding="utf-8") == render(), "docs/settings.md is stale: run python -m ragtopics.settings.docs"


def test_reference_lists_every_setting_and_variable():
    text = render()
    for model in SETTINGS_MODELS.values():
        for key in model.model_fields:
            assert f"| `{key}` |" in text
    for field in Settings.model_fields.values():
        assert f"| `{field.alias}` |" in text and field.description


def test_env_example_names_every_process_setting_and_nothing_else():
    named = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(encoding="utf-8"), flags=re.MULTILINE))
    aliases = {field.alias for field in Settings.model_fields.values()}
    assert aliases - named == set(), "missing from .env.example"
    assert named - aliases == set(), "unknown variables in .env.example"


def test_settings_rows_show_value_default_and_description():
    rows = {r.key: r for r in settings_rows(GraphRagTopicSettings(path_max_hops=6))}
    hops = rows["path_max_hops"]
    assert (hops.value, hops.default, hops.values, hops.phase) == ("6", "4", "integer, 1–8", "chat")
    assert rows["seed_strategy"].values == "NODES, CHUNKS, FUSED" and rows["refresh_cycle"].phase == "communities"
