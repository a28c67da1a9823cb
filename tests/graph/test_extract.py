"""Graph extraction per chunk: the NLP method on real passages, the table-of-contents skip,
the LLM method against the scripted model server, and the AUTO method choice."""

from __future__ import annotations

import json

import pytest

from ragtopics.errors import ConfigurationError
from ragtopics.graph.extract import (
    MAX_REASKS,
    SKIP_EMPTY,
    SKIP_TOC,
    choose_method,
    extract_chunk,
    extraction_version,
    looks_like_toc_or_index,
)
from ragtopics.graph.model import ChunkExtraction, normalize_name
from ragtopics.graph.nlp import STRENGTH_CAP, extract_nlp, extract_nlp_many, load_pipeline
from ragtopics.llm.gateway import ModelGateway
from ragtopics.prompts.templates import GRAPH_EXTRACTION
from ragtopics.settings.env import Settings
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.tracing.trace import Trace


def passage(corpus: dict, title: str) -> str:
    """A HotpotQA passage as the product stores it: ``TITLE.txt`` holding the joined sentences."""
    return "".join(corpus[title])


def by_name(extraction: ChunkExtraction) -> dict:
    return {normalize_name(e.name): e for e in extraction.entities}


def related(extraction: ChunkExtraction, a: str, b: str):
    pair = {normalize_name(a), normalize_name(b)}
    return next((r for r in extraction.relationships if {normalize_name(r.source), normalize_name(r.target)} == pair), None)


# --- NLP ---------------------------------------------------------------------------------------------------------


def test_a_passage_about_a_person_and_a_place_gives_both_and_their_relationship(hotpot):
    corpus, _ = hotpot
    text = passage(corpus, "Terry Sanford")  # "James Terry Sanford (...) was a United States politician ... from North Carolina."
    extraction = extract_nlp(text)
    entities = by_name(extraction)

    assert entities[normalize_name("James Terry Sanford")].type == "PERSON"
    assert entities[normalize_name("North Carolina")].type == "PLACE"
    assert entities[normalize_name("Democratic Party")].type == "ORGANIZATION"
    link = related(extraction, "James Terry Sanford", "North Carolina")
    assert link is not None and link.strength >= 1
    assert "James Terry Sanford" in link.description and "North Carolina" in link.description
    assert "North Carolina" in entities[normalize_name("North Carolina")].description
    every = {normalize_name(e.name) for e in extraction.entities}
    assert all(normalize_name(r.source) in every and normalize_name(r.target) in every for r in extraction.relationships)


def test_the_title_line_of_a_passage_is_an_entity_related_to_its_first_sentence(hotpot):
    corpus, _ = hotpot
    title = "Demon Dice"
    extraction = extract_nlp(f"{title}\n\n{passage(corpus, title)}")
    assert normalize_name(title) in by_name(extraction)
    assert related(extraction, title, "Lester Smith") is not None


def test_numbers_dates_pronouns_and_determiners_are_not_entities(hotpot):
    corpus, _ = hotpot
    titles = ["Terry Sanford", "El Nouzha Airport", "Demon Dice", "Christopher Nolan", "Maximum Overdrive"]
    for extraction in extract_nlp_many([passage(corpus, t) for t in titles]):
        for entity in extraction.entities:
            words = entity.name.split()
            assert words[0].lower() not in {"a", "an", "his", "her", "its", "their", "these", "this"}, entity.name
            assert words[0] != "the", entity.name
            assert entity.name.lower() not in {"he", "she", "it", "they", "which", "who"}, entity.name
            assert any(c.isalpha() for c in entity.name), entity.name
            assert len(entity.description) <= 300
    nolan = by_name(extract_nlp(passage(corpus, "Christopher Nolan")))  # "born 30 July 1970": a date, not an entity
    assert not any(name.isdigit() or "july" in name for name in nolan)


def test_codes_abbreviations_and_cooccurrence_strength():
    text = (
        "The European Central Bank (ECB) audited the plant in Hamburg. "
        "Pump P-12 stopped with error E-4711 during the night shift. "
        + " ".join(f"In week {w}, pump P-12 was inspected in Hamburg again." for w in range(1, 13))
    )
    extraction = extract_nlp(text)
    entities = by_name(extraction)

    assert entities["p12"].type == "CODE" and entities["e4711"].type == "CODE"
    assert "pumpp12" not in entities  # a name with a code in it is found through its code
    bank = entities[normalize_name("European Central Bank")]
    assert bank.type == "ORGANIZATION" and bank.aliases == ["ECB"]
    assert "ecb" not in entities  # the abbreviation is an alias, not a second entity
    assert related(extraction, "P-12", "E-4711").strength == 1
    assert related(extraction, "P-12", "Hamburg").strength == STRENGTH_CAP  # 12 shared sentences, capped


def test_a_markdown_heading_and_a_numbered_section_heading_are_entities():
    text = (
        "# Maintenance schedule\n\nThe seal kit of the dosing pump is replaced every spring.\n\n"
        "3.2 Safety instructions\n\nWear gloves."
    )
    entities = by_name(extract_nlp(text))
    assert entities[normalize_name("Maintenance schedule")].type == "CONCEPT"
    assert normalize_name("Safety instructions") in entities  # without its section number
    assert normalize_name("seal kit") in entities


def test_the_nlp_model_is_loaded_once():
    assert load_pipeline() is load_pipeline()


# --- table of contents and index ---------------------------------------------------------------------------------

TOC_WITH_LEADERS = """Contents

1 Introduction .......................... 1
1.1 Purpose of this manual ............... 2
1.2 Safety symbols ....................... 3
2 Installation ........................... 7
2.2 Mounting the pump P-12 ............... 9
3 Maintenance ........................... 15"""

TOC_OF_A_BOOK = """Table of Contents
Preface xi
Chapter 1 The Early Years 1
Chapter 2 Crossing the Atlantic 27
Chapter 3 A New Republic 58
Epilogue 233
Index 251"""

TOC_AS_MARKDOWN_TABLE = """| Contents | |
|---|---|
| 1 Introduction | 3 |
| 2 Installation | 7 |
| 3 Operation | 12 |
| 4 Maintenance | 20 |"""

TOC_WITHOUT_HEADING = """2.3 Electrical connection 11
2.4 Commissioning 13
3 Operation 15
3.1 Control panel 15
3.2 Operating modes 18
3.3 Alarms and error codes 21"""

INDEX = """Index

accumulator, 12, 45
bearing, 33-35
  replacement, 36
check valve, 18; 52
coupling, 40
gasket, 22, 29
impeller, 30-31, 48"""

INDEX_CONTINUED = """pressure relief valve, 19, 84
priming, 25
pump housing, 31, 33
rotor, 44-46
seal kit, 50
shaft, 41, 47"""

LIST_OF_FIGURES = """List of Figures
Figure 1.1 Pump housing, exploded view . . . . . 4
Figure 1.2 Impeller . . . . . 5
Figure 2.1 Wiring diagram . . . . . 12"""


@pytest.mark.parametrize(
    "text", [TOC_WITH_LEADERS, TOC_OF_A_BOOK, TOC_AS_MARKDOWN_TABLE, TOC_WITHOUT_HEADING, INDEX, INDEX_CONTINUED, LIST_OF_FIGURES]
)
def test_tables_of_contents_and_indexes_are_recognised(text):
    assert looks_like_toc_or_index(text)


TABLE_OF_FIGURES = """| Model | Flow (m³/h) | Head (m) | Power (kW) | Weight (kg) |
|---|---|---|---|---|
| P-10 | 12 | 30 | 2.2 | 48 |
| P-12 | 18 | 45 | 4.0 | 61 |
| P-16 | 25 | 52 | 5.5 | 80 |
| P-20 | 40 | 60 | 7.5 | 102 |"""

PLAIN_TABLE = """Model Flow Head Power
P-10 12 30 2.2
P-12 18 45 4.0
P-16 25 52 5.5
P-20 40 60 7.5"""

STOCK_LIST = """Stock on hand
Pumps 12
Valves 7
Seals 30
Gaskets 3
Impellers 9"""

WRAPPED_PROSE = """The pump P-12 was installed in 1998 at the Hamburg plant. It ran for 40,000 hours before its first
overhaul in 2004. After the overhaul the flow rose to 18 m3/h and the seal kit was replaced in 2011
and the impeller in 2015.
The pump was finally retired in 2020."""


@pytest.mark.parametrize("text", [TABLE_OF_FIGURES, PLAIN_TABLE, STOCK_LIST, WRAPPED_PROSE, "", "Contents"])
def test_prose_and_tables_of_figures_are_not_taken_for_a_table_of_contents(text):
    assert not looks_like_toc_or_index(text)


def test_no_hotpotqa_passage_looks_like_a_table_of_contents(hotpot):
    corpus, _ = hotpot
    flagged = [
        t
        for t, s in corpus.items()
        if looks_like_toc_or_index(f"{t}\n\n{''.join(s)}") or looks_like_toc_or_index("\n".join(x.strip() for x in s))
    ]
    assert flagged == []


def test_a_table_of_contents_chunk_is_skipped_without_a_model_call(gateway, scripted_llm):
    for method in ("NLP", "LLM"):
        outcome = extract_chunk(TOC_WITH_LEADERS, method, gateway)
        assert outcome.skipped == SKIP_TOC and outcome.extraction == ChunkExtraction() and not outcome.failed
    assert extract_chunk("  \n ", "NLP", None).skipped == SKIP_EMPTY
    assert scripted_llm.requests == []


# --- LLM ---------------------------------------------------------------------------------------------------------

CHUNK = "Marie Curie worked at the University of Paris. She discovered polonium with Pierre Curie."

VALID = {
    "entities": [
        {"name": "Marie Curie", "type": "person", "description": "A physicist.", "aliases": ["Curie"]},
        {"name": "University of Paris", "type": "ORGANIZATION", "description": "Where she worked."},
        {"name": "Pierre Curie", "type": "PERSON", "description": "Her co-discoverer."},
        {"name": "polonium", "type": "CONCEPT", "description": "An element."},
    ],
    "relationships": [
        {"source": "marie curie", "target": "University of Paris", "description": "worked at", "strength": 8},
        {"source": "Curie", "target": "polonium", "description": "discovered", "strength": 9},
    ],
}

UNLISTED = {
    "entities": VALID["entities"][:2],
    "relationships": [{"source": "Marie Curie", "target": "Sorbonne", "description": "taught at", "strength": 5}],
}


@pytest.fixture
def gateway(tmp_path, scripted_llm) -> ModelGateway:
    scripted_llm.reset()
    settings = Settings(
        RAGTOPICS_DATA_DIR=tmp_path, LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL="scripted", LLM_TIMEOUT_S=10, _env_file=None
    )
    yield ModelGateway(settings)
    scripted_llm.reset()


def replies_in_turn(*replies: dict | str):
    """A scripted reply that answers the given JSON objects (or raw texts) one request after another."""
    queue = [r if isinstance(r, str) else json.dumps(r) for r in replies]
    return lambda body: queue.pop(0)


def test_a_valid_reply_becomes_the_extraction_in_one_request(gateway, scripted_llm):
    scripted_llm.replies["graph_extraction"] = json.dumps(VALID)
    trace = Trace("upload", "curie.txt")
    outcome = extract_chunk(CHUNK, "LLM", gateway, trace=trace)

    assert not outcome.failed and outcome.requests == 1 and outcome.method == "LLM"
    assert type(outcome.extraction) is ChunkExtraction
    names = [e.name for e in outcome.extraction.entities]
    assert names == ["Marie Curie", "University of Paris", "Pierre Curie", "polonium"]
    assert outcome.extraction.entities[0].type == "PERSON"
    links = [(r.source, r.target) for r in outcome.extraction.relationships]
    assert links == [("Marie Curie", "University of Paris"), ("Marie Curie", "polonium")]  # names and aliases → listed names
    sent = scripted_llm.prompts("graph_extraction")
    assert len(sent) == 1 and CHUNK in sent[0]["messages"][-1]["content"]
    event = next(e for e in trace.events if e.step == "graph_extraction")
    assert event.data["entities"] == 4 and event.data["relationships"] == 2
    assert [e.data["prompt_name"] for e in trace.events if e.step == "model_call"] == ["graph_extraction"]


def test_a_relationship_naming_an_unlisted_entity_is_asked_again(gateway, scripted_llm):
    scripted_llm.replies["graph_extraction"] = replies_in_turn(UNLISTED, VALID)
    outcome = extract_chunk(CHUNK, "LLM", gateway)

    assert not outcome.failed and outcome.requests == 2
    assert len(outcome.extraction.entities) == 4
    sent = scripted_llm.prompts("graph_extraction")
    assert len(sent) == 2
    reask = sent[1]["messages"][-1]["content"]
    assert CHUNK in reask and "could not be used" in reask and "'Sorbonne'" in reask


def test_three_unusable_replies_end_as_a_failed_outcome_without_an_exception(gateway, scripted_llm):
    scripted_llm.replies["graph_extraction"] = replies_in_turn(UNLISTED, "not JSON at all", UNLISTED)
    outcome = extract_chunk(CHUNK, "LLM", gateway)

    assert outcome.failed and outcome.requests == MAX_REASKS + 1 == 3
    assert outcome.extraction == ChunkExtraction()
    assert "Sorbonne" in outcome.error
    assert len(scripted_llm.prompts("graph_extraction")) == 3


def test_configuration_errors_raise():
    with pytest.raises(ConfigurationError, match="needs the model gateway"):
        extract_chunk(CHUNK, "LLM", None)
    with pytest.raises(ConfigurationError, match="unknown graph extraction method"):
        extract_chunk(CHUNK, "SPACY", None)


# --- method choice -----------------------------------------------------------------------------------------------


def test_auto_is_nlp_while_the_role_is_the_bundled_model_and_llm_with_an_endpoint(tmp_path):
    def gateway_with(**env) -> ModelGateway:
        return ModelGateway(Settings(RAGTOPICS_DATA_DIR=tmp_path, _env_file=None, **env))

    bundled = gateway_with()
    own_endpoint = gateway_with(GRAPH_EXTRACTION_BASE_URL="http://10.0.0.5:8000/v1", GRAPH_EXTRACTION_MODEL="qwen3-8b")
    language_model = gateway_with(LLM_BASE_URL="http://10.0.0.5:8000/v1", LLM_MODEL="qwen3-8b")

    auto = GraphRagTopicSettings()
    assert choose_method(auto, bundled) == "NLP"
    assert choose_method(auto, own_endpoint) == "LLM"
    assert choose_method(auto, language_model) == "LLM"
    assert choose_method(GraphRagTopicSettings(graph_extraction_method="LLM"), bundled) == "LLM"
    assert choose_method(GraphRagTopicSettings(graph_extraction_method="NLP"), language_model) == "NLP"
    with pytest.raises(ConfigurationError):
        choose_method(type("Cfg", (), {"graph_extraction_method": "SPACY"})(), bundled)


def test_the_extraction_version_changes_with_the_model_and_the_prompt(tmp_path):
    def runtime(model: str):
        settings = Settings(RAGTOPICS_DATA_DIR=tmp_path, LLM_BASE_URL="http://10.0.0.5:8000/v1", LLM_MODEL=model, _env_file=None)
        return type("Rt", (), {"gateway": ModelGateway(settings)})()

    first, other_model = runtime("qwen3-8b"), runtime("qwen3-32b")
    edited = GRAPH_EXTRACTION.with_text(GRAPH_EXTRACTION.text + " Keep names short.")
    assert extraction_version("LLM", first) == extraction_version("LLM", first)
    assert extraction_version("LLM", first) != extraction_version("LLM", other_model)
    assert extraction_version("LLM", first) != extraction_version("LLM", first, edited)
    assert extraction_version("NLP", first) == extraction_version("NLP", other_model)  # NLP does not use the model
    assert extraction_version("NLP", first).startswith("nlp-") and extraction_version("LLM", first).startswith("llm-")


def test_list_bullets_in_front_of_a_name_are_not_part_of_it():
    extraction = extract_nlp("The types are:\n• OCTET STRING is a type.\n• BIT STRING holds bits.")
    assert {"OCTET STRING", "BIT STRING"} <= {e.name for e in extraction.entities}
    assert not any(e.name.startswith("•") for e in extraction.entities)
