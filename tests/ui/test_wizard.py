"""The Create-a-Topic wizard's steps cover every setting once, and its values become valid settings."""

from __future__ import annotations

import pytest

from ragtopics.settings.topic import SETTINGS_MODELS
from ragtopics.topics.topics import get_topic
from ragtopics.ui import wizard


@pytest.mark.parametrize("kind", sorted(SETTINGS_MODELS))
def test_every_setting_is_on_exactly_one_step(kind):
    keys = [k for _, step in wizard.STEPS[kind] for k in step] + list(wizard.FIXED_KEYS)
    assert sorted(keys) == sorted(SETTINGS_MODELS[kind].model_fields)  # a new setting must find its step


def test_file_type_groups_cover_every_supported_type():
    from ragtopics.text.file_types import SUPPORTED_EXTENSIONS

    assert set().union(*map(set, wizard.FILE_TYPE_GROUPS.values())) == SUPPORTED_EXTENSIONS
    assert wizard.file_types_of([["pdf"], None, ["csv", "json"], []]) == ["csv", "json", "pdf"]


def test_wizard_values_become_settings_and_errors_name_the_field(rt):
    values = {
        "chunk_size": 900.0,
        "top_k_results": 7.0,
        "retrieval_strategy": "DENSE",
        "chat_attachment_types": "txt, md",
        "docling_settings": '{"ocr": true}',
        "min_similarity_score": 0.25,
    }
    status = wizard.create_from_wizard(
        rt, "RAG", "Manuals", "Pump manuals", "Be brief.", [["pdf"], ["md", "txt"], [], []], values
    )
    assert status.startswith("Created RAG Topic **Manuals** (3 file types)")
    s = get_topic(rt, "Manuals").settings
    assert (s.chunk_size, s.top_k_results, s.chat_attachment_types, s.docling_settings.ocr) == (900, 7, ["md", "txt"], True)
    assert s.file_types == ["md", "pdf", "txt"] and s.custom_system_prompt == "Be brief."
    refused = wizard.create_from_wizard(rt, "RAG", "Other", "", "", [["pdf"], [], [], []], {"top_k_results": 99})
    assert (
        refused.replace("\\", "")
        == "**Not created:** invalid Topic settings: top_k_results: 99 is outside the allowed range 1–50"
    )
    bad_json = wizard.create_from_wizard(rt, "GraphRAG", "Graph", "", "", [["pdf"], [], [], []], {"docling_settings": "{ocr"})
    assert bad_json.replace("\\", "").startswith("**Not created:** Docling Settings (JSON) (docling_settings): not valid JSON")
    assert wizard.create_from_wizard(rt, "Other", "X", "", "", [], {}) == "**Not created:** Kind must be one of RAG, GraphRAG."


def test_an_out_of_range_number_reaches_the_check_that_names_its_field(rt):
    """A number field has no bounds of its own: Gradio would refuse -5 with a message naming no field."""
    import gradio as gr

    numbers = [wizard.field_component(kind, key) for kind in ("rag", "graphrag") for key in ("chunk_size", "max_file_size_mb")]
    assert all(isinstance(c, gr.Number) and c.minimum is None and c.maximum is None for c in numbers)
    refused = wizard.create_from_wizard(rt, "RAG", "Other", "", "", [["pdf"], [], [], []], {"chunk_size": -5.0})
    assert refused.replace("\\", "").startswith("**Not created:** invalid Topic settings: chunk_size: -5 is outside")
