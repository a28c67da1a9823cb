"""Small real-world inputs that used to index badly: tables, records, bad lines, codes in paths, junk, code blocks, refusals."""

from __future__ import annotations

import io
import json
import logging
import re

import docx
import numpy as np
import pytest
import yaml

from ragtopics.documents.uploads import get_document
from ragtopics.ingest.chunking import split_recursive
from ragtopics.ingest.structured import read_records
from ragtopics.rag.retrieval import retrieve
from ragtopics.text.keywords import extract_keywords, is_searchable, query_keywords
from ragtopics.topics.topics import create_topic
from ragtopics.ui.upload_tab import indexed_with_text
from tests.ingest.test_ingest import stored_chunks, upload

HEADER = "| Item | Code | Unit price | Stock |"
DELIMITER = "|------|------|-----------:|-------|"
ROWS = [f"| Brass hinge, {10 + i} mm | BH-{1000 + i} | {1.5 + i * 0.37:.2f} EUR | {i * 7} pcs |" for i in range(40)]
PRICE_MD = (
    "# Price list 2024\n\nAll prices without VAT.\n\n" + "\n".join([HEADER, DELIMITER, *ROWS]) + "\n\nPrices change yearly.\n"
)


def texts(rt, topic, doc_id) -> list[str]:
    return [c["text"].decode() for c in stored_chunks(rt, topic, doc_id)]


def assert_table_chunks(chunks: list[str], header: str, delimiter: str, rows: list[str]) -> None:
    """Every chunk holding rows has header and delimiter as its first table lines; every row whole, once."""
    seen = []
    for chunk in chunks:
        lines = chunk.split("\n")
        table = [n for n, line in enumerate(lines) if line.startswith("|")]
        if not any(line in rows for line in lines):
            continue
        assert lines[table[0]] == header and lines[table[0] + 1] == delimiter, chunk
        seen.extend(line for line in lines if line in rows)
    assert seen == rows


# --- 4: tables split only between rows, header repeated -------------------------------------


def test_markdown_price_table_chunks_start_with_the_header_at_the_default_size(rt, run_jobs):
    topic = create_topic(rt, "Prices")
    doc, _ = upload(rt, topic, "prices.md", PRICE_MD.encode())
    run_jobs()
    chunks = texts(rt, topic, doc.id)
    assert len(chunks) > 2 and all(len(c) <= 1000 for c in chunks)
    assert_table_chunks(chunks, HEADER, DELIMITER, ROWS)


@pytest.mark.parametrize("size", [150, 300, 700])
def test_tables_split_only_between_rows_at_any_size_and_text_around_is_kept(size):
    pieces = split_recursive(PRICE_MD, size=size, overlap=size // 10)
    assert_table_chunks([p.text for p in pieces], HEADER, DELIMITER, ROWS)
    assert any("All prices without VAT." in p.text for p in pieces)
    assert any("Prices change yearly." in p.text for p in pieces)


def test_html_table_is_read_as_a_pipe_table_and_split_between_rows(rt, run_jobs):
    cells = "".join(f"<tr><td>Brass hinge, {10 + i} mm</td><td>BH-{1000 + i}</td><td>{i} EUR</td></tr>" for i in range(60))
    page = (
        f"<html><head><script>var junk = 1;</script></head><body><h1>Prices</h1><table><tr><th>Item</th><th>Code</th>"
        f"<th>Price</th></tr>{cells}</table></body></html>"
    )
    topic = create_topic(rt, "Html", settings={"chunk_size": 500, "chunk_overlap": 50})
    doc, _ = upload(rt, topic, "prices.html", page.encode())
    run_jobs()
    chunks = texts(rt, topic, doc.id)
    rows = [f"| Brass hinge, {10 + i} mm | BH-{1000 + i} | {i} EUR |" for i in range(60)]
    assert len(chunks) > 2 and not any("<td>" in c or "junk" in c for c in chunks)
    assert_table_chunks(chunks, "| Item | Code | Price |", "|---|---|---|", rows)


def test_docx_table_from_docling_is_split_between_rows_with_its_header(rt, run_jobs):
    document = docx.Document()
    document.add_heading("Spare parts", level=1)
    table = document.add_table(rows=1, cols=3)
    for cell, name in zip(table.rows[0].cells, ["Part", "Code", "Price"]):
        cell.text = name
    for i in range(50):
        for cell, value in zip(table.add_row().cells, [f"Gasket {i}", f"GK-{700 + i}", f"{i}.50"]):
            cell.text = value
    buffer = io.BytesIO()
    document.save(buffer)
    topic = create_topic(rt, "Docx table", settings={"chunk_size": 400, "chunk_overlap": 40})
    doc, _ = upload(rt, topic, "parts.docx", buffer.getvalue())
    run_jobs()
    assert get_document(rt, doc.id).status == "indexed"
    chunks = texts(rt, topic, doc.id)
    with_rows = [c for c in chunks if "GK-7" in c]
    assert len(with_rows) > 2
    for chunk in with_rows:
        table_lines = [line for line in chunk.split("\n") if line.startswith("|")]
        assert re.fullmatch(r"\|\s*Part\s*\|\s*Code\s*\|\s*Price\s*\|", table_lines[0]) and set(table_lines[1]) <= set("|-: ")
        assert all(line.endswith("|") for line in table_lines)
    assert sum(c.count("GK-") for c in with_rows) == 50


# --- 5: records never cut; long ones repeat their identity ----------------------------------


def inventory_csv(rows: int, notes_words: int) -> bytes:
    lines = ["sku,name,location,last_counted,notes"]
    for i in range(rows):
        notes = " ".join(f"note{i}w{j}" for j in range(notes_words))
        lines.append(f'SK-{i:04d},Widget {i},Aisle {i % 9},2024-03-{i % 28 + 1:02d},"{notes}"')
    return ("\n".join(lines) + "\n").encode()


def test_csv_records_longer_than_chunk_size_repeat_their_sku_in_every_piece(rt, run_jobs):
    topic = create_topic(rt, "Inventory", settings={"chunk_size": 100, "chunk_overlap": 10})
    doc, _ = upload(rt, topic, "inventory.csv", inventory_csv(300, 12))
    run_jobs()
    chunks = texts(rt, topic, doc.id)
    assert len(chunks) > 300
    for chunk in chunks:
        sku = re.match(r"sku: (SK-\d{4})\n", chunk)
        assert sku, chunk
        number = int(sku.group(1)[3:])
        assert all(f"note{number}w" in word for word in re.findall(r"note\d+w\d+", chunk))  # never another record's notes
    notes_of_7 = " ".join(w for c in chunks if c.startswith("sku: SK-0007") for w in re.findall(r"note7w\d+", c))
    assert notes_of_7 == " ".join(f"note7w{j}" for j in range(12))


def test_records_per_chunk_is_shown_in_the_indexed_documents_list(rt, run_jobs):
    topic = create_topic(rt, "Inventory 2")
    doc, _ = upload(rt, topic, "inventory.csv", inventory_csv(40, 3))
    run_jobs()
    indexed_with = get_document(rt, doc.id).indexed_with
    low, high = indexed_with["records_per_chunk"]
    assert 1 <= low <= high and high > 1
    assert f"{low}–{high} records per chunk" in indexed_with_text(indexed_with) or low == high


def test_json_records_are_identified_by_id_like_keys():
    data = json.dumps([{"category": "tools", "product_id": f"P-{i}", "description": "word " * 60} for i in range(3)])
    from ragtopics.ingest.structured import flatten_record, pack_records

    chunks = pack_records([flatten_record(r) for r in read_records(data.encode(), file_name="p.json")], size=120)
    assert all(re.match(r"category: tools\nproduct_id: P-\d\n", c) for c in chunks)


# --- 6: one bad line loses only that line ----------------------------------------------------


def orders_jsonl(bad: set[int], total: int = 60) -> bytes:
    lines = []
    for n in range(1, total + 1):
        line = json.dumps({"order": f"ORD-{n:04d}", "customer": f"Customer {n}", "total": n * 3.5})
        lines.append(line[: len(line) // 2] if n in bad else line)
    return ("\n".join(lines) + "\n").encode()


def test_jsonl_with_one_line_cut_off_indexes_the_rest_and_names_the_line(rt, run_jobs):
    topic = create_topic(rt, "Orders")
    doc, _ = upload(rt, topic, "orders.jsonl", orders_jsonl({46}))
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "indexed", row.error
    assert "line 46" in row.warning and "skipped" in row.warning
    joined = "\n".join(texts(rt, topic, doc.id))
    assert "ORD-0045" in joined and "ORD-0047" in joined and "ORD-0046" not in joined
    assert row.indexed_with["reader"] == "jsonl records (59)"


def test_jsonl_with_mostly_bad_lines_still_fails():
    with pytest.raises(Exception, match=r"orders\.jsonl: 31 of 60 lines are unreadable"):
        read_records(orders_jsonl(set(range(1, 32))), file_name="orders.jsonl")


def test_csv_row_the_parser_cannot_read_is_skipped(caplog):
    data = b'sku,notes\nA-1,fine\nA-2,"broken"quote\nA-3,fine too\n'
    from ragtopics.ingest import structured

    # a strict dialect makes the stray quote a parse error, like a real malformed row
    records = structured._read_rows(
        data.decode(), type("Strict", (structured.csv.excel,), {"strict": True}), structured._Limits("stock.csv", 64, 100, 10_000)
    )
    assert [dict(r.fields)["sku"] for r in records] == ["A-1", "A-3"]
    assert any("stock.csv: line 3 is not valid CSV" in m for m in caplog.messages)


def test_csv_row_over_the_field_limit_is_skipped_and_the_rest_indexed(caplog):
    data = b'sku,notes\nA-1,fine\nA-2,"' + b"x" * 140_000 + b'"\nA-3,fine too\n'
    records = read_records(data, file_name="stock.csv")
    assert [dict(r.fields)["sku"] for r in records] == ["A-1", "A-3"]
    assert any("line 3 is not valid CSV" in m for m in caplog.messages)


def test_yaml_multi_document_file_with_one_broken_document_keeps_the_others(caplog):
    docs = [yaml.safe_dump({"service": f"svc-{i}", "port": 8000 + i}) for i in range(5)]
    docs[2] = "service: [unclosed\nport: 8002\n"
    records = read_records(("---\n" + "---\n".join(docs)).encode(), file_name="services.yaml")
    assert [dict(r.fields)["service"] for r in records] == ["svc-0", "svc-1", "svc-3", "svc-4"]
    assert any("services.yaml: document 3 is not valid YAML" in m for m in caplog.messages)


# --- 7 and 8: codes inside paths; words and codes both searched -------------------------------


def test_codes_inside_paths_urls_emails_and_dotted_names_are_indexed_by_segment():
    keywords = extract_keywords(
        "GET /v3/fleet/telemetry/ZETA-7781/export, see https://api.example.com/v2/orders/ORD-1234?x=1, "
        "mail ops.team42@example.com, class com.acme.billing.Invoice2Service"
    )
    assert {"v3fleettelemetryzeta7781export", "zeta7781", "ord1234", "team42"} <= set(keywords)
    assert {"opsteam42examplecom", "invoice2service", "comacmebillinginvoice2service"} <= set(keywords)
    assert "zeta7781" in query_keywords("Which endpoint exports ZETA-7781?")


def test_a_code_inside_an_api_path_is_found_among_hundreds_of_paths(rt, run_jobs):
    paths = [
        f"/v3/fleet/{area}/{code}/export"
        for area in ("telemetry", "billing", "routing")
        for code in [f"ZETA-{n}" for n in range(7000, 7100)]
    ]
    topic = create_topic(rt, "Api", settings={"retrieval_strategy": "HYBRID", "chunk_size": 400, "chunk_overlap": 0})
    _doc, _ = upload(rt, topic, "paths.txt", "\n".join(paths).encode())
    run_jobs()
    hits = rt.chunk_index(topic.id).search_keywords(query_keywords("What is ZETA-7081 used for?"), 5)
    holding = [h for h in hits if "ZETA-7081" in h.text]
    assert len(holding) == 3 and hits[:3] == holding  # one chunk per area, ahead of chunks that only say "zeta"


def test_a_question_searches_words_and_codes_with_meaningful_bm25_scores(rt, run_jobs):
    topic = create_topic(rt, "Price search", settings={"retrieval_strategy": "HYBRID", "chunk_size": 100, "chunk_overlap": 0})
    tail = "sold per piece, shipped in boxes of fifty"  # one line per chunk at Chunk Size 100
    items = [f"{kind}, {n} mm" for kind in ("Steel bolt", "Rubber seal", "Nylon washer") for n in range(10, 60, 5)]
    items += ["Steel hinge, 40 mm", "Brass hinge, 40 mm", "Brass hinge, 50 mm", "Brass screw, 40 mm", "Copper pipe, 40 mm"]
    lines = [f"{item}: unit price {3 + i % 7}.{i % 10}9 EUR, {tail}." for i, item in enumerate(items)]
    _doc, _ = upload(rt, topic, "prices.txt", "\n\n".join(lines).encode())
    run_jobs()
    terms = query_keywords('What is the unit price of the item "Brass hinge, 40 mm"?')
    assert "40" in terms and {"brass", "hinge", "price"} <= set(terms)
    hits = rt.chunk_index(topic.id).search_keywords(terms, 10)
    assert "Brass hinge, 40 mm" in hits[0].text
    assert all(h.score > 0 for h in hits) and hits[0].score > hits[-1].score


# --- 9: junk is not a chunk, and a junk question finds nothing -------------------------------


@pytest.mark.parametrize("junk", ["!!! ??? ... --- *** ### ~~~ ^^^", "→ ← ★ ☆ • · … — «» ¡¿", "\n\n----\n\n====\n\n"])
def test_a_file_of_only_punctuation_is_empty_and_not_indexed(rt, run_jobs, junk):
    topic = create_topic(rt, "Junk", settings={"retrieval_strategy": "HYBRID"})
    doc, _ = upload(rt, topic, "junk.txt", junk.encode())
    run_jobs()
    row = get_document(rt, doc.id)
    assert row.status == "empty" and row.chunk_count == 0 and stored_chunks(rt, topic, doc.id) == []


def test_a_question_with_nothing_searchable_retrieves_nothing(rt, run_jobs):
    topic = create_topic(rt, "Punct", settings={"retrieval_strategy": "HYBRID", "min_similarity_score": 0.0})
    upload(rt, topic, "a.txt", b"Valves are serviced yearly. ?!?! ...")
    run_jobs()
    assert not is_searchable("?!?! ... ***") and is_searchable("Ω?") and is_searchable("42?")
    vector = rt.gateway.embed(["?!?!"])[0]
    found = retrieve(
        rt.chunk_index(topic.id), "?!?! ...", np.asarray(vector), strategy="HYBRID", top_k=5, min_score=-1.0, candidates=5
    )
    assert found.hits == [] and found.dense == []


# --- 10: code split at lines and definitions --------------------------------------------------


def retry_module(functions: int) -> str:
    parts = []
    for i in range(functions):
        body = "".join(f"        delay_{j} = backoff(attempt, base={j})  # wait before try {j}\n" for j in range(6))
        parts.append(
            f'@traced\ndef retry_{i}(fn, attempts={i + 2}):\n    """Call fn until it succeeds."""\n'
            f"    for attempt in range(attempts):\n{body}        try:\n            return fn()\n"
            f"        except TimeoutError:\n            time.sleep(delay_0)\n    raise RuntimeError('gave up')\n"
        )
    return "import time\n\n\n" + "\n\n".join(parts)


def test_a_large_fenced_block_keeps_heading_and_language_in_every_piece(rt, run_jobs):
    code = retry_module(12)
    assert len(code) > 6000
    text = "# Utilities\n\nHelpers for flaky calls.\n\n## Retry wrapper\n\n```python\n" + code + "```\n\nUse with care.\n"
    topic = create_topic(rt, "Code")
    doc, _ = upload(rt, topic, "retry.md", text.encode())
    run_jobs()
    chunks = [c for c in texts(rt, topic, doc.id) if "def retry_" in c or "delay_" in c]
    assert len(chunks) > 5
    source_lines = set(code.split("\n"))
    for chunk in chunks:
        assert chunk.startswith("## Retry wrapper\n\n```python\n") and chunk.endswith("\n```"), chunk[:80]
        assert len(chunk) <= 1000
        assert all(line in source_lines for line in chunk.split("\n")[3:-1])  # whole lines only
        first_code = chunk.split("\n")[3]
        assert first_code.startswith(("@traced", "import time")), first_code  # cut before a top-level definition
    assert sum(c.count("def retry_") for c in chunks) == 12


@pytest.mark.parametrize(
    "name,make",
    [
        ("retry.py", lambda: retry_module(8)),
        (
            "retry.js",
            lambda: "\n\n".join(
                f"export function retry{i}(fn) {{\n"
                + "".join(f"  const d{j} = backoff({j}); // wait {j}\n" for j in range(8))
                + "  return fn();\n}\n"
                for i in range(10)
            ),
        ),
    ],
)
def test_source_files_are_cut_at_top_level_definitions(rt, run_jobs, name, make):
    source = make()
    topic = create_topic(rt, "Source " + name, settings={"chunk_size": 800, "chunk_overlap": 0})
    doc, _ = upload(rt, topic, name, source.encode())
    run_jobs()
    chunks = texts(rt, topic, doc.id)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.split("\n")[0].startswith(("@traced", "import", "export function")), chunk[:60]
        assert all(line in source.split("\n") for line in chunk.split("\n"))


# --- 12: expected refusals are one log line, not a traceback ----------------------------------


def test_a_refused_file_writes_one_line_to_the_worker_log_without_traceback(rt, run_jobs, caplog):
    topic = create_topic(rt, "Refusals")
    upload(rt, topic, "data.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    upload(rt, topic, "orders.jsonl", b"not json\n{also not}\n")
    with caplog.at_level(logging.INFO):
        run_jobs()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2, [r.getMessage() for r in errors]
    assert not any("Traceback" in r.getMessage() or r.exc_info for r in errors)
    assert any("binary" in r.getMessage() for r in errors) and any("orders.jsonl" in r.getMessage() for r in errors)
