"""Topic settings: one model per kind on a shared chat base, each field self-describing."""

from __future__ import annotations

import json

import pytest

from ragtopics.errors import InvalidSettingError
from ragtopics.settings.topic import (
    SETTINGS_MODELS,
    ChatSettings,
    GraphRagTopicSettings,
    RagTopicSettings,
    load_settings,
    parse_assignments,
    phase_of,
    validate_settings,
)
from ragtopics.storage.metadata import TopicRow
from ragtopics.topics.topics import create_topic, get_topic, list_topics, update_settings

PHASES = {"upload", "chat", "upload+chat", "communities"}


@pytest.mark.parametrize("kind", sorted(SETTINGS_MODELS))
def test_every_field_has_a_one_line_description_and_a_phase(kind):
    model = SETTINGS_MODELS[kind]
    assert issubclass(model, ChatSettings)
    for key, field in model.model_fields.items():
        assert field.description and "\n" not in field.description, key
        assert phase_of(model, key) in PHASES, key


def test_graphrag_defaults_and_ranges_follow_the_settings_table():
    s = GraphRagTopicSettings()
    assert (s.chunk_size, s.confidence_threshold, s.direct_confidence_threshold, s.path_max_hops) == (1200, 0.6, 0.9, 4)
    assert (s.graph_extraction_method, s.picture_handling, s.seed_strategy, s.router_method) == (
        "AUTO",
        "PICTURE_IN_GRAPH",
        "FUSED",
        "AUTO",
    )
    assert (s.top_k_nodes, s.hop_depth, s.max_subgraph_nodes, s.max_cited_chunks) == (10, 1, 60, 8)
    assert (s.top_k_seed_chunks, s.top_k_unlinked_chunks, s.top_k_reports) == (5, 3, 5)
    assert (s.max_follow_up_rounds, s.max_follow_up_questions, s.resolution, s.refresh_cycle) == (2, 3, 1.0, "1d")
    assert s.answer_without_searching and s.local_keyword_search and s.global_keyword_search and s.route_before_retrieval
    assert s.refresh_interval_s == 86400 and validate_settings("graphrag", {"refresh_cycle": "off"}).refresh_interval_s is None
    for bad, key in [
        ({"path_max_hops": 9}, "path_max_hops"),
        ({"seed_strategy": "ALL"}, "seed_strategy"),
        ({"refresh_cycle": "weekly"}, "refresh_cycle"),
        ({"top_k_rsults": 3}, "top_k_rsults"),
    ]:
        with pytest.raises(InvalidSettingError, match=key):
            validate_settings("graphrag", bad)


def test_rag_keeps_its_keys_and_defaults_and_gains_router_method():
    s = validate_settings("rag", parse_assignments(["router_method=EMBEDDING", "top_k_results=8"]))
    assert isinstance(s, RagTopicSettings) and (s.router_method, s.top_k_results, s.chunk_size) == ("EMBEDDING", 8, 1000)
    assert not s.route_before_retrieval and s.router_confidence_threshold == 0.9
    with pytest.raises(InvalidSettingError, match="router_method"):
        validate_settings("rag", {"router_method": "KEYWORDS"})
    with pytest.raises(InvalidSettingError, match="path_max_hops: unknown setting"):
        validate_settings("rag", {"path_max_hops": 2})


@pytest.mark.parametrize("key", ["language_model", "vector_database", "embedding_model"])
def test_removed_settings_are_refused_with_the_reason(key):
    with pytest.raises(InvalidSettingError, match=f"{key}: this setting was removed: .*(LLM_|REDIS_URL|EMBEDDING_)"):
        validate_settings("rag", {key: "gpt-4o"})


def test_stored_topic_with_removed_keys_still_loads(rt):
    create_topic(rt, "Old", settings={"top_k_results": 7})
    with rt.metadata.session() as s:
        row = s.get(TopicRow, get_topic(rt, "Old").id)
        row.settings = {**row.settings, "embedding_model": "local", "vector_database": "default", "language_model": "local"}
        s.add(row)
    topic = get_topic(rt, "Old")
    assert topic.settings.top_k_results == 7 and "language_model" not in topic.settings.model_dump()
    assert update_settings(rt, "Old", {"memory": 4}).settings.memory == 4
    assert load_settings("rag", {"language_model": "x"}) == RagTopicSettings()


def test_chat_attachment_types_must_be_types_the_product_reads_and_old_stored_ones_still_load(rt):
    with pytest.raises(InvalidSettingError, match=r"chat_attachment_types: .*unsupported attachment type\(s\) /x, exe"):
        validate_settings("rag", {"chat_attachment_types": "exe, ../x"})
    assert validate_settings("rag", {"chat_attachment_types": "TXT, .md"}).chat_attachment_types == ["md", "txt"]
    assert validate_settings("rag", {"chat_attachment_types": ""}).chat_attachment_types == []  # no attachments
    create_topic(rt, "Older")
    with rt.metadata.session() as s:  # as a release without the check stored it
        row = s.get(TopicRow, get_topic(rt, "Older").id)
        row.settings = {**row.settings, "chat_attachment_types": ["/x", "exe", "txt"]}
        s.add(row)
    assert get_topic(rt, "Older").settings.chat_attachment_types == ["txt"]


def test_texts_stored_before_their_length_was_limited_load_cut_to_the_limit(rt, caplog):
    create_topic(rt, "Long ago")
    with rt.metadata.session() as s:  # as a release without the limits stored them
        row = s.get(TopicRow, get_topic(rt, "Long ago").id)
        row.settings = {**row.settings, "no_answer_response": "Not found. " * 300, "custom_system_prompt": "Be brief. " * 3000}
        s.add(row)
    settings = get_topic(rt, "Long ago").settings
    assert settings.no_answer_response == ("Not found. " * 300)[:2000] and len(settings.custom_system_prompt) == 20_000
    assert "no_answer_response was 3300 characters long, over the limit of 2000" in caplog.text
    assert [t.name for t in list_topics(rt)] == ["Long ago"]
    assert update_settings(rt, "Long ago", {"memory": 3}).settings.memory == 3  # and it can be changed again


def test_graphrag_topic_is_created_and_read_with_its_own_model(rt):
    topic = create_topic(rt, "Graph", kind="graphrag", settings={"path_max_hops": 6})
    assert isinstance(topic.settings, GraphRagTopicSettings) and topic.kind == "graphrag"
    again = update_settings(rt, "Graph", {"confidence_threshold": "0.7"})
    assert isinstance(again.settings, GraphRagTopicSettings)
    assert (again.settings.path_max_hops, again.settings.confidence_threshold, again.settings_version) == (6, 0.7, 2)
    assert {t.name: type(t.settings) for t in list_topics(rt)} == {"Graph": GraphRagTopicSettings}
    with pytest.raises(InvalidSettingError, match="top_k_results: unknown setting"):
        update_settings(rt, "Graph", {"top_k_results": 3})
    with pytest.raises(InvalidSettingError, match="kind 'lightrag' is not available"):
        create_topic(rt, "Other", kind="lightrag")


def test_topic_show_lists_each_setting_with_default_and_description(rt, capsys):
    from ragtopics.ui.cli import main

    create_topic(rt, "Graph", kind="graphrag", settings={"hop_depth": 2})
    assert main(["topic", "show", "Graph"]) == 0
    shown = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in shown["reference"]}
    assert set(rows) == set(GraphRagTopicSettings.model_fields) and shown["settings"]["hop_depth"] == 2
    assert rows["hop_depth"]["value"] == "2" and rows["hop_depth"]["default"] == "1" and rows["hop_depth"]["description"]


def test_ocr_can_be_switched_on_where_the_engine_runs_and_is_refused_with_the_reason_where_not(rt, monkeypatch):
    from ragtopics.errors import InvalidSettingError
    from ragtopics.ingest import ocr
    from ragtopics.topics.topics import create_topic, update_settings

    assert ocr.engine_unavailable_reason() == ""  # installed with the product
    scans = create_topic(rt, "Scans", settings={"docling_settings": {"ocr": True}})
    assert scans.settings.docling_settings.ocr is True

    # An installation where the engine does not import (e.g. no libGL for OpenCV) refuses it, saying why.
    monkeypatch.setattr(
        ocr, "engine_unavailable_reason", lambda: "the OCR engine rapidocr-onnxruntime does not import (ImportError: libGL.so.1)"
    )
    with pytest.raises(InvalidSettingError, match=r"OCR cannot be switched on here: the OCR engine .* libGL\.so\.1"):
        create_topic(rt, "Faxes", settings={"docling_settings": {"ocr": True}})
    topic = create_topic(rt, "Faxes")
    with pytest.raises(InvalidSettingError, match="docling-serve URL"):
        update_settings(
            rt, topic.name, {"docling_settings": {"ocr": True, "table_structure": True, "page_range": "", "timeout_s": 300}}
        )
    assert get_topic_ocr(rt, topic.name) is False
    served = update_settings(
        rt, topic.name, {"docling_server": "http://docling.example:5001", "docling_settings": {"ocr": True}}
    )  # a docling-serve decides itself
    assert served.settings.docling_settings.ocr is True


def get_topic_ocr(rt, name):
    from ragtopics.topics.topics import get_topic

    return get_topic(rt, name).settings.docling_settings.ocr


@pytest.mark.parametrize("value", ["1e308", "100001"])
def test_sizes_past_their_bound_are_refused_and_old_stored_ones_load_lowered(rt, value, caplog, run_jobs):
    from ragtopics.documents.uploads import receive_upload
    from ragtopics.topics.topics import create_topic, get_topic, update_settings

    topic = create_topic(rt, "Sizes")
    with pytest.raises(InvalidSettingError, match="max_file_size_mb: .*100000"):
        update_settings(rt, topic.name, {"max_file_size_mb": value})
    with pytest.raises(InvalidSettingError, match="largest_chat_attachment_mb"):
        update_settings(rt, topic.name, {"largest_chat_attachment_mb": value})
    assert get_topic(rt, topic.name).settings_version == 1
    with rt.metadata.session() as s:  # as a release without the bound stored it
        row = s.get(TopicRow, topic.id)
        row.settings = {**row.settings, "max_file_size_mb": float(value), "largest_chat_attachment_mb": float(value)}
        s.add(row)
    loaded = get_topic(rt, topic.name)
    assert (loaded.settings.max_file_size_mb, loaded.settings.largest_chat_attachment_mb) == (100_000, 1_000)
    assert "max_file_size_mb was" in caplog.text and "over the limit of 100000 MB" in caplog.text
    row = receive_upload(rt, loaded, "notes.txt", b"Uploads still work.")  # the bound is a number an upload can compare
    run_jobs()
    assert get_topic(rt, topic.name).settings.max_file_size_mb == 100_000 and row.file_name == "notes.txt"


@pytest.mark.parametrize("value", ["inf", "infinity", "-inf", "nan"])
def test_infinite_numbers_are_refused_and_nothing_is_stored(rt, value):
    from ragtopics.topics.topics import create_topic, get_topic, list_topics, update_settings

    topic = create_topic(rt, "Limits")
    with pytest.raises(InvalidSettingError, match="max_file_size_mb"):
        update_settings(rt, topic.name, {"max_file_size_mb": value})
    assert get_topic(rt, topic.name).settings_version == 1
    assert [t.name for t in list_topics(rt)] == ["Limits"]


def test_connected_topics_must_exist_and_not_be_the_topic_itself(rt):
    from ragtopics.topics.topics import create_topic, update_settings

    create_topic(rt, "HR")
    with pytest.raises(InvalidSettingError, match="no Topic called 'Nope'"):
        create_topic(rt, "Main", settings={"mcp_interfaces": "HR,Nope"})
    main = create_topic(rt, "Main", settings={"mcp_interfaces": "HR"})
    with pytest.raises(InvalidSettingError, match="cannot be connected to itself"):
        update_settings(rt, main.name, {"mcp_interfaces": "Main"})


def test_a_duplicate_topic_name_is_refused_naming_the_topic_that_has_it(rt):
    from ragtopics.topics.topics import create_topic, list_topics

    create_topic(rt, "Hotpot RAG")
    with pytest.raises(InvalidSettingError, match=r"^a Topic called 'Hotpot RAG' already exists$"):
        create_topic(rt, "Hotpot RAG")
    with pytest.raises(InvalidSettingError, match=r"'Hotpot RAG' \(names are compared ignoring case\) already exists"):
        create_topic(rt, "hotpot rag")
    assert [t.name for t in list_topics(rt)] == ["Hotpot RAG"]
