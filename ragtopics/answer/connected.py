"""Connected Topics (MCP Interfaces): other Topics offered to the model as OpenAI tools."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ragtopics.answer.context import Source
from ragtopics.errors import ConfigurationError, NotFoundError
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import Topic, get_topic


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a connected Topic answered.

    Attributes:
        topic: the connected Topic's name.
        question: what the model asked it.
        answer: its answer (its no-answer response when it found nothing).
        sources: its sources (:class:`~ragtopics.answer.context.Source`, links kept).
        contributed: False when it had nothing (no-answer).
    """

    topic: str
    question: str
    answer: str
    sources: list[Source] = field(default_factory=list)
    contributed: bool = True


def tool_name(topic_name: str) -> str:
    """OpenAI-safe function name for a Topic: ``ask_`` + lower-case letters, digits and underscores (≤ 64)."""
    return ("ask_" + re.sub(r"[^a-z0-9_]+", "_", topic_name.lower()).strip("_"))[:64]


def topic_tools(rt: Runtime, topic: Topic, description: PromptTemplate) -> tuple[list[dict], dict[str, Topic]]:
    """The tool definitions for a Topic's connected Topics, and tool name → Topic.

    Raises:
        ConfigurationError: when a connected Topic does not exist or is the Topic itself.
    """
    tools: list[dict] = []
    by_name: dict[str, Topic] = {}
    for name in topic.settings.mcp_interfaces:
        try:
            other = get_topic(rt, name)
        except NotFoundError as exc:
            raise ConfigurationError(f"connected Topic {name!r} (MCP Interfaces of {topic.name!r}) does not exist") from exc
        if other.id == topic.id:
            raise ConfigurationError(f"Topic {topic.name!r} cannot be connected to itself")
        fn = tool_name(other.name)
        by_name[fn] = other
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": fn,
                    "description": description.render(topic_name=other.name, description=other.description),
                    "parameters": {
                        "type": "object",
                        "properties": {"question": {"type": "string", "description": "a self-contained question"}},
                        "required": ["question"],
                    },
                },
            }
        )
    return tools, by_name


def tool_message(call_id: str, result: ToolResult) -> dict:
    """The ``tool`` role message that carries a connected Topic's answer back to the model."""
    payload = {"topic": result.topic, "answer": result.answer, "sources": list(dict.fromkeys(s.file for s in result.sources))}
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(payload, ensure_ascii=False)}


def parse_question(arguments: str, fallback: str) -> str:
    """The ``question`` argument of a tool call; the user's question when it is missing or malformed."""
    try:
        value = json.loads(arguments or "{}").get("question")
    except (json.JSONDecodeError, AttributeError):
        return fallback
    return value.strip() if isinstance(value, str) and value.strip() else fallback
