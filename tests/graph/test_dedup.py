"""Deduplication: the spec's rules in order, the homonym guards, the model step and the HotpotQA check."""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter

import pytest
from rapidfuzz import fuzz

from ragtopics.graph.dedup import (
    DEDUPLICATION,
    FUZZY_GREY_MIN,
    MAX_DESCRIPTION_CHARS,
    MODEL_BATCH_PAIRS,
    CandidatePair,
    DedupDecisions,
    ask_model,
    deduplicate,
    fuzzy_candidates,
    fuzzy_verdict,
    initials,
    is_abbreviation,
    merge_descriptions,
    name_form,
    number_key,
)
from ragtopics.graph.model import Entity, entity_id_for, normalize_name
from ragtopics.llm.embedding import LocalEmbedder
from ragtopics.llm.gateway import ModelGateway
from ragtopics.settings.env import Settings
from ragtopics.tracing.trace import Trace


def ent(name: str, type_: str = "PERSON", description: str = "", aliases: tuple[str, ...] = (), chunk: str = "c1") -> Entity:
    return Entity(entity_id_for(name, type_), name, type_, description, aliases, frozenset({chunk}))


def kept(result, entity: Entity) -> str:
    return result.mapping[entity.id]


def records(result) -> set[tuple[str, str, str]]:
    return {(m.kept, m.merged, m.rule) for m in result.merges}


# ------------------------------------------------------------------- rules 1-2


def test_same_name_lands_on_the_existing_entity_with_its_id_and_both_chunks():
    existing = ent("Marie Curie", description="Physicist who won two Nobel prizes.", chunk="c1")
    again = ent("Marie Curie", description="Born in Warsaw in 1867.", chunk="c7")
    result = deduplicate([again], [existing])
    assert kept(result, again) == existing.id
    (merged,) = result.entities
    assert merged.id == existing.id and merged.name == "Marie Curie"
    assert merged.chunk_ids == {"c1", "c7"}
    assert merged.description == "Physicist who won two Nobel prizes. Born in Warsaw in 1867."
    assert records(result) == {("Marie Curie", "Marie Curie", "same_name")}


def test_case_spaces_and_punctuation_are_the_same_name_and_the_first_seen_name_is_kept():
    names = [ent("Pump P-12", "PART", chunk="c1"), ent("pump p12", "PART", chunk="c2"), ent("PUMP  P 12", "PART", chunk="c3")]
    result = deduplicate(names, [])
    (pump,) = result.entities
    assert pump.name == "Pump P-12" and pump.aliases == ("pump p12", "PUMP  P 12")
    assert pump.chunk_ids == {"c1", "c2", "c3"}
    assert records(result) == {("Pump P-12", "pump p12", "normalized"), ("Pump P-12", "PUMP  P 12", "normalized")}
    assert set(result.mapping.values()) == {pump.id}


def test_an_existing_name_is_canonical_even_when_an_incoming_variant_comes_first():
    existing = ent("marie curie")
    result = deduplicate([ent("Marie Curie"), ent("MARIE CURIE")], [existing])
    (merged,) = result.entities
    assert merged.name == "marie curie" and merged.id == existing.id
    assert {m.rule for m in result.merges} == {"normalized"}


def test_name_form_without_spaces_is_normalize_name(hotpot):
    corpus, _ = hotpot
    tricky = ["Straße", "İstanbul", "ﬁre ﬂy", "x\u00a0y", "under_score", "Ærø", "C3-PO", "Korçë", "¼ mile"]
    assert all(name_form(n).replace(" ", "") == normalize_name(n) for n in [*corpus, *tricky])
    assert name_form("Curie, Marie") == "curie marie"


# ------------------------------------------------------------------- rule 3


def test_initials_of_a_multi_word_name_are_an_abbreviation():
    ibm = ent("International Business Machines", "ORGANIZATION")
    usa = ent("United States of America", "PLACE")
    result = deduplicate([ent("IBM", "ORGANIZATION"), ent("I.B.M.", "ORGANIZATION"), ent("USA", "PLACE")], [ibm, usa])
    assert records(result) == {
        ("International Business Machines", "IBM", "abbreviation"),
        ("International Business Machines", "I.B.M.", "abbreviation"),
        ("United States of America", "USA", "abbreviation"),
    }
    ibm_out = next(e for e in result.entities if e.id == ibm.id)
    assert ibm_out.aliases == ("IBM", "I.B.M.")


def test_a_surname_alone_is_not_an_abbreviation_of_a_full_name():
    result = deduplicate([ent("Tolkien"), ent("J. R. R. Tolkien")], [])
    assert len(result.entities) == 2 and result.merges == [] and result.unclear == []


def test_an_abbreviation_of_two_different_names_is_unclear_not_merged():
    boards = [ent("European Central Bank", "ORGANIZATION"), ent("European Cricket Board", "ORGANIZATION")]
    result = deduplicate([ent("ECB", "ORGANIZATION")], boards)
    assert result.merges == []
    assert {(u.name, u.other, u.reason) for u in result.unclear} == {
        ("European Central Bank", "ECB", "abbreviation of several names"),
        ("European Cricket Board", "ECB", "abbreviation of several names"),
    }


def test_a_recorded_alias_merges_both_ways():
    bank = ent("European Central Bank", "ORGANIZATION", aliases=("ECB",))
    result = deduplicate([ent("ECB", "ORGANIZATION")], [bank])
    assert records(result) == {("European Central Bank", "ECB", "alias")}
    tools = ent("Kestrel Tools", "ORGANIZATION")
    result = deduplicate([ent("Kestrel Tools GmbH", "ORGANIZATION", aliases=("Kestrel Tools",))], [tools])
    assert records(result) == {("Kestrel Tools", "Kestrel Tools GmbH", "alias")}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("IBM", True),
        ("I.B.M.", True),
        ("U. S. A.", True),
        ("AT&T", True),
        ("Ibm", False),
        ("DEMON DICE", False),
        ("1984", False),
        ("A", False),
        ("ABCDEFGHIJK", False),
    ],
)
def test_what_looks_like_an_abbreviation(name, expected):
    assert is_abbreviation(name) is expected


def test_initials_skip_small_words_and_split_hyphens():
    assert initials("United States of America") == {"usoa", "usa"}
    assert initials("Hewlett-Packard") == {"hp"}
    assert initials("Tolkien") == set()


# ------------------------------------------------------------------- rule 4


def test_typos_merge_by_fuzzy_score_or_swapped_letters():
    existing = [ent("Tolkien"), ent("Chiang Kai-shek Memorial Hall", "PLACE")]
    incoming = [ent("Tolkein"), ent("Chiang Kai-shek Memorial Hal", "PLACE"), ent("Curie, Marie"), ent("Marie Curie")]
    result = deduplicate(incoming, existing)
    scores = {(m.kept, m.merged): (m.rule, round(m.score, 3)) for m in result.merges}
    assert scores[("Tolkien", "Tolkein")] == ("fuzzy", 0.857)  # a swap: merged below the threshold
    assert scores[("Chiang Kai-shek Memorial Hall", "Chiang Kai-shek Memorial Hal")] == ("fuzzy", 0.982)
    assert scores[("Curie, Marie", "Marie Curie")] == ("fuzzy", 1.0)  # the same words in another order


def test_the_scorer_does_not_reward_a_name_inside_a_longer_one():
    # WRatio would give 90 here; the plain ratio keeps a contained name out of the merge range.
    assert fuzz.WRatio("Paris", "Paris Hilton") >= 90
    assert fuzz.ratio(name_form("Paris"), name_form("Paris Hilton")) < FUZZY_GREY_MIN * 100


@pytest.mark.parametrize(
    ("name", "other", "expected"),
    [
        ("Pump P-12", "Pump P-13", None),
        ("World War I", "World War II", None),
        ("Louis XIV", "Louis XVI", None),
        ("Premier of South Australia", "Deputy Premier of South Australia", ("unclear", "adds words")),
        ("Lee Roy Selmon", "Lee Roy Selmon's", ("unclear", "adds words")),
        ("Jaguar", "Jaguars", ("unclear", "singular and plural")),
        ("Gambia", "Zambia", ("unclear", "grey band")),
        ("Flag to Flag", "Flag to Falg", ("merge", "fuzzy")),
        ("Wamboin", "Wambion", ("merge", "swapped letters")),
    ],
)
def test_fuzzy_verdicts_and_their_guards(name, other, expected):
    assert fuzzy_verdict(name, other, fuzz.ratio(name_form(name), name_form(other)) / 100) == expected


def test_number_key_reads_digits_and_roman_numerals_not_initials():
    assert number_key("Pump P-012") == ("12",)
    assert number_key("Louis XIV") == ("XIV",)
    assert number_key("C. S. Lewis") == () and number_key("Washington DC") == ()


# ------------------------------------------------------------------- homonym guards


def test_homonyms_of_different_types_stay_apart():
    existing = [ent("Jaguar", "ANIMAL"), ent("Paris", "PLACE"), ent("Washington", "PLACE")]
    incoming = [
        ent("Jaguar", "ORGANIZATION"),
        ent("Paris Hilton", "PERSON"),
        ent("George Washington", "PERSON"),
        ent("Jaguar", "ANIMAL", chunk="c2"),
    ]
    result = deduplicate(incoming, existing)
    assert len({result.mapping[e.id] for e in incoming}) == 4
    assert result.mapping[incoming[3].id] == existing[0].id
    assert ("Jaguar", "Jaguar", "types ANIMAL and ORGANIZATION") in result.kept_apart
    assert records(result) == {("Jaguar", "Jaguar", "same_name")}


def test_two_graph_entities_are_never_merged_through_a_new_name():
    existing = [ent("Marie Curie"), ent("Marie Curiie")]  # a duplicate already in the graph
    newcomer = ent("Marie Curiee")  # close enough to both to merge
    result = deduplicate([newcomer], existing)
    assert result.mapping[newcomer.id] == existing[0].id  # the better match (0.96 against 0.92)
    assert [e.name for e in result.entities] == ["Marie Curie"]
    assert ("Marie Curiie", "Marie Curiee", "both already in the graph") in result.kept_apart


@pytest.fixture(scope="module")
def minilm():
    model = LocalEmbedder()
    model.load()
    return model.embed


def test_clearly_different_descriptions_keep_close_names_apart(minilm):
    writer = ent("Tolkien", description="English writer, author of The Lord of the Rings.")
    farmer = ent("Tolkein", description="A dairy farmer from Bavaria fined for tax evasion.")
    result = deduplicate([farmer], [writer], embed=minilm)
    assert result.mapping[farmer.id] == farmer.id and result.merges == []
    assert [k.reason.split(" (")[0] for k in result.kept_apart] == ["descriptions differ"]
    assert deduplicate([farmer], [writer]).merges != []  # names alone would merge them


def test_descriptions_that_disagree_make_an_abbreviation_unclear(minilm):
    bank = ent("European Central Bank", "ORGANIZATION", "The central bank of the euro area, based in Frankfurt.")
    cricket = ent("ECB", "ORGANIZATION", "The governing body of cricket in Europe.")
    result = deduplicate([cricket], [bank], embed=minilm)
    assert result.merges == []
    (pair,) = result.unclear
    assert pair.reason.startswith("descriptions disagree")


def test_descriptions_that_agree_keep_true_matches(minilm):
    existing = [
        ent("Tolkien", description="English writer and philologist."),
        ent("International Business Machines", "ORGANIZATION", "The company that built the System/360 mainframe."),
        ent("Apollo Theatre", "PLACE", "A music hall in Harlem, New York, opened in 1914."),
    ]
    incoming = [
        ent("Tolkein", description="Wrote The Hobbit."),
        ent("IBM", "ORGANIZATION", "An American technology company based in Armonk."),
        ent("Apollo Theater", "PLACE", "A theatre in Harlem where Ella Fitzgerald won an amateur night."),
    ]
    result = deduplicate(incoming, existing, embed=minilm)
    assert [result.mapping[e.id] for e in incoming] == [e.id for e in existing]
    assert {m.rule for m in result.merges} == {"fuzzy", "abbreviation"}


# ------------------------------------------------------------------- rule 5: the model

GREY = [("Wangliang", "Wapgliang"), ("Charmed", "Charmld"), ("Gambia", "Zambia"), ("Kestrel Tool", "Kestrel Tools")]
SAME = {frozenset(p) for p in GREY[:2]}


def scripted_decisions(body: dict) -> str:
    """Decide every listed pair by its names: the first two pairs of GREY are the same thing."""
    prompt = body["messages"][-1]["content"]
    decisions = []
    for number, a, b in re.findall(r'^\[(\d+)\] "([^"]+)" \([A-Z]+\).*?\|  "([^"]+)"', prompt, flags=re.MULTILINE):
        same = frozenset({a, b}) in SAME
        decisions.append({"pair": int(number), "same": same, "reason": "same place" if same else "two countries"})
    return json.dumps({"decisions": decisions})


@pytest.fixture
def gateway(scripted_llm, tmp_path) -> ModelGateway:
    scripted_llm.reset()
    settings = Settings(
        RAGTOPICS_DATA_DIR=tmp_path, LLM_BASE_URL=scripted_llm.base_url, LLM_MODEL="scripted", LLM_TIMEOUT_S=10, _env_file=None
    )
    return ModelGateway(settings, embedder=LocalEmbedder())


def test_without_a_model_grey_pairs_are_listed_and_not_merged():
    incoming = [ent(n, "PLACE") for pair in GREY for n in pair]
    result = deduplicate(incoming, [])
    assert result.merges == [] and len(result.entities) == 8
    assert {(u.name, u.other, u.reason) for u in result.unclear} == {
        ("Wangliang", "Wapgliang", "grey band"),
        ("Charmed", "Charmld", "grey band"),
        ("Gambia", "Zambia", "grey band"),
        ("Kestrel Tool", "Kestrel Tools", "singular and plural"),
    }
    assert all(FUZZY_GREY_MIN <= u.score < 1 and u.type == "PLACE" for u in result.unclear)


def test_the_model_decides_several_pairs_in_one_call(gateway, scripted_llm):
    scripted_llm.replies[DEDUPLICATION.name] = scripted_decisions
    incoming = [ent(n, "PLACE", description=f"{n} is mentioned in the report.") for pair in GREY for n in pair]
    trace = Trace("upload", "report.pdf")
    result = deduplicate(incoming, [], model=lambda pairs: ask_model(gateway, pairs, trace), trace=trace)
    (request,) = scripted_llm.prompts(DEDUPLICATION.name)
    prompt = request["messages"][-1]["content"]
    assert all(f'"{a}" (PLACE): {a} is mentioned' in prompt for pair in GREY for a in pair)
    assert records(result) == {("Wangliang", "Wapgliang", "model"), ("Charmed", "Charmld", "model")}
    assert {k.reason for k in result.kept_apart} == {"model: two countries"}
    assert result.unclear == [] and len(result.entities) == 6
    event = next(e for e in trace.events if e.step == "deduplicate")
    assert event.data["model_calls"] == 1 and ["Wangliang", "Wapgliang", "model", 0.889] in event.data["merges"]
    assert any(e.step == "model_call" and e.parent == event.id for e in trace.events)


def test_many_unclear_pairs_are_sent_in_batches(gateway, scripted_llm):
    scripted_llm.replies[DEDUPLICATION.name] = json.dumps({"decisions": []})
    words = ["Harbour", "Meadow", "Granite", "Falcon", "Willow", "Copper", "Thistle", "Orchard", "Saffron", "Juniper"]
    incoming = [ent(f"{w} Mill", "PLACE") for w in words] + [ent(f"{w} Mills", "PLACE") for w in words]
    sizes = []

    def model(pairs: list[CandidatePair]) -> DedupDecisions:
        sizes.append(len(pairs))
        return ask_model(gateway, pairs)

    result = deduplicate(incoming, [], model=model)
    assert sizes == [MODEL_BATCH_PAIRS, 10 - MODEL_BATCH_PAIRS]  # ten "X Mill" / "X Mills" pairs
    assert len(scripted_llm.prompts(DEDUPLICATION.name)) == 2
    assert len(result.unclear) == 10 and result.merges == []  # no decisions: nothing merged, all still listed


def test_a_topics_deduplication_prompt_override_reaches_the_model(rt, scripted_llm):
    from ragtopics.graph.ingest import deduplicate_against_graph, graph_store
    from ragtopics.prompts.resolve import resolve_prompts, set_prompt
    from ragtopics.topics.topics import create_topic

    assert "deduplication" in resolve_prompts(rt)  # listed on the Prompts tab with the others
    topic = create_topic(rt, "Places", kind="graphrag")
    other = create_topic(rt, "Other places", kind="graphrag")
    set_prompt(rt, topic.id, "deduplication", "Our gazetteer's rule: a one-letter slip is the same place.\n$pairs")
    scripted_llm.replies[DEDUPLICATION.name] = scripted_decisions
    incoming = [ent("Wangliang", "PLACE", "A village in the report."), ent("Wapgliang", "PLACE", "A village in the report.")]

    result = deduplicate_against_graph(rt, graph_store(rt, topic), incoming, Trace("upload", "report.txt"))
    deduplicate_against_graph(rt, graph_store(rt, other), incoming, Trace("upload", "report.txt"))

    overridden, default = [r["messages"][-1]["content"] for r in scripted_llm.prompts(DEDUPLICATION.name)]
    assert overridden.startswith('Our gazetteer\'s rule: a one-letter slip is the same place.\n[1] "Wangliang" (PLACE)')
    assert default.startswith(DEDUPLICATION.text.split("$")[0])  # the other Topic keeps the default
    assert records(result) == {("Wangliang", "Wapgliang", "model")}


def test_an_unusable_model_reply_leaves_the_pairs_unclear(gateway, scripted_llm):
    scripted_llm.replies[DEDUPLICATION.name] = "not JSON at all"
    trace = Trace("upload", "report.pdf")
    result = deduplicate(
        [ent("Gambia", "PLACE"), ent("Zambia", "PLACE")], [], model=lambda pairs: ask_model(gateway, pairs, trace), trace=trace
    )
    assert result.merges == [] and [(u.name, u.other) for u in result.unclear] == [("Gambia", "Zambia")]
    event = next(e for e in trace.events if e.step == "deduplicate")
    assert event.data["model_failures"] == 1 and "deduplication reply did not match" in event.data["model_errors"][0]


# ------------------------------------------------------------------- merged entities


def test_merged_description_adds_only_new_sentences_and_is_bounded():
    assert (
        merge_descriptions(["Pump P-12 feeds line 3.", "pump p-12 feeds line 3. It was serviced in March."])
        == "Pump P-12 feeds line 3. It was serviced in March."
    )
    long = [f"Sentence number {i} about the pump." for i in range(100)]
    merged = merge_descriptions([" ".join(long[:50]), " ".join(long[50:])])
    assert len(merged) <= MAX_DESCRIPTION_CHARS and merged.startswith(long[0]) and merged.endswith(".")
    assert merge_descriptions(["", "  ", "Only one."]) == "Only one."


def test_every_incoming_id_is_mapped_and_every_merge_recorded():
    incoming = [ent("Marie Curie"), ent("marie curie"), ent("Tolkein"), ent("Gambia", "PLACE"), ent("IBM", "ORGANIZATION")]
    existing = [ent("Tolkien"), ent("International Business Machines", "ORGANIZATION")]
    result = deduplicate(incoming, existing)
    assert set(result.mapping) == {e.id for e in incoming}
    assert {m.merged for m in result.merges} == {"marie curie", "Tolkein", "IBM"}
    kept_ids = {e.id for e in result.entities}
    assert set(result.mapping.values()) == kept_ids


# ------------------------------------------------------------------- blocking and the HotpotQA titles


def perturb(name: str, rng: random.Random) -> str:
    """Case, punctuation, or one typo at a letter (substitution, deletion, insertion, swap)."""
    kind = rng.choice(["case", "punctuation", "typo", "typo"])
    if kind == "case":
        return rng.choice([name.lower(), name.upper(), name.swapcase()])
    if kind == "punctuation":
        stripped = "".join(ch for ch in name if ch.isalnum() or ch.isspace())
        return stripped if stripped != name else name.replace(" ", "-", 1) if " " in name else name + "."
    at = rng.choice([i for i, ch in enumerate(name) if ch.isalpha()] or [0])
    op = rng.choice("sdit")
    letter = rng.choice([c for c in string.ascii_lowercase if c != name[at].lower()])
    if op == "s":
        return name[:at] + letter + name[at + 1 :]
    if op == "d" and len(name) > 1:
        return name[:at] + name[at + 1 :]
    if op == "t" and at + 1 < len(name) and name[at + 1].isalpha() and name[at + 1] != name[at]:
        return name[:at] + name[at + 1] + name[at] + name[at + 2 :]
    return name[:at] + letter + name[at:]


@pytest.fixture(scope="module")
def perturbed_titles(hotpot_titles):
    rng = random.Random(11)
    originals = hotpot_titles[:500]
    return originals, [perturb(t, rng) for t in originals]


@pytest.fixture(scope="module")
def hotpot_titles():
    from tests.conftest import EVAL_DIR

    return list(json.loads((EVAL_DIR / "corpus.json").read_text()))


def test_hotpotqa_perturbed_titles_merge_back_and_the_originals_stay_distinct(perturbed_titles, capsys):
    originals, copies = perturbed_titles
    entities = [ent(n, "CONCEPT", chunk=f"c{i}") for i, n in enumerate(originals + copies)]
    result = deduplicate(entities, [])
    group = [result.mapping[e.id] for e in entities]
    assert len(set(group[:500])) == 500  # no two originals merged
    precision, recall = pairwise(group, list(range(500)) * 2)
    with capsys.disabled():
        print(
            f"\nHotpotQA 500 titles + 500 perturbed copies: precision {precision:.3f}, recall {recall:.3f}, "
            f"unclear {len(result.unclear)}"
        )
    assert precision == 1.0 and recall >= 0.97


def pairwise(group: list, origin: list[int]) -> tuple[float, float]:
    """Precision and recall of the merged pairs: a pair is right when both names have one origin."""
    pairs = lambda counts: sum(c * (c - 1) // 2 for c in counts.values())  # noqa: E731
    right = pairs(Counter(zip(group, origin)))
    return right / max(pairs(Counter(group)), 1), right / max(pairs(Counter(origin)), 1)


def test_blocking_finds_the_same_groups_as_all_pairs(perturbed_titles, hotpot_titles):
    originals, copies = perturbed_titles
    names = originals + copies + hotpot_titles[500:]
    forms = [name_form(n) for n in names]
    blocked = set(fuzzy_candidates(names))
    every = {
        (i, j)
        for i in range(len(names))
        for j in range(i + 1, len(names))
        if fuzz.ratio(forms[i], forms[j], score_cutoff=FUZZY_GREY_MIN * 100)
    }
    one_edit = {(i, j) for i, j in every if _edits(forms[i].replace(" ", ""), forms[j].replace(" ", "")) <= 1}
    assert one_edit <= blocked  # one edit apart: always found, however short the names
    verdicts = {(i, j): fuzzy_verdict(names[i], names[j], fuzz.ratio(forms[i], forms[j]) / 100) for i, j in every}
    merges = {pair for pair, verdict in verdicts.items() if verdict and verdict[0] == "merge"}
    assert merges <= blocked and len(blocked) < len(names) ** 2 / 200


def _edits(a: str, b: str) -> int:
    from rapidfuzz.distance import Levenshtein

    return Levenshtein.distance(a, b)


def test_incoming_names_probe_and_existing_pairs_are_skipped():
    names = ["Tolkien", "Tolkein", "Tolkin"]
    assert fuzzy_candidates(names, probe=[False, False, True]) == [(0, 2), (1, 2)]
    assert fuzzy_candidates(names, probe=[False, False, False]) == []
