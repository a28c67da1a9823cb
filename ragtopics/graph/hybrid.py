"""The HYBRID way of a GraphRAG Topic: community summaries first, then LOCAL searches for planned follow-ups.

HYBRID is the way for a question that needs both an overview and details, and the way
taken whenever the router is unsure. It follows the idea of Microsoft GraphRAG's DRIFT
search, reduced to a bounded loop:

1. **Summaries**: the GLOBAL select and map steps (:class:`~ragtopics.graph.global_search.GlobalRetriever`).
2. **Plan**: the Follow-up Model reads the question and what the summaries say and plans
   concrete follow-up questions (typed ``{questions}``), at most Max Follow-up Questions
   per round, for at most Max Follow-up Rounds rounds; a later round sees what the
   earlier rounds found. With the bundled model, which cannot plan, there is one round
   with one follow-up: the question itself.
3. **Search**: a LOCAL search for each follow-up (:class:`~ragtopics.graph.local.LocalRetriever`).
4. **Synthesis**: the answer stage writes one answer from the summaries and all findings, with
   the Follow-up Model (:data:`SYNTHESIS_ROLE`, as the specification assigns planning and synthesis);
   the sources are the documents of the chunks used.

Planning fails (the model cannot be reached or its reply does not parse): LOCAL on the
original question, and the context's note says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from ragtopics.answer.context import Context, Evidence, RetrievalQuery, SearchProgress
from ragtopics.errors import ModelUnavailableError, StructuredOutputError
from ragtopics.graph.global_search import GlobalRetriever
from ragtopics.graph.local import LocalRetriever
from ragtopics.prompts.templates import PromptTemplate
from ragtopics.runtime import Runtime
from ragtopics.settings.topic import GraphRagTopicSettings
from ragtopics.tracing.trace import Trace

if TYPE_CHECKING:
    from ragtopics.topics.topics import Topic

log = logging.getLogger(__name__)

#: Role whose model plans the follow-up questions.
PLAN_ROLE = "follow_up"
#: Role whose model writes HYBRID's answer from the summaries and the findings (a role without its own model
#: uses the Language Model's).
SYNTHESIS_ROLE = "follow_up"
#: Most characters of findings shown to the planner of a later round.
FINDINGS_CHARS = 3000


class FollowUpPlan(BaseModel):
    """The planner's typed reply."""

    questions: list[str] = Field(
        default_factory=list, description="Concrete follow-up questions, each answerable from the documents."
    )


@dataclass(slots=True)
class HybridRetriever:
    """HYBRID search (see the module docstring).

    Args:
        rt: the runtime.
        topic: the GraphRAG Topic.
        settings: its settings (max_follow_up_rounds, max_follow_up_questions, max_cited_chunks and the
            GLOBAL and LOCAL settings).
        map_prompt: the ``global_map`` prompt.
        plan_prompt: the ``follow_up_plan`` prompt.
        route: the route name put on the context.
        progress: where to say each step, and whose Stop ends the searches (None: silent).
    """

    rt: Runtime
    topic: Topic
    settings: GraphRagTopicSettings
    map_prompt: PromptTemplate
    plan_prompt: PromptTemplate
    route: str = "HYBRID"
    progress: SearchProgress | None = None

    def retrieve(self, query: RetrievalQuery, trace: Trace) -> Context:
        """Summaries, then LOCAL findings for each planned follow-up; summaries first, then chunks by LOCAL's order."""
        cfg = self.settings
        summaries = GlobalRetriever(self.rt, self.topic, cfg, self.map_prompt, route=self.route, progress=self.progress).retrieve(
            query, trace
        )
        local = LocalRetriever(self.rt, self.topic, cfg)
        found: dict[str, Evidence] = {}
        asked: list[str] = []
        bundled = self.rt.gateway.endpoint(PLAN_ROLE).is_local
        for round_no in range(max(1, cfg.max_follow_up_rounds)):
            if self._stopped(trace):
                break
            if bundled:
                questions = [query.question] if round_no == 0 else []
                trace.add(
                    "follow_up_plan",
                    round=round_no + 1,
                    method="none",
                    questions=questions,
                    reason="the bundled model cannot plan: the question itself is searched",
                )
            else:
                self._say(f"planning follow-up questions (round {round_no + 1})")
                try:
                    questions = self._plan(query.question, summaries, list(found.values()), asked, trace, round_no)
                except (ModelUnavailableError, StructuredOutputError) as exc:
                    if round_no > 0:  # what earlier rounds found stands
                        trace.add("follow_up_plan", round=round_no + 1, failed=str(exc))
                        break
                    trace.add("follow_up_plan", round=1, failed=str(exc), fallback="LOCAL")
                    context = local.retrieve(query, trace)
                    return Context(context.items, "LOCAL", f"HYBRID planning failed ({exc}); LOCAL on the question")
            questions = [q for q in questions if q.strip() and q not in asked][: cfg.max_follow_up_questions]
            if not questions:
                break
            for question in questions:
                if self._stopped(trace):
                    break
                self._say(f"searching: {question}")
                asked.append(question)
                with trace.step("follow_up_search", round=round_no + 1, question=question) as ev:
                    context = local.retrieve(RetrievalQuery(question, entities=query.entities), trace)
                    fresh = [e for e in context.items if e.id not in found]
                    found.update((e.id, e) for e in fresh)
                    ev.data.update(found=len(context.items), new=len(fresh))
        chunks = [e for e in found.values() if e.kind == "chunk"][: cfg.max_cited_chunks]
        others = [e for e in found.values() if e.kind != "chunk"]
        items = (*summaries.items, *others, *chunks)
        note = "" if items else (summaries.note or "nothing found by the summaries or the follow-up searches")
        return Context(items, self.route, note, answer_role=SYNTHESIS_ROLE)

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress.say(message)

    def _stopped(self, trace: Trace) -> bool:
        if self.progress is not None and self.progress.stopped:
            trace.add("follow_up_stopped", reason="stopped")
            return True
        return False

    def _plan(
        self, question: str, summaries: Context, findings: list[Evidence], asked: list[str], trace: Trace, round_no: int
    ) -> list[str]:
        """One typed Follow-up Model call: the next round's questions."""
        known = "\n".join(e.text for e in summaries.items) or "(no community summary matched)"
        seen = "\n".join(e.text for e in findings)[:FINDINGS_CHARS] or "(nothing yet)"
        prompt = self.plan_prompt.render(
            question=question,
            summaries=known,
            findings=seen,
            asked="\n".join(f"- {q}" for q in asked) or "(none)",
            max_questions=str(self.settings.max_follow_up_questions),
        )
        reply = self.rt.gateway.structured(
            PLAN_ROLE,
            [{"role": "user", "content": prompt}],
            FollowUpPlan,
            prompt_name=self.plan_prompt.name,
            trace=trace,
            max_tokens=300,
        )
        trace.add("follow_up_plan", round=round_no + 1, method="model", questions=reply.questions)
        return list(reply.questions)
