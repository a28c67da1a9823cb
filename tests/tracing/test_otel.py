"""OpenTelemetry spans of chat turns and uploads: the in-memory exporter, and a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import gzip
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtopics.answer.turn import ask
from ragtopics.topics.topics import create_topic
from ragtopics.tracing import otel
from ragtopics.tracing.trace import Trace
from tests.conftest import free_port
from tests.ingest.test_ingest import upload

QUESTION = "When does the zebra kettle Z-9 switch off?"
ANSWER = "It switches off at 100 degrees [S1]."
CHUNK_TEXT = b"Kettle Z-9 (the zebra kettle) switches itself off at 100 degrees. Descale it every month."


@pytest.fixture
def spans():
    """Finished traces go to an in-memory exporter while the test runs: the exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.use_tracer_provider(provider)
    yield exporter
    otel.use_tracer_provider(None)
    provider.shutdown()


@pytest.fixture
def zebra(rt, run_jobs):
    """A RAG Topic "Zebra" with one indexed file."""
    topic = create_topic(rt, "Zebra")
    upload(rt, topic, "zebra.txt", CHUNK_TEXT)
    run_jobs()
    return topic


def finished(updates) -> object:
    final = None
    for final in updates:  # noqa: B007 (the last update is the answer)
        pass
    return final


def every_string(span) -> str:
    """Every attribute value and the name of ``span``, in one string."""
    return " ".join([span.name, *(str(v) for v in span.attributes.values())])


def test_a_chat_turn_is_a_root_span_with_retrieval_and_the_model_call_under_it_and_no_text(rt, zebra, scripted_llm, spans):
    spans.clear()  # the upload's spans
    scripted_llm.replies["answer"] = ANSWER
    final = finished(ask(rt, zebra, QUESTION))
    assert final.text == "It switches off at 100 degrees [zebra.txt]."
    got = spans.get_finished_spans()
    [root] = [s for s in got if s.parent is None]
    assert root.name == "ragtopics.chat" and root.attributes["ragtopics.topic_id"] == zebra.id
    assert root.attributes["ragtopics.owner"].startswith("turn:") and root.attributes["ragtopics.subject.chars"] == len(QUESTION)
    assert {s.context.trace_id for s in got} == {root.context.trace_id}
    by_id = {s.context.span_id: s for s in got}
    [retrieve] = [s for s in got if s.name == "retrieve"]
    assert retrieve.parent.span_id == root.context.span_id
    assert {by_id[s.parent.span_id].name for s in got if s.name in ("search", "embed_question")} == {"retrieve"}
    [answer_call] = [s for s in got if s.name == "model_call" and s.attributes["ragtopics.prompt_name"] == "answer"]
    assert by_id[answer_call.parent.span_id].name == "answer"
    assert by_id[answer_call.parent.span_id].parent.span_id == root.context.span_id
    assert answer_call.attributes["ragtopics.model"] == "scripted" and answer_call.attributes["ragtopics.messages.count"] >= 2
    assert answer_call.attributes["ragtopics.response.chars"] == len(ANSWER)
    assert answer_call.end_time - answer_call.start_time == int(answer_call.attributes["ragtopics.duration_ms"] * 1e6)
    assert root.start_time <= retrieve.start_time <= retrieve.end_time <= root.end_time
    text = " ".join(every_string(s) for s in got)
    for secret in ("zebra kettle", "Z-9", "100 degrees", "Descale"):
        assert secret not in text


def test_with_content_recording_on_the_question_answer_and_messages_are_in_the_spans(rt, zebra, scripted_llm, spans, reconfigure):
    reconfigure(OTEL_RECORD_CONTENT=True)
    spans.clear()
    scripted_llm.replies["answer"] = ANSWER
    finished(ask(rt, zebra, QUESTION, save=False))  # an unsaved turn is traced too
    got = spans.get_finished_spans()
    [root] = [s for s in got if s.parent is None]
    assert root.attributes["ragtopics.subject"] == QUESTION and root.attributes["ragtopics.owner"] == ""
    [answer_call] = [s for s in got if s.name == "model_call" and s.attributes["ragtopics.prompt_name"] == "answer"]
    assert (
        QUESTION in answer_call.attributes["ragtopics.messages"]
        and "Descale it every month" in answer_call.attributes["ragtopics.messages"]
    )
    assert answer_call.attributes["ragtopics.response"] == ANSWER
    [finish] = [s for s in got if s.name == "finish"]
    assert finish.attributes["ragtopics.answer"] == "It switches off at 100 degrees [zebra.txt]."


def test_an_upload_job_is_a_span_tree(rt, spans, run_jobs):
    topic = create_topic(rt, "Zebra")
    upload(rt, topic, "zebra.txt", CHUNK_TEXT)
    run_jobs()
    got = spans.get_finished_spans()
    [root] = [s for s in got if s.parent is None]
    assert root.name == "ragtopics.upload" and root.attributes["ragtopics.owner"].startswith("document:")
    assert root.attributes["ragtopics.topic_id"] == topic.id
    by_id = {s.context.span_id: s for s in got}
    names = {s.name for s in got}
    assert {"read", "chunk", "embed", "store"} <= names
    [embed_call] = [s for s in got if s.name == "model_call" and s.attributes["ragtopics.role"] == "embedding"]
    assert embed_call.attributes["ragtopics.items"] == 1
    for span in got:
        if span is not root:  # every step hangs from the root, through its parents
            while span.parent.span_id != root.context.span_id:
                span = by_id[span.parent.span_id]
    assert not any("zebra kettle" in every_string(s) for s in got)


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: keeps each decoded ``ExportTraceServiceRequest``."""

    received: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        elif self.headers.get("content-encoding") == "deflate":
            body = zlib.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).received.append((self.path, self.headers.get("content-type"), request))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    """An OTLP/HTTP receiver on a free loopback port: ``(endpoint URL, received requests)``."""
    _Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.received
    server.shutdown()
    server.server_close()


def test_spans_reach_an_otlp_http_receiver_with_their_parent_links(rt, zebra, scripted_llm, reconfigure, receiver):
    endpoint, received = receiver
    settings = reconfigure(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_SERVICE_NAME="ragtopics-test").settings
    scripted_llm.replies["answer"] = ANSWER
    finished(ask(rt, zebra, QUESTION))
    assert otel.flush(settings)
    spans, services = [], set()
    for path, content_type, request in received:
        assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
        for resource_spans in request.resource_spans:
            services |= {a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"}
            spans += [s for scope in resource_spans.scope_spans for s in scope.spans]
    assert services == {"ragtopics-test"}
    [root] = [s for s in spans if s.name == "ragtopics.chat"]
    assert root.parent_span_id == b""
    by_id = {s.span_id: s for s in spans if s.trace_id == root.trace_id}
    assert by_id[next(s.parent_span_id for s in by_id.values() if s.name == "retrieve")].name == "ragtopics.chat"
    [answer_call] = [
        s
        for s in by_id.values()
        if s.name == "model_call"
        and any(a.key == "ragtopics.prompt_name" and a.value.string_value == "answer" for a in s.attributes)
    ]
    assert by_id[answer_call.parent_span_id].name == "answer"
    assert by_id[by_id[answer_call.parent_span_id].parent_span_id] is root
    assert not any(QUESTION in str(a.value) for s in by_id.values() for a in s.attributes)


def test_nothing_is_exported_without_an_endpoint(settings):
    assert settings.otel_exporter_otlp_endpoint is None and otel.tracer_provider(settings) is None
    trace = Trace("chat", QUESTION)
    with trace.step("retrieve", query=QUESTION):
        trace.add("model_call", role="language_model", duration_ms=1.0)
    assert otel.export_trace(settings, trace, kind="chat") == 0


def test_without_content_only_numbers_ids_and_fixed_words_stay():
    data = {
        "query": QUESTION,
        "top_k": 5,
        "route": "SEARCH",
        "chunk_id": "chunk-1",
        "candidates": ["chunk-1", "chunk-2"],
        "scores": [0.5, 0.25],
        "sources": [{"file": "zebra.txt"}],
        "stopped": True,
        "note": None,
    }
    assert otel.span_attributes(data, record_content=False) == {
        "ragtopics.query.chars": len(QUESTION),
        "ragtopics.top_k": 5,
        "ragtopics.route": "SEARCH",
        "ragtopics.chunk_id": "chunk-1",
        "ragtopics.candidates.count": 2,
        "ragtopics.scores.count": 2,
        "ragtopics.scores": [0.5, 0.25],
        "ragtopics.sources.count": 1,
        "ragtopics.stopped": True,
    }
    shown = otel.span_attributes(data, record_content=True)
    assert shown["ragtopics.query"] == QUESTION and shown["ragtopics.sources"] == '[{"file": "zebra.txt"}]'


def test_a_community_rebuild_is_a_span_tree_with_its_report_model_calls(rt, run_jobs, scripted_llm, spans):
    from ragtopics.documents.uploads import upload_file
    from ragtopics.graph.refresh import enqueue_rebuild
    from tests.ui.test_graph_panel import CURIE, NLP, REPORT

    scripted_llm.replies["community_report"] = REPORT
    topic = create_topic(rt, "Physicists", kind="graphrag", settings=NLP)
    upload_file(rt, topic, "curie.txt", CURIE)
    run_jobs()
    spans.clear()
    enqueue_rebuild(rt, topic)
    run_jobs()
    got = spans.get_finished_spans()
    [root] = [s for s in got if s.parent is None]
    assert root.name == "ragtopics.communities" and root.attributes["ragtopics.owner"] == f"communities:{topic.id}"
    by_id = {s.context.span_id: s for s in got}
    assert {"detect_communities", "community_reports"} <= {s.name for s in got}
    calls = [s for s in got if s.name == "model_call" and s.attributes["ragtopics.prompt_name"] == "community_report"]
    assert calls and {by_id[c.parent.span_id].name for c in calls} == {"community_reports"}
    assert not any("Physicists in Paris" in every_string(s) for s in got)  # the report's text: content
