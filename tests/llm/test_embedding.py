"""The local embedder's packed path for short texts gives the vectors of its ordinary path."""

from __future__ import annotations

import numpy as np
import torch

from ragtopics.llm.embedding import PACK_TOKENS, _packs


def test_packed_short_texts_get_the_vectors_of_one_text_per_sequence(embedder):
    texts = [
        "Leland, North Carolina",
        "US",
        "Marie Curie",
        "the Royal Swedish Academy of Sciences",
        "x",
        "Walt Disney Classics: a line of VHS releases of Disney's animated films, 1984 to 1994",
        "Marie Curie",
        "Über uns",
        "A" * 3000,
    ]
    threads = torch.get_num_threads()
    ordinary = embedder.embed(texts)
    packed = embedder.embed(texts, short=True)
    assert packed.shape == (len(texts), 384) and packed.dtype == np.float32
    assert np.abs(packed - ordinary).max() < 1e-5  # float rounding only
    assert np.allclose(np.linalg.norm(packed, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(packed[2], packed[6])  # the same text twice, in one pack, gets one vector
    assert torch.get_num_threads() == threads  # the short texts' thread count is put back
    assert embedder.embed([], short=True).shape == (0, 384)


def test_packs_hold_whole_texts_within_the_budget_longest_first():
    lengths = [5, 250, 6, 3, 256, 120, 130, 2]
    packs = _packs(lengths, PACK_TOKENS)
    assert sorted(i for pack in packs for i in pack) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in pack) <= PACK_TOKENS for pack in packs)
    assert packs == [[4], [1, 2], [6, 5, 0], [3, 7]]  # each text into the first sequence with room, longest first


def test_names_are_embedded_with_one_thread_and_longer_packed_texts_with_every_thread(embedder):
    from ragtopics.llm.embedding import SHORT_TEXT_CHARS, SHORT_TEXT_THREADS

    transformer = embedder._loaded()[0].auto_model
    seen: list[int] = []
    hook = transformer.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
    threads = torch.get_num_threads()
    try:
        embedder.embed(["Marie Curie", "Leland, North Carolina"], short=True)  # names: one thread
        description = "Marie Curie was a physicist and chemist who conducted pioneering research on radioactivity. " * 2
        assert len(description) > SHORT_TEXT_CHARS
        embedder.embed(["Marie Curie", description], short=True)  # a description among them: every thread
    finally:
        hook.remove()
    assert seen == [SHORT_TEXT_THREADS, threads]
    assert torch.get_num_threads() == threads
