"""``/api/v1`` routes that manage Topics: create, configure, delete; communities; the graph; evaluation runs.

Each route calls the function the console and the CLI call (:func:`~ragtopics.topics.topics.create_topic`,
:func:`~ragtopics.topics.topics.update_settings`, :func:`~ragtopics.topics.delete.delete_topic`,
:func:`~ragtopics.graph.refresh.enqueue_rebuild`, :func:`~ragtopics.graph.report.graph_stats`,
:func:`~ragtopics.graph.report.entity_info`, :func:`~ragtopics.quality.runs.start_run`,
:func:`~ragtopics.quality.runs.load_run`), so the checks and messages are theirs. Roles follow the
console's pages: the Topics page (create, configure, delete), the Upload page (communities) and the
QA page (evaluation runs) and graph corrections need ``operator``; the Graph page (graph counts, an entity, the
list of corrections) ``viewer``.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from ragtopics.access.users import User
from ragtopics.api import errors, shapes
from ragtopics.api.rest import needs
from ragtopics.graph.corrections import correct, list_corrections
from ragtopics.graph.model import graph_settings
from ragtopics.graph.refresh import enqueue_rebuild, next_refresh, rebuild_job_id
from ragtopics.graph.report import community_stats, entity_info, graph_stats
from ragtopics.jobs.queue import job_progress
from ragtopics.quality.runs import load_run, start_run
from ragtopics.runtime import Runtime
from ragtopics.topics.delete import delete_topic
from ragtopics.topics.topics import create_topic, get_topic, update_settings


class CreateTopicRequest(BaseModel):
    """A new Topic."""

    name: str = Field(description="The Topic's name: 1 to 100 printable characters, unique ignoring case.")
    kind: str = Field("rag", description="`rag` or `graphrag`.")
    description: str = Field("", description="What the Topic holds.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings that differ from the defaults, "
        'e.g. `{"chunk_size": 800}` (the keys of `GET /topics/{name}`\'s `reference`).',
    )


class ConfigureTopicRequest(BaseModel):
    """Settings changed on a Topic (a new settings version)."""

    settings: dict[str, Any] = Field(min_length=1, description='The settings to change, e.g. `{"top_k_results": 8}`.')


class GraphCorrectionRequest(BaseModel):
    """An operator's correction of a GraphRAG Topic's graph (kept as a rule that every later upload applies)."""

    kind: str = Field(description="`merge`, `split`, `rename`, `retype` or `delete`.")
    name: str = Field(description="The entity (name, alias or id); for `split`, the alias to split off.")
    value: str = Field(
        "",
        description="`merge`: the entity to merge into; `split`: the entity the alias is split off; "
        "`rename`: the new name; `retype`: the new type; `delete`: nothing.",
    )


class EvalRunRequest(BaseModel):
    """An evaluation run of a Topic, queued for the worker (the QA page's run)."""

    questions: list[dict[str, Any]] = Field(
        min_length=1, description='`[{"question", "answer"?, "gold_sources"?: [files], "expected_way"?}]`, at most 2,000.'
    )
    settings: dict[str, Any] = Field(default_factory=dict, description="Settings changed for this run only (nothing is stored).")
    route: str | None = Field(None, description="Force this way for every question (None: routed as in a chat).")
    retrieval_only: bool = Field(True, description="Route and search only, no answers (fast).")


def add_routes(app: FastAPI, rt: Runtime) -> None:
    """Add the Topic management, communities, graph and evaluation routes to the ``/api/v1`` app."""
    add_topic_routes(app, rt)
    add_graph_routes(app, rt)
    add_eval_routes(app, rt)


def add_topic_routes(app: FastAPI, rt: Runtime) -> None:
    """Create, configure and delete Topics; each needs the operator role, as the console's Topics page does."""

    @app.post("/topics", tags=["topics"], status_code=201)
    def create(body: CreateTopicRequest, user: User = needs("operator")) -> dict:
        """Create a Topic with its settings (checked as the console and `ragtopics topic create` check them): the
        Topic as `GET /topics/{name}` shows it. Needs the operator role."""
        return errors.answered(
            lambda: shapes.topic_detail(
                create_topic(rt, body.name, kind=body.kind, description=body.description, settings=body.settings)
            )
        )

    @app.patch("/topics/{name}", tags=["topics"])
    def configure(name: str, body: ConfigureTopicRequest, user: User = needs("operator")) -> dict:
        """Change settings (as `ragtopics topic set`): the Topic at its new settings version. Nothing is stored when a
        value is refused. Needs the operator role."""
        return errors.answered(lambda: shapes.topic_detail(update_settings(rt, name, body.settings)))

    @app.delete("/topics/{name}", tags=["topics"])
    def delete(name: str, user: User = needs("operator")) -> dict:
        """Delete a Topic with its documents, chats, graph and files: `{"deleted", "id", "removed", "notes"}`.
        Needs the operator role."""

        def remove() -> dict:
            get_topic(rt, name)  # a missing Topic is a 404 even while the store is down
            rt.check_store()
            return shapes.topic_deletion(delete_topic(rt, name))

        return errors.answered(remove)


def add_graph_routes(app: FastAPI, rt: Runtime) -> None:
    """A GraphRAG Topic's communities (recompute, status; operator, as the Upload page's graph panel) and graph
    (counts, one entity; viewer, as the Graph page)."""

    @app.post("/topics/{name}/communities", tags=["graph"], status_code=202)
    def recompute(name: str, user: User = needs("operator")) -> dict:
        """Recompute the communities now: enqueue the rebuild job, or find the one already queued or running.
        Answers `{"job_id", "status"}`; follow it with `GET /jobs/{job_id}`. Needs the operator role."""

        def enqueue() -> dict:
            topic = get_topic(rt, name)
            rt.check_store()
            job_id = enqueue_rebuild(rt, topic)
            return {"job_id": job_id, "status": job_progress(rt, job_id).status}

        return errors.answered(enqueue)

    @app.get("/topics/{name}/communities", tags=["graph"])
    def communities(name: str, user: User = needs("operator")) -> dict:
        """The communities: `{"communities", "summaries", "last_run", "job", "next_refresh"}`; `job` the latest
        rebuild's status (None when none is known), `next_refresh` when the Refresh Cycle runs next (epoch
        seconds, or None). Needs the operator role."""

        def status() -> dict:
            topic = get_topic(rt, name)
            graph_settings(topic)  # a RAG Topic has none: the console's message
            stats = community_stats(rt, topic)
            job_id = rebuild_job_id(rt, topic.id)
            progress = job_progress(rt, job_id) if job_id else None
            known = progress is not None and progress.status != "missing"
            return {**stats, "job": shapes.job(progress) if known else None, "next_refresh": next_refresh(rt, topic.id)}

        return errors.answered(status)

    @app.get("/topics/{name}/graph", tags=["graph"])
    def graph(name: str, user: User = needs("viewer")) -> dict:
        """The graph's counts, as `ragtopics graph --stats` prints them: chunks, entities, relationships, documents,
        communities, summaries, the last community run, `recompute_due`. Needs the viewer role."""
        return errors.answered(lambda: graph_stats(rt, get_topic(rt, name)))

    @app.post("/topics/{name}/graph/corrections", tags=["graph"], status_code=201)
    def correct_graph(name: str, body: GraphCorrectionRequest, user: User = needs("operator")) -> dict:
        """Correct the graph (merge, split, rename, retype or delete an entity), as `ragtopics graph --merge ...` and the
        Graph tab do: the graph changes at once and the correction is kept as a rule every later upload applies.
        Answers the correction (`id`, `kind`, `summary`, `outcome`, ...). Needs the operator role."""
        by = "" if user is None else user.username
        return errors.answered(lambda: correct(rt, get_topic(rt, name), body.kind, body.name, body.value, by=by).as_dict())

    @app.get("/topics/{name}/graph/corrections", tags=["graph"])
    def corrections(name: str, user: User = needs("viewer")) -> list[dict]:
        """The graph's corrections, oldest first, as `ragtopics graph --corrections` prints them. Needs the viewer role."""
        return errors.answered(lambda: [c.as_dict() for c in list_corrections(rt, get_topic(rt, name).id)])

    @app.get("/topics/{name}/graph/entities/{entity}", tags=["graph"])
    def entity(name: str, entity: str, user: User = needs("viewer")) -> dict:
        """One entity by name or alias, as `ragtopics graph --entity` prints it: type, description, aliases, chunks,
        relationships and communities. Needs the viewer role."""
        return errors.answered(lambda: entity_info(rt, get_topic(rt, name), entity))


def add_eval_routes(app: FastAPI, rt: Runtime) -> None:
    """Evaluation runs (start, read); each needs the operator role, as the console's QA page does."""

    @app.post("/topics/{name}/evals", tags=["evaluation"], status_code=202)
    def start(name: str, body: EvalRunRequest, user: User = needs("operator")) -> dict:
        """Queue an evaluation run of the Topic (checked as the QA page checks it): `{"run_id"}`; the run id is also
        its job's id. Needs the operator role."""
        assignments = [f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in body.settings.items()]
        text = json.dumps(body.questions, ensure_ascii=False)
        return errors.answered(
            lambda: {
                "run_id": start_run(rt, name, text, assignments=assignments, route=body.route, retrieval_only=body.retrieval_only)
            }
        )

    @app.get("/evals/{run_id}", tags=["evaluation"])
    def read(run_id: str, user: User = needs("operator")) -> dict:
        """An evaluation run: what was asked, its job's status, and once finished its summary (recall@k, MRR, ways,
        answers) and one result row per question. Needs the operator role."""

        def load() -> dict:
            info, questions = load_run(rt, run_id)
            progress = job_progress(rt, run_id)
            return shapes.eval_run(info, questions, progress if progress.status != "missing" else None)

        return errors.answered(load)
