"""Chunks longer than the embedder's window are split to fit it, counted with its own tokenizer."""

from __future__ import annotations

from ragtopics.documents.uploads import get_document
from ragtopics.ingest.chunking import Piece
from ragtopics.ingest.token_cap import CONTEXT_LINE_TOKENS, cap_tokens, trim_to_tokens
from ragtopics.topics.topics import create_topic
from ragtopics.ui.upload_tab import documents_table
from tests.ingest.test_ingest import stored_chunks, upload

FILLER = (
    "The grain market of the old harbour town opened at dawn, when barges from the upper river unloaded rye, "
    "barley and oats onto the stone quay. Merchants weighed each sack on brass scales kept by the guild, and "
    "the clerk wrote every weight into a ledger bound in red leather. Prices rose in dry summers and fell after "
    "wet ones, and the guild posted them on a board beside the customs house. "
)
FACT = "The lighthouse keeper's cat was named Biscuit and slept every night beside the great lens."
#: About 3,000 characters in one paragraph; the fact is only in its last sentence.
PARAGRAPH = (FILLER * 8)[: 3000 - len(FACT) - 1].rsplit(". ", 1)[0] + ". " + FACT


def words(texts: list[str]) -> list[int]:
    """A stand-in tokenizer: one token per word plus two special tokens."""
    return [len(t.split()) + 2 for t in texts]


def test_a_chunk_within_the_window_is_kept_as_it_is():
    piece = Piece("short text here", 0, 15)
    capped = cap_tokens([piece], max_tokens=40, count_tokens=words)
    assert capped.pieces == [piece] and capped.split_chunks == 0 and capped.note() == ""


def test_a_long_chunk_is_split_into_parts_that_fit_and_keep_every_word():
    text = " ".join(f"w{i}." if i % 7 == 6 else f"w{i}" for i in range(100))
    capped = cap_tokens([Piece(text, 5, 5 + len(text), records=3)], max_tokens=22, count_tokens=words)
    assert capped.split_chunks == 1 and len(capped.pieces) == 1 + capped.added_chunks
    assert all(words([p.text])[0] <= 22 for p in capped.pieces)
    assert " ".join(p.text for p in capped.pieces) == text
    assert all(text[p.start - 5 : p.end - 5] == p.text and p.records == 3 for p in capped.pieces)
    assert capped.note() == f"1 chunk split to fit the embedder's 22-token window ({capped.added_chunks} more chunks)"


def test_a_reserve_leaves_room_for_the_context_line():
    text = " ".join(f"w{i}" for i in range(60))
    capped = cap_tokens([Piece(text, 0, len(text))], max_tokens=40, count_tokens=words, reserve_tokens=20)
    assert all(words([p.text])[0] <= 20 for p in capped.pieces)


def test_an_unknown_window_caps_nothing():
    pieces = [Piece("x " * 1000, 0, 2000)]
    assert cap_tokens(pieces, max_tokens=None, count_tokens=None).pieces == pieces


def test_trim_to_tokens_cuts_between_words():
    assert words([trim_to_tokens("a b c d e f g h i j", 6, words)])[0] <= 6
    assert trim_to_tokens("a b", 6, words) == "a b"


def test_real_tokenizer_counts_word_pieces(embedder):
    assert embedder.max_tokens == 256
    text = FILLER * 8 + FACT
    capped = cap_tokens([Piece(text, 0, len(text))], max_tokens=embedder.max_tokens, count_tokens=embedder.count_tokens)
    assert capped.split_chunks == 1
    assert max(embedder.count_tokens([p.text for p in capped.pieces])) <= 256


def test_the_tail_of_a_long_paragraph_is_found_by_dense_search(rt, run_jobs, embedder):
    topic = create_topic(rt, "Long paragraphs", settings={"chunk_size": 4000, "chunk_overlap": 0, "retrieval_strategy": "DENSE"})
    paragraph = PARAGRAPH
    assert 2900 <= len(paragraph) <= 3100 and embedder.count_tokens([paragraph])[0] > 256
    doc, _ = upload(rt, topic, "harbour.txt", paragraph.encode())
    upload(rt, topic, "boats.txt", b"Fishing boats returned to the harbour in the evening with herring and cod.")
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error
    chunks = stored_chunks(rt, topic, doc.id)
    assert len(chunks) > 1 and max(embedder.count_tokens([c["text"].decode() for c in chunks])) <= 256

    # Before the split, the paragraph's one vector saw only its first ~1,000 characters and the boats won.
    question = rt.gateway.embed(["What was the name of the lighthouse keeper's cat?"])[0]
    top = rt.chunk_index(topic.id).search_vector(question, 1)[0]
    assert "Biscuit" in top.text

    indexed_with = row.indexed_with
    assert indexed_with["chunks_split_to_fit"] == 1 and indexed_with["embedding_window_tokens"] == 256
    [listed] = [r for r in documents_table(rt, topic.name) if r[0] == "harbour.txt"]
    assert "1 chunk split to fit the embedder's 256-token window" in listed[4]


def test_semantic_context_line_counts_against_the_window(rt, run_jobs, scripted_llm, embedder):
    scripted_llm.replies["context_line"] = "This passage " + "describes the harbour grain market " * 30
    topic = create_topic(rt, "Semantic long", settings={"chunking_strategy": "SEMANTIC", "chunk_size": 4000, "chunk_overlap": 0})
    doc, _ = upload(rt, topic, "harbour.txt", (FILLER * 8 + FACT).encode())
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed"
    chunks = stored_chunks(rt, topic, doc.id)
    embedded = [c["context"].decode() + "\n" + c["text"].decode() for c in chunks]
    assert len(chunks) > 1 and max(embedder.count_tokens(embedded)) <= 256
    assert max(embedder.count_tokens([c["context"].decode() for c in chunks])) <= CONTEXT_LINE_TOKENS


def test_a_long_table_is_split_between_rows_and_every_part_repeats_the_header():
    rows = [f"| item {i} | code {i} |" for i in range(40)]
    text = "\n".join(["| Item | Code |", "|---|---|", *rows])
    capped = cap_tokens([Piece(text, 0, len(text))], max_tokens=60, count_tokens=words)
    assert capped.split_chunks == 1 and len(capped.pieces) > 2
    assert all(p.text.startswith("| Item | Code |\n|---|---|\n") for p in capped.pieces)
    assert [line for p in capped.pieces for line in p.text.split("\n")[2:]] == rows
