"""Extractive answers (quoted sentences with citations) and the repetition guard of written answers."""

from __future__ import annotations

import pytest

from ragtopics.answer.attachments import read_attachment
from ragtopics.answer.extractive import (
    Passage,
    choose_quotes,
    compose_answer,
    compose_themes,
    lead_line,
    rank_sentences,
    split_sentences,
    theme_quotes,
)
from ragtopics.answer.history import session_turns, turn_trace
from ragtopics.answer.repetition import STOPPED_NOTE, RepetitionGuard, trimmed
from ragtopics.answer.turn import EXTRACTIVE_NOTE_BUNDLED, EXTRACTIVE_NOTE_CHOSEN, ask
from ragtopics.errors import InvalidSettingError
from ragtopics.topics.topics import create_topic
from tests.ingest.test_ingest import upload

KETTLE = b"""# Kettle K-2 user manual

The Kettle K-2 holds 1.7 litres and boils a full jug in about four minutes.
Always place the kettle on its base before switching it on.

## Cleaning and care

Descale the Kettle K-2 every four weeks in hard-water areas, and every three months where the water is soft.
Use citric acid or a descaler made for kettles; never use vinegar, which leaves a taste.
Wipe the outside with a damp cloth. Do not put the kettle in a dishwasher.

## Warranty

The warranty lasts two years from the date of purchase and covers the heating element.
"""
QUESTION = "How often should the Kettle K-2 be descaled?"
SHIPPING = b"Orders ship within three working days. Returns are accepted for thirty days after delivery."


def final(updates):
    *_, last = updates
    return last


def embed_with(embedder):
    return lambda texts: embedder.embed(texts)


def test_sentences_are_split_at_lines_and_sentence_ends_and_stubs_dropped():
    sentences = split_sentences(KETTLE.decode())
    assert "Kettle K-2 user manual" not in sentences and "Warranty" not in sentences  # headings of < 4 words
    assert "Wipe the outside with a damp cloth." in sentences and "Do not put the kettle in a dishwasher." in sentences
    assert sentences[0].startswith("The Kettle K-2 holds 1.7 litres")  # "1.7" does not end a sentence


def test_the_sentence_that_answers_is_quoted_first_with_its_neighbour_in_document_order(embedder):
    passages = [Passage("S1", KETTLE.decode(), 0), Passage("S2", SHIPPING.decode(), 1)]
    ranked = rank_sentences(QUESTION, passages, embed_with(embedder))
    assert ranked[0].text.startswith("Descale the Kettle K-2 every four weeks")
    quotes = choose_quotes(ranked)
    assert all(q.code == "S1" for q in quotes) and len(quotes) <= 2  # the shipping note is far below the best
    assert [q.position for q in quotes] == sorted(q.position for q in quotes)
    text = compose_answer(quotes, lead=lead_line([(q.code, ["kettle-manual.md"]) for q in quotes], fallback="-"), note="note")
    assert text.startswith("From [S1]:\n\n> ") and text.endswith("[S1]\n\nnote")
    assert "Descale the Kettle K-2 every four weeks" in text


def test_an_overview_from_summaries_gives_each_community_one_titled_line_in_retrieval_order(embedder):
    passages = [
        Passage(
            "S1",
            "Community: Jazz, Miles Davis and Blue Note\n- Miles Davis recorded for Blue Note.\n"
            "- Blue Note - Miles Davis: Blue Note is a jazz record label founded in 1939.",
            0,
        ),
        Passage("S2", "Community: Football and Leeds United\n- Leeds United plays football in Leeds.", 1),
    ]
    themes = theme_quotes("Which record label is a jazz label?", passages, embed_with(embedder))
    assert [title for title, _ in themes] == ["Jazz, Miles Davis and Blue Note", "Football and Leeds United"]
    assert (
        themes[0][1].text == "Blue Note is a jazz record label founded in 1939."
    )  # the relationship's "a - b: " head is dropped
    text = compose_themes(themes, lead="From the community summaries of the graph:", note="")
    assert text.splitlines()[2] == "> **Jazz, Miles Davis and Blue Note**: Blue Note is a jazz record label founded in 1939. [S1]"
    assert compose_themes([], lead="x", note="y") == ""


def test_an_overview_quotes_each_summarys_most_representative_sentence(embedder):
    # An overview question names nothing to be close to; the sentence nearest the summary's centroid stands for it.
    body = (
        "- Miles Davis recorded Kind of Blue, a jazz album.\n- John Coltrane played jazz saxophone with Miles Davis.\n"
        "- Blue Note is a jazz record label.\n- The label's offices were on a street in New York."
    )
    passages = [Passage("S1", "Community: Jazz, Miles Davis and Blue Note\n" + body, 0)]
    [(title, quote)] = theme_quotes("What are the main themes of these documents?", passages, embed_with(embedder), overview=True)
    assert title == "Jazz, Miles Davis and Blue Note" and "jazz" in quote.text and "offices" not in quote.text


def test_codes_and_rare_question_words_outrank_a_sentence_that_only_sounds_alike(embedder):
    text = (
        "Pump P-1 must be serviced every 500 hours. Pump P-2 must be serviced every 800 hours. "
        "All pumps need regular service by a technician."
    )
    ranked = rank_sentences("When must Pump P-2 be serviced?", [Passage("S1", text, 0)], embed_with(embedder))
    assert ranked[0].text == "Pump P-2 must be serviced every 800 hours."


def test_the_lead_line_cites_each_file_once():
    assert lead_line([("S1", ["a.md"]), ("S2", ["a.md"]), ("S3", ["b.md"])], fallback="-") == "From [S1] and [S3]:"
    assert lead_line([("S1", ["a.md"]), ("S2", ["b.md"]), ("S3", ["c.md"])], fallback="-") == "From [S1], [S2] and [S3]:"
    assert lead_line([("S1", [])], fallback="From the summaries:") == "From the summaries:"
    assert compose_answer([], lead="From [S1]:", note="n") == ""


def test_a_rag_topic_with_the_bundled_model_quotes_and_cites_without_any_model_call(reconfigure, run_jobs, scripted_llm):
    # No LLM_BASE_URL: the Language Model role is the bundled model, whose server is not even running here.
    rt = reconfigure(LLM_BASE_URL=None, LOCAL_LLM_PORT=1)
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "kettle-manual.md", KETTLE)
    upload(rt, topic, "shipping.txt", SHIPPING)
    run_jobs()
    updates = list(ask(rt, topic, QUESTION))
    result = updates[-1]
    assert result.text.startswith("From [kettle-manual.md]:\n\n> ")
    assert (
        "Descale the Kettle K-2 every four weeks in hard-water areas, and every three months where the water is soft. [kettle-manual.md]"
        in result.text
    )
    assert result.text.endswith(EXTRACTIVE_NOTE_BUNDLED) and "LLM_BASE_URL" in result.text
    assert [s.file for s in result.sources][:1] == ["kettle-manual.md"] and result.sources[0].reason == "cited"
    assert "shipping.txt" not in {s.file for s in result.sources}
    assert not result.no_answer and scripted_llm.prompts("answer") == []
    growing = [u.text for u in updates[:-1] if u.text]
    assert len(growing) > 3 and all(result.text.startswith(t.rstrip()) for t in growing)  # streamed word by word
    turn = session_turns(rt, result.session_id)[-1]
    assert turn.answer == result.text  # saved like any answer
    answer_step = next(e["data"] for e in turn_trace(rt, turn.id) if e["step"] == "answer")
    best = max(answer_step["quotes"], key=lambda q: q["score"])
    assert answer_step["method"] == "extractive" and best["sentence"].startswith("Descale")
    assert "first_token" in result.timings_ms


def test_extractive_answers_honour_min_similarity_and_the_no_answer_response(reconfigure, run_jobs, scripted_llm):
    rt = reconfigure(LLM_BASE_URL=None, LOCAL_LLM_PORT=1)
    topic = create_topic(
        rt,
        "Kettles",
        settings={"retrieval_strategy": "DENSE", "min_similarity_score": 0.5, "no_answer_response": "Nothing on that here."},
    )
    upload(rt, topic, "kettle-manual.md", KETTLE)
    run_jobs()
    result = final(ask(rt, topic, "Who won the football world cup in 1954?"))
    assert result.no_answer and result.text == "Nothing on that here." and result.sources == []


def test_answer_mode_extractive_with_a_real_model_quotes_and_generative_lets_it_write(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Kettles", settings={"answer_mode": "EXTRACTIVE"})
    upload(rt, topic, "kettle-manual.md", KETTLE)
    run_jobs()
    result = final(ask(rt, topic, QUESTION))
    assert result.text.endswith(EXTRACTIVE_NOTE_CHOSEN) and "every four weeks" in result.text
    assert scripted_llm.prompts("answer") == [] and scripted_llm.prompts("source_check") == []
    written = create_topic(rt, "Written", settings={"answer_mode": "GENERATIVE"})
    upload(rt, written, "kettle-manual.md", KETTLE)
    run_jobs()
    scripted_llm.replies["answer"] = "Every four weeks in hard water [S1]."
    assert final(ask(rt, written, QUESTION)).text == "Every four weeks in hard water [kettle-manual.md]."
    with pytest.raises(InvalidSettingError, match="answer_mode"):
        create_topic(rt, "Bad", settings={"answer_mode": "SUMMARY"})


def test_attachment_answers_quote_the_attached_file(reconfigure, run_jobs, scripted_llm):
    rt = reconfigure(LLM_BASE_URL=None, LOCAL_LLM_PORT=1)
    topic = create_topic(rt, "Kettles")
    upload(rt, topic, "shipping.txt", SHIPPING)
    run_jobs()
    attached = read_attachment(KETTLE, "kettle-manual.md", allowed_types=["md"], max_mb=1, model_sees_images=False)
    result = final(ask(rt, topic, QUESTION, attachment=attached, route="ATTACHMENT"))
    assert result.route == "ATTACHMENT" and result.text.startswith("From the attached file kettle-manual.md:\n\n> ")
    assert "every four weeks" in result.text and result.sources == []


def test_graph_ways_quote_chunks_and_global_quotes_community_summaries(reconfigure, run_jobs, scripted_llm):
    from ragtopics.graph.refresh import run_rebuild

    rt = reconfigure(LLM_BASE_URL=None, LOCAL_LLM_PORT=1)
    topic = create_topic(rt, "Plant", kind="graphrag", settings={"graph_extraction_method": "NLP", "min_similarity_score": 0.0})
    upload(rt, topic, "kettle-manual.md", KETTLE)
    upload(rt, topic, "pumps.txt", b"Pump P-1 was built by Acme Pumps in Leeds. Acme Pumps also services Pump P-1 every spring.")
    run_jobs()
    local = final(ask(rt, topic, QUESTION, route="LOCAL"))
    assert local.route == "LOCAL" and "[kettle-manual.md]" in local.text and "every four weeks" in local.text
    assert local.text.endswith(EXTRACTIVE_NOTE_BUNDLED) and local.sources[0].file == "kettle-manual.md"
    path = final(ask(rt, topic, "Who services Pump P-1?", route="PATH"))
    assert "Acme Pumps also services Pump P-1 every spring." in path.text and "[pumps.txt]" in path.text
    run_rebuild(rt, topic.id)
    overview = final(ask(rt, topic, "What do the documents say about the pumps of Acme Pumps?", route="GLOBAL"))
    assert overview.route == "GLOBAL" and not overview.no_answer
    assert overview.text.startswith("From the community summaries of the graph:\n\n> **")  # one titled line per community
    mixed = final(ask(rt, topic, "Who services Pump P-1, and what do the documents say about the pumps?", route="HYBRID"))
    assert mixed.route in ("HYBRID", "LOCAL") and "Acme Pumps" in mixed.text and mixed.text.endswith(EXTRACTIVE_NOTE_BUNDLED)
    assert scripted_llm.prompts("answer") == []


def test_a_looping_answer_is_stopped_early_cut_at_a_sentence_and_says_so(rt, run_jobs, scripted_llm):
    topic = create_topic(rt, "Kettles", settings={"answer_mode": "GENERATIVE", "min_similarity_score": 0.0})
    upload(rt, topic, "kettle-manual.md", KETTLE)
    run_jobs()
    scripted_llm.replies["answer"] = "Descale it every four weeks [S1]. " + "The [S1] is from [S1] and the is from. " * 60
    updates = list(ask(rt, topic, QUESTION))
    result = updates[-1]
    assert result.text == f"Descale it every four weeks [kettle-manual.md]. {STOPPED_NOTE}"
    assert max(len(u.text) for u in updates[:-1]) < 300  # stopped within a few cycles, not at the length limit
    turn = session_turns(rt, result.session_id)[-1]
    stopped = next(e["data"] for e in turn_trace(rt, turn.id) if e["step"] == "repetition_stopped")
    assert stopped["repeated"].startswith("The [S1] is from")
    call = next(e["data"] for e in turn_trace(rt, turn.id) if e["step"] == "model_call" and e["data"]["prompt_name"] == "answer")
    assert call["stopped"] is True  # the stream was closed, not read to its end


def test_the_guard_trips_on_a_repeated_word_and_leaves_ordinary_text_alone(hotpot):
    guard = RepetitionGuard()
    text = "Yes [a.md] [a.md] [a.md] [a.md] [a.md] "
    assert guard.tripped(text) and trimmed(text, guard) == "Yes [a.md]"
    corpus, _ = hotpot
    tripped = [title for title, sentences in corpus.items() if RepetitionGuard().tripped("".join(sentences) + " ")]
    assert len(tripped) <= 2, tripped  # written text almost never repeats a six-word phrase three times
