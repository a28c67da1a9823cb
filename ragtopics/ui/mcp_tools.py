"""Topics as tools for external agents: API endpoints that Gradio's MCP server also serves."""

from __future__ import annotations

import json

import gradio as gr

from ragtopics.answer.turn import ask
from ragtopics.runtime import Runtime
from ragtopics.topics import topics as topic_store


def register(rt: Runtime) -> None:
    """Register ``list_topics`` and ``ask_topic`` as API endpoints (and MCP tools) of the open Blocks."""

    def list_topics() -> str:
        """List the Topics that can be asked.

        Returns:
            JSON text: a list of {"name", "kind", "description"}, one per Topic.
        """
        return json.dumps([{"name": t.name, "kind": t.kind, "description": t.description} for t in topic_store.list_topics(rt)])

    def ask_topic(topic: str, question: str) -> str:
        """Ask a Topic a question; it answers from its own documents and cites its sources.

        Args:
            topic: the Topic's name, as given by list_topics.
            question: a self-contained question.

        Returns:
            JSON text: {"answer": str, "sources": [{"file", "chunk_id", "score", "topic", "kind", "reason",
            "link", "status", "pages", "location"}], "route": str, "route_confidence": float | null,
            "route_reason": str, "route_method": str, "route_planned": str, "rerank": str}; "pages" lists
            the 1-based pages of the source, "location" reads "p. 3"; "route_method" says how the way was
            chosen ("embedding", "llm", "forced" or ""), "route_planned" the way the router chose when the
            search fell back to "route" ("" otherwise), "rerank" how the results were reranked ("" for none).
        """
        *_, final = ask(rt, topic_store.get_topic(rt, topic), question, save=False)
        return json.dumps(
            {
                "answer": final.text,
                "route": final.route,
                "route_confidence": final.route_confidence,
                "route_reason": final.route_reason,
                "route_method": final.route_method,
                "route_planned": final.route_planned,
                "rerank": final.rerank,
                "sources": [s.to_public() for s in final.sources],
            },
            ensure_ascii=False,
        )

    # queue=False: Gradio's MCP server then calls the function with the MCP request itself (whose API token
    # the access checks read) instead of through an unauthenticated loopback client.
    gr.api(list_topics, api_name="list_topics", queue=False)
    gr.api(ask_topic, api_name="ask_topic", queue=False)
