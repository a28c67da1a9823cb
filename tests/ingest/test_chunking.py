"""Properties of RECURSIVE chunking: size bound, overlap, code blocks whole, no text lost."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragtopics.errors import InvalidSettingError
from ragtopics.ingest.chunking import split_recursive

WORDS = st.text(alphabet="abcdefghij", min_size=1, max_size=12)
SEPARATORS = st.sampled_from([" ", " ", " ", ". ", "\n", "\n\n", ", "])
TEXTS = st.lists(st.tuples(WORDS, SEPARATORS), max_size=300).map(lambda parts: "".join(w + s for w, s in parts))

CODE = "```python\ndef f(x):\n    return x * 2\n\n\nprint(f(21))\n```\n"


def _non_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _covered(text: str, pieces) -> bool:
    """Every non-whitespace character of ``text`` lies inside some piece's span."""
    mask = [False] * len(text)
    for p in pieces:
        assert text[p.start : p.end] == p.text
        for k in range(p.start, p.end):
            mask[k] = True
    return all(mask[k] or text[k].isspace() for k in range(len(text)))


@settings(max_examples=200, deadline=None)
@given(text=TEXTS, size=st.integers(20, 400), ratio=st.floats(0, 0.5))
def test_chunks_respect_size_and_lose_no_text(text, size, ratio):
    overlap = int(size * ratio)
    pieces = split_recursive(text, size=size, overlap=overlap)
    assert all(len(p.text) <= size for p in pieces)
    assert _covered(text, pieces)
    starts = [p.start for p in pieces]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


@settings(max_examples=100, deadline=None)
@given(text=TEXTS, size=st.integers(60, 300))
def test_overlap_repeats_the_end_of_the_previous_chunk(text, size):
    overlap = size // 4
    pieces = split_recursive(text, size=size, overlap=overlap)
    for prev, nxt in itertools.pairwise(pieces):
        shared = prev.end - nxt.start
        # Overlap is never more than asked for; it is cut back only to a word boundary.
        assert shared <= overlap
        if shared > 0:
            assert prev.text.endswith(text[nxt.start : prev.end].rstrip())


def test_overlap_is_close_to_the_setting_on_prose():
    text = " ".join(f"word{i}" for i in range(2000))
    pieces = split_recursive(text, size=200, overlap=50)
    shared = [prev.end - nxt.start for prev, nxt in itertools.pairwise(pieces)]
    assert min(shared) >= 50 - 10  # a word is at most 10 characters here
    assert max(shared) <= 50


def test_without_overlap_chunks_do_not_repeat_text():
    text = "\n\n".join("Sentence one here. Sentence two is there. " * 3 for _ in range(20))
    pieces = split_recursive(text, size=120, overlap=0)
    assert sum(len(_non_space(p.text)) for p in pieces) == len(_non_space(text))


def test_fenced_code_block_larger_than_size_is_split_at_lines_and_each_piece_is_fenced():
    # Changed with the real-world inputs work: a block larger than Chunk Size used to be one
    # oversized chunk; now it is cut at line ends and every piece is a fenced block of its own.
    code = "```python\n" + "".join(f"value_{i} = compute({i})\n" for i in range(40)) + "```\n"
    text = "Intro paragraph.\n\n" + code + "\nOutro text that follows the code.\n"
    pieces = split_recursive(text, size=200, overlap=20)
    code_pieces = [p for p in pieces if "value_" in p.text]
    assert len(code_pieces) > 1 and all(p.is_code for p in code_pieces)
    for p in code_pieces:
        assert p.text.startswith("```python\n") and p.text.endswith("\n```") and len(p.text) <= 200
        assert all(re.fullmatch(r"value_\d+ = compute\(\d+\)", line) for line in p.text.splitlines()[1:-1])
    assert sum(p.text.count("compute(") for p in code_pieces) == 40
    assert not any("compute" in p.text for p in pieces if p not in code_pieces)


def test_small_code_block_shares_a_chunk_and_stays_whole():
    text = "Before.\n\n" + CODE + "\nAfter.\n"
    pieces = split_recursive(text, size=500, overlap=50)
    assert len(pieces) == 1 and CODE.strip() in pieces[0].text


def test_paragraphs_are_preferred_cut_points():
    para = "A short sentence. " * 4
    text = "\n\n".join([para.strip()] * 6)
    pieces = split_recursive(text, size=len(para) + 5, overlap=0)
    assert all(p.text == para.strip() for p in pieces)


def test_a_word_longer_than_size_is_cut_hard():
    text = "x" * 250
    pieces = split_recursive(text, size=100, overlap=0)
    assert [len(p.text) for p in pieces] == [100, 100, 50]


def test_blank_text_has_no_chunks():
    assert split_recursive("  \n\n \t", size=100, overlap=10) == []


@pytest.mark.parametrize("size,overlap", [(0, 0), (100, 100), (100, -1)])
def test_invalid_settings_are_refused(size, overlap):
    with pytest.raises(InvalidSettingError):
        split_recursive("text", size=size, overlap=overlap)
