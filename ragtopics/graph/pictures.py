"""Picture in the graph: an Image node per stored picture, linked to the entities it shows.

A GraphRAG Topic's Picture handling (``picture_handling``):

- ``PICTURE_IN_GRAPH`` (default): each stored picture becomes an ``(:Image)`` node, attached
  to the chunk it belongs to and linked by ``SHOWS`` to the entities it shows. Which ones is
  decided among the entities of its chunk:
  * with an Image Describer endpoint that sees pictures (a real one, not the bundled model):
    one typed call per picture, given the picture, its caption and description and the
    candidate names (prompt ``picture_entities``);
  * otherwise (the bundled models cannot see a picture): the candidates named in the
    picture's caption or description, compared as :func:`~ragtopics.graph.model.normalize_name`
    compares names. A picture without caption or description links to none.
- ``EXTRACT_ENTITIES``: the description is read into the text before chunking (the upload
  pipeline's Describe pictures), so extraction finds its entities like any text; no Image node.
- ``IGNORE``: pictures are not stored.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ragtopics.errors import ModelUnavailableError, StructuredOutputError
from ragtopics.graph.model import Entity, normalize_name
from ragtopics.prompts.templates import PICTURE_ENTITIES, PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.tracing.trace import Trace

log = logging.getLogger(__name__)

#: Most candidate entities offered to the model for one picture.
MAX_CANDIDATES = 40


class PictureEntities(BaseModel):
    """The typed reply of the ``picture_entities`` call."""

    names: list[str] = Field(default_factory=list, description="Names, from the list given, of the entities the picture shows.")


@dataclass(frozen=True, slots=True)
class GraphImage:
    """One picture as the graph stores it.

    Attributes:
        picture_id: the stored picture's id (its row and file).
        chunk_id: the chunk it belongs to.
        caption, description: as stored with the picture.
        entity_ids: the entities it shows.
        method: ``model`` (the Image Describer chose) or ``names`` (named in caption or description).
    """

    picture_id: str
    chunk_id: str
    caption: str
    description: str
    entity_ids: tuple[str, ...]
    method: str


def uses_model(rt: Runtime) -> bool:
    """True when the Image Describer role has a real endpoint that sees pictures."""
    endpoint = rt.settings.endpoint("image_describer")
    return endpoint.supports_images and not endpoint.is_bundled


def link_images(
    rt: Runtime,
    entities: list[Entity],
    chunk_pictures: dict[str, list[str]],
    pictures: dict[str, tuple],
    trace: Trace,
    template: PromptTemplate = PICTURE_ENTITIES,
) -> list[GraphImage]:
    """Decide which entities each picture shows.

    Args:
        entities: the entities of the document version (after deduplication), with their chunks.
        chunk_pictures: chunk id → ids of the pictures linked to that chunk.
        pictures: picture id → ``(caption, description, png bytes or None)``.

    Returns:
        One :class:`GraphImage` per (picture, first chunk it is linked to).
    """
    by_chunk: dict[str, list[Entity]] = {}
    for entity in entities:
        for cid in entity.chunk_ids:
            by_chunk.setdefault(cid, []).append(entity)
    model = uses_model(rt)
    images: list[GraphImage] = []
    seen: set[str] = set()
    with trace.step("link_images", pictures=len(pictures), method="model" if model else "names") as ev:
        for chunk_id, picture_ids in chunk_pictures.items():
            for picture_id in picture_ids:
                if picture_id in seen or picture_id not in pictures:
                    continue
                seen.add(picture_id)
                caption, description, png = pictures[picture_id]
                candidates = by_chunk.get(chunk_id, [])[:MAX_CANDIDATES]
                chosen, method = _by_names(candidates, f"{caption}\n{description}"), "names"
                if model and png and candidates:
                    try:
                        chosen, method = _by_model(rt, candidates, caption, description, png, trace, template), "model"
                    except (ModelUnavailableError, StructuredOutputError) as exc:
                        log.warning("picture %s: the image describer failed (%s); linking by names", picture_id, exc)
                images.append(GraphImage(picture_id, chunk_id, caption, description, tuple(e.id for e in chosen), method))
        ev.data["linked"] = sum(1 for i in images if i.entity_ids)
    return images


def _by_names(candidates: list[Entity], text: str) -> list[Entity]:
    """The candidates whose name or an alias occurs in ``text`` (compared normalised)."""
    haystack = normalize_name(text)
    if not haystack:
        return []
    return [e for e in candidates if any(len(k) >= 3 and k in haystack for k in map(normalize_name, (e.name, *e.aliases)))]


def _by_model(
    rt: Runtime, candidates: list[Entity], caption: str, description: str, png: bytes, trace: Trace, template: PromptTemplate
) -> list[Entity]:
    prompt = template.render(
        caption=caption or "(none)",
        description=description or "(none)",
        entities="\n".join(f"- {e.name} ({e.type})" for e in candidates),
    )
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    content = [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}]
    reply = rt.gateway.structured(
        "image_describer",
        [{"role": "user", "content": content}],
        PictureEntities,
        prompt_name=template.name,
        trace=trace,
        max_tokens=200,
    )
    wanted = {normalize_name(n) for n in reply.names}
    return [e for e in candidates if normalize_name(e.name) in wanted or wanted & {normalize_name(a) for a in e.aliases}]
