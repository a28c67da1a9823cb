"""The Graph tab of GraphRAG Topics: an entity's neighbourhood as a picture, and the community list.

Search an entity by name or alias; the picture shows it with the entities around it
(coloured by community, relationships labelled). Clicking an entity in the picture
re-centres the view on it. The layout is igraph's Kamada-Kawai (deterministic: it starts
from a circle), drawn as SVG by :func:`neighbourhood_svg`.
"""

from __future__ import annotations

import html
import math
from typing import Any

import gradio as gr
import igraph

from ragtopics.errors import RagTopicsError
from ragtopics.graph.community_index import CommunityIndex
from ragtopics.graph.ingest import graph_store
from ragtopics.graph.model import Entity, Relationship
from ragtopics.kinds import kind_of
from ragtopics.runtime import Runtime
from ragtopics.topics.topics import list_topics
from ragtopics.ui.common import find_topic
from ragtopics.ui.words import plural

#: Community colours (Okabe-Ito, readable for colour-blind people), then grey for entities in none.
PALETTE = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"]
NO_COMMUNITY = "#9ca3af"
WIDTH, HEIGHT, MARGIN = 960, 560, 70
#: Most entities drawn around the centre.
MAX_SHOWN = 40
#: Relative widths of the communities table: the member count keeps its header on one line, the texts wrap.
COMMUNITY_COLUMN_WIDTHS: list[str | int] = ["18%", "10%", "27%", "45%"]
#: The picture's click handler: a click on an entity sends its name to the server as a select event.
CLICK_JS = (
    "element.addEventListener('click', (e) => { const node = e.target.closest('[data-entity]');"
    " if (node) { trigger('select', {value: node.dataset.entity, index: 0}); } });"
)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def neighbourhood_svg(
    entities: list[Entity], relationships: list[Relationship], community_of: dict[str, str], centre_id: str
) -> str:
    """An SVG picture of entities and the relationships among them.

    Args:
        entities: the entities to draw (the centre among them).
        relationships: relationships whose two ends are drawn; each is labelled with its description.
        community_of: entity id → community id (entities without one are grey).
        centre_id: the entity drawn larger, with a dark ring.

    Returns:
        ``<svg>`` markup; every entity is a ``<g data-entity="name">`` the click handler reads.
    """
    if not entities:
        return "<p>No entities to draw.</p>"
    index = {e.id: i for i, e in enumerate(entities)}
    edges = [(index[r.source_id], index[r.target_id]) for r in relationships if r.source_id in index and r.target_id in index]
    graph = igraph.Graph(n=len(entities), edges=edges)
    coords = graph.layout_kamada_kawai().coords if len(entities) > 1 else [(0.0, 0.0)]
    xs, ys = [c[0] for c in coords], [c[1] for c in coords]
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0

    def at(i: int) -> tuple[float, float]:
        x = MARGIN + (xs[i] - min(xs)) / span_x * (WIDTH - 2 * MARGIN) if len(entities) > 1 else WIDTH / 2
        y = MARGIN + (ys[i] - min(ys)) / span_y * (HEIGHT - 2 * MARGIN) if len(entities) > 1 else HEIGHT / 2
        return x, y

    colours: dict[str, str] = {}
    for e in entities:
        cid = community_of.get(e.id)
        if cid and cid not in colours:
            colours[cid] = PALETTE[len(colours) % len(PALETTE)]
    parts = [
        (
            f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {WIDTH} {HEIGHT}' width='100%' role='img' "
            f"aria-label='Graph around {html.escape(next(e.name for e in entities if e.id == centre_id) if centre_id in index else '')}' "
            "style='font-family:system-ui,sans-serif;background:#fff;border:1px solid #e5e7eb;border-radius:6px'>"
        )
    ]
    for r in relationships:
        if r.source_id not in index or r.target_id not in index:
            continue
        (x1, y1), (x2, y2) = at(index[r.source_id]), at(index[r.target_id])
        angle = math.degrees(math.atan2(y2 - y1, x2 - x1))
        angle = angle - 180 if angle > 90 else angle + 180 if angle < -90 else angle  # labels never upside down
        label = html.escape(_short(r.description or "related", 34))
        parts.append(
            f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='#9ca3af' "
            f"stroke-width='{1 + min(r.strength, 5) * 0.4:.1f}'/>"
            f"<text x='{(x1 + x2) / 2:.1f}' y='{(y1 + y2) / 2 - 3:.1f}' font-size='10' fill='#4b5563' text-anchor='middle' "
            f"transform='rotate({angle:.1f} {(x1 + x2) / 2:.1f} {(y1 + y2) / 2:.1f})' class='rt-rel'>{label}</text>"
        )
    for i, e in enumerate(entities):
        x, y = at(i)
        centre = e.id == centre_id
        fill = colours.get(community_of.get(e.id, ""), NO_COMMUNITY)
        ring = "stroke='#111827' stroke-width='3'" if centre else "stroke='#fff' stroke-width='1.5'"
        parts.append(
            f"<g data-entity='{html.escape(e.name, quote=True)}' class='rt-entity' style='cursor:pointer'>"
            f"<title>{html.escape(e.type)}: {html.escape(_short(e.description, 300))}</title>"
            f"<circle cx='{x:.1f}' cy='{y:.1f}' r='{16 if centre else 10}' fill='{fill}' {ring}/>"
            f"<text x='{x:.1f}' y='{y + (30 if centre else 23):.1f}' font-size='{13 if centre else 11}' "
            f"font-weight='{700 if centre else 400}' text-anchor='middle' fill='#111827'>{html.escape(_short(e.name, 28))}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def neighbourhood(rt: Runtime, topic_name: str, name: str, hops: int = 1) -> tuple[str, str]:
    """The picture and a description (Markdown) of an entity's neighbourhood in a GraphRAG Topic.

    Returns:
        ``(svg or message, details)``; a RAG Topic, an unknown entity or an empty graph say so.
    """
    topic = find_topic(rt, topic_name)
    if topic is None or not kind_of(topic).has_graph:
        return "<p>Choose a GraphRAG Topic.</p>", ""
    if not (name or "").strip():
        return "<p>Type an entity's name (or pick one from the community list).</p>", ""
    try:
        store = graph_store(rt, topic)
        centre = store.entity_by_name(name) if store.exists() else None
        if centre is None:
            return (
                f"<p>No entity called <b>{html.escape(name)}</b> in this Topic (names and aliases are compared ignoring case).</p>",
                "",
            )
        around = store.neighbours([centre.id], hops=max(1, min(int(hops or 1), 3)), limit=MAX_SHOWN)
        index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims)
        community_of = {}
        for e in around.entities:
            hits = index.communities_of(e.id, k=5)
            if hits:
                community_of[e.id] = min(hits, key=lambda h: len(h.entity_ids)).community_id  # the most specific
    except RagTopicsError as exc:
        return f"<p>{html.escape(str(exc))}</p>", ""
    svg = neighbourhood_svg(list(around.entities), list(around.relationships), community_of, centre.id)
    names = {e.id: e.name for e in around.entities}
    ties = [r for r in around.relationships if centre.id in (r.source_id, r.target_id)]
    around_text = plural(len(around.entities) - 1, "entity", "entities")
    lines = [
        (
            f"**{centre.name}** ({centre.type}) · {around_text} around it · {plural(centre.mentions, 'chunk')} "
            f"{'mentions' if centre.mentions == 1 else 'mention'} it"
        ),
        "",
        centre.description or "",
        "",
    ]
    if centre.aliases:
        lines.append("Also called: " + ", ".join(sorted(centre.aliases)))
    for r in sorted(ties, key=lambda r: -r.strength)[:15]:
        other = names.get(r.target_id if r.source_id == centre.id else r.source_id, "?")
        lines.append(f"- {'→' if r.source_id == centre.id else '←'} **{other}**: {r.description}")
    lines += history_lines(rt, topic.id, centre)
    return svg, "\n".join(lines)


def history_lines(rt: Runtime, topic_id: str, entity: Entity) -> list[str]:
    """The entity's history under the details: the operator's corrections that concern it (none: no lines)."""
    from ragtopics.graph.corrections import history_of  # as the other graph modules here: loaded when a graph is shown

    history = history_of(rt, topic_id, entity)
    if not history:
        return []
    return [
        "",
        "**History** (corrections, applied again at every upload):",
        *(
            f"- #{h['id']} {html.escape(h['summary'], quote=False)}, {h['at'][:16].replace('T', ' ')} UTC"
            f"{' by ' + html.escape(h['by'], quote=False) if h['by'] else ''}"
            for h in history
        ),
    ]


def communities_table(rt: Runtime, topic_name: str) -> list[list]:
    """Rows of the community list: title, members, key entities, summary (largest first)."""
    topic = find_topic(rt, topic_name)
    if topic is None or not kind_of(topic).has_graph:
        return []
    index = CommunityIndex(rt.redis, topic.id, dims=rt.gateway.embedder.dims)
    hits = index.get(sorted(index.get_hashes()))
    hits.sort(key=lambda h: (-len(h.entity_ids), h.title))
    return [[h.title, len(h.entity_ids), ", ".join(h.key_entities[:5]), _short(h.summary, 400)] for h in hits]


def graphrag_names(rt: Runtime) -> list[str]:
    """Names of the GraphRAG Topics."""
    return [t.name for t in list_topics(rt) if kind_of(t).has_graph]


def build(rt: Runtime) -> dict:
    """Lay out the Graph tab; returns ``{"tab", "topic", "name", "hops", "picture", "details"}``."""
    private: dict[str, Any] = {"api_visibility": "private"}
    with gr.Tab("Graph", id="graph") as tab:
        gr.Markdown("The knowledge graph of a GraphRAG Topic. Search an entity; click one in the picture to move to it.")
        with gr.Row():
            topic = gr.Dropdown(choices=[], label="Topic", allow_custom_value=True, elem_id="graph-topic")
            name = gr.Textbox(label="Entity", placeholder="e.g. Pump P-7", elem_id="graph-entity")
            hops = gr.Slider(1, 3, value=1, step=1, label="Hops", elem_id="graph-hops")
            show = gr.Button("Show", variant="primary", elem_id="graph-show")
        picture = gr.HTML(elem_id="graph-picture", js_on_load=CLICK_JS)
        details = gr.Markdown(elem_id="graph-details")
        note = gr.Markdown(elem_id="graph-communities-note")
        communities = gr.Dataframe(
            headers=["Community", "Members", "Key entities", "Summary"],
            interactive=False,
            wrap=True,
            label="Communities",
            elem_id="graph-communities",
            column_widths=COMMUNITY_COLUMN_WIDTHS,
        )

    def on_click(topic_name, depth, evt: gr.SelectData):
        picked = str(evt.value or "")
        return (picked, *neighbourhood(rt, topic_name, picked, depth))

    def pick_community(topic_name, depth, evt: gr.SelectData):
        rows = communities_table(rt, topic_name)
        row = rows[evt.index[0]] if evt.index and evt.index[0] < len(rows) else None
        first = row[2].split(", ")[0] if row and row[2] else ""
        return (first, *neighbourhood(rt, topic_name, first, depth)) if first else (gr.skip(), gr.skip(), gr.skip())

    for trigger in (show.click, name.submit):
        trigger(lambda t, n, h: neighbourhood(rt, t, n, h), [topic, name, hops], [picture, details], **private)
    picture.select(on_click, [topic, hops], [name, picture, details], **private)
    communities.select(pick_community, [topic, hops], [name, picture, details], **private)

    def community_list(topic_name):
        rows = communities_table(rt, topic_name)
        empty = "No communities yet: run *Recompute Communities Now* (Upload tab, Knowledge graph) once documents are indexed."
        return rows, "" if rows or not find_topic(rt, topic_name) else empty

    topic.change(community_list, topic, [communities, note], **private)
    tab.select(lambda current: gr.Dropdown(choices=graphrag_names(rt), value=current), topic, topic, **private)
    return {"tab": tab, "topic": topic, "name": name, "hops": hops, "picture": picture, "details": details}
