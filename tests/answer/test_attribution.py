"""The source check: cited, quoted, confirmed by a model check, or dropped."""

from __future__ import annotations

import pytest

from ragtopics.answer.attribution import QUOTE_MIN_WORDS, Source, check_sources, is_quoted
from ragtopics.answer.citations import render_citations

ALPHA_1 = Source("S1", "alpha.txt", "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.")
BETA = Source("S2", "beta.txt", "Mount Everest is the highest mountain above sea level on Earth.")
ALPHA_2 = Source("S3", "alpha.txt", "Gustave Eiffel's company designed and built the tower.")
GAMMA = Source("S4", "gamma.txt", "Honey never spoils when it is stored in a sealed container.")
CANDIDATES = [ALPHA_1, BETA, ALPHA_2, GAMMA]


def never_called(calls: list):
    def confirm(answer: str, file: str, text: str) -> bool:
        calls.append(file)
        raise AssertionError("the model check must not run when the answer cites its sources")

    return confirm


def test_cited_code_keeps_its_file_and_drops_uncited_files():
    calls: list[str] = []
    result = check_sources("The tower was finished in 1889 [S1].", CANDIDATES, never_called(calls))
    assert result.used == [ALPHA_1, ALPHA_2]  # every chunk of a cited file, in input order
    assert result.dropped == [BETA, GAMMA]
    assert result.reasons == {"alpha.txt": "cited", "beta.txt": "not used", "gamma.txt": "not used"}
    assert calls == []


@pytest.mark.parametrize("citation", ["[S2, S4]", "[S2][S4]", "[S2; S4]"])
def test_citation_forms(citation):
    result = check_sources(f"Everest is highest and honey keeps {citation}.", CANDIDATES)
    assert result.used == [BETA, GAMMA]
    assert result.reasons == {"alpha.txt": "not used", "beta.txt": "cited", "gamma.txt": "cited"}


def test_quoted_passage_keeps_a_file_without_citation():
    calls: list[str] = []
    answer = 'As the source puts it: "mount everest is the HIGHEST mountain, above sea-level on earth" [S1].'
    result = check_sources(answer, CANDIDATES, never_called(calls))
    assert result.reasons == {"alpha.txt": "cited", "beta.txt": "quoted", "gamma.txt": "not used"}
    assert result.used == [ALPHA_1, BETA, ALPHA_2]
    assert result.dropped == [GAMMA]
    assert calls == []


def test_quote_threshold_is_eight_words():
    text = "one two three four five six seven eight nine"
    assert QUOTE_MIN_WORDS == 8
    assert is_quoted("so: one two three four five six seven eight.", text)
    assert not is_quoted("so: one two three four five six seven.", text)
    # A citation code inside the quoted run does not break it.
    assert is_quoted("one two three four [S1] five six seven eight", text)


def test_no_citation_asks_the_model_once_per_remaining_file():
    calls: list[tuple[str, str, str]] = []

    def confirm(answer: str, file: str, text: str) -> bool:
        calls.append((answer, file, text))
        return file == "gamma.txt"

    answer = "Sealed honey lasts; Everest is tall."
    result = check_sources(answer, CANDIDATES, confirm)
    assert calls == [
        (answer, "alpha.txt", ALPHA_1.text + "\n\n" + ALPHA_2.text),
        (answer, "beta.txt", BETA.text),
        (answer, "gamma.txt", GAMMA.text),
    ]
    assert result.used == [GAMMA]
    assert result.dropped == [ALPHA_1, BETA, ALPHA_2]
    assert result.reasons == {"alpha.txt": "not used", "beta.txt": "not used", "gamma.txt": "confirmed by model check"}


def test_no_citation_skips_the_model_for_quoted_files():
    calls: list[str] = []

    def confirm(answer: str, file: str, text: str) -> bool:
        calls.append(file)
        return True

    answer = "Mount Everest is the highest mountain above sea level on Earth."
    result = check_sources(answer, CANDIDATES, confirm)
    assert calls == ["alpha.txt", "gamma.txt"]
    assert result.reasons == {
        "alpha.txt": "confirmed by model check",
        "beta.txt": "quoted",
        "gamma.txt": "confirmed by model check",
    }
    assert result.used == CANDIDATES


def test_model_check_that_raises_falls_back_to_the_best_retrieved_file_and_says_why():
    def confirm(answer: str, file: str, text: str) -> bool:
        raise TimeoutError("model timed out after 30 s")

    result = check_sources("Some answer without codes.", CANDIDATES, confirm)
    assert result.used == [ALPHA_1, ALPHA_2]  # nothing cited, quoted or shared: the best retrieved file
    assert result.reasons["alpha.txt"] == "kept on evidence: best retrieved"
    assert result.reasons["beta.txt"] == "not used (model check failed: TimeoutError: model timed out after 30 s)"
    assert "model check failed for alpha.txt, beta.txt, gamma.txt" in result.fallback
    assert result.chunk_reasons == {"S1": "kept on evidence", "S3": "same file"}


def test_no_model_check_available_falls_back_to_evidence():
    result = check_sources("Some answer without codes.", CANDIDATES, None)
    assert result.used == [ALPHA_1, ALPHA_2]
    assert result.reasons["beta.txt"] == "not used (no model check)"
    assert result.fallback.startswith("no model check for alpha.txt, beta.txt, gamma.txt; decided on")


POLICY = Source("S1", "policy.txt", "Hotel cap: 140 EUR per night. Daily meal allowance: 60 EUR.")
FAQ = Source("S2", "faq.txt", "Receipts must be uploaded within 30 days. Hotel bookings go through the travel desk.")


@pytest.mark.parametrize("order", [[POLICY, FAQ], [FAQ, POLICY]])
def test_a_failed_check_never_drops_the_file_the_answer_took_its_figure_from(order):
    """The check of policy.txt fails (a truncated reply), the check of faq.txt wrongly says "used"."""

    def confirm(answer: str, file: str, text: str) -> bool:
        if file == "policy.txt":
            raise ValueError("reply cut off at the token limit")
        return True

    result = check_sources("The hotel cap is 140 EUR per night.", order, confirm)
    assert [c.file for c in result.used] == ["policy.txt"]
    assert result.reasons["policy.txt"] == "kept on evidence: shares 140 with the answer"
    assert result.reasons["faq.txt"].startswith("not used")
    assert result.chunk_reasons == {"S1": "kept on evidence"}
    assert "policy.txt" in result.fallback


def test_figures_are_matched_whole_not_inside_other_numbers():
    def confirm(answer: str, file: str, text: str) -> bool:
        raise ValueError("no reply")

    a = Source("S1", "a.txt", "Error E-1200 means the pump is dry.")
    b = Source("S2", "b.txt", "Model 12005 has two pumps.")
    result = check_sources("That is error E-1200.", [b, a], confirm)
    assert [c.file for c in result.used] == ["a.txt"]


def test_cited_chunks_come_with_their_own_reason_and_the_rest_of_the_file_says_same_file():
    result = check_sources("Eiffel's company built it [S3].", CANDIDATES)
    assert result.chunk_reasons == {"S1": "same file", "S3": "cited"}


def test_no_candidates():
    result = check_sources("Nothing [S1].", [])
    assert (result.used, result.dropped, result.reasons) == ([], [], {})


def test_objects_with_the_same_attributes_are_accepted():
    class Hit:
        def __init__(self, code, file, text):
            self.code, self.file, self.text = code, file, text

    hits = [Hit("S1", "a.md", "x"), Hit("S2", "b.md", "y")]
    result = check_sources("See [S2].", hits)
    assert result.used == [hits[1]]
    assert result.reasons == {"a.md": "not used", "b.md": "cited"}


@pytest.mark.parametrize(
    "raw,shown",
    [
        ("At 100 degrees [S1].", "At 100 degrees [a.txt]."),
        ("Both [S1][S1] and [S1, S2].", "Both [a.txt] and [a.txt][b.txt]."),
        ("The source is [S6] or [S7] or [S8].", "The source is."),  # invented codes leave no "or or ."
        ("See [S3], [S4] and [S1].", "See [a.txt]."),
        ("See [S1] and [S9].", "See [a.txt]."),
        ("Sand [S9] or more", "Sand or more"),
    ],
)
def test_citation_codes_become_file_names_and_invented_ones_vanish_with_their_connectors(raw, shown):
    assert render_citations(raw, {"S1": "a.txt", "S2": "b.txt"}) == shown
