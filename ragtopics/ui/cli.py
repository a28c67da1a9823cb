"""The ``ragtopics`` command line: run the product, script Topics, uploads and questions."""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from ragtopics.errors import RagTopicsError, RefusedFileError
from ragtopics.ui.words import removed_text

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command."""
    parser = argparse.ArgumentParser(prog="ragtopics", description="Document question answering with cited sources.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start Redis, a worker, the local model and the console; Ctrl-C stops all")
    worker = sub.add_parser(
        "worker", help="run one job worker (a launcher imports the libraries once and forks a new worker when one is killed)"
    )
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    sub.add_parser("serve-model", help="serve only the bundled language model (llama.cpp) on LOCAL_LLM_PORT")

    topic = sub.add_parser("topic", help="create, list, show and change Topics").add_subparsers(
        dest="topic_command", required=True
    )
    create = topic.add_parser("create", help="create a Topic")
    create.add_argument("name")
    create.add_argument("--kind", default="rag", choices=["rag", "graphrag"])
    create.add_argument("--description", default="")
    create.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE")
    topic.add_parser("list", help="list Topics")
    show = topic.add_parser("show", help="show a Topic's settings")
    show.add_argument("name")
    change = topic.add_parser("set", help="change settings (a new settings version)")
    change.add_argument("name")
    change.add_argument("assignments", nargs="+", metavar="KEY=VALUE")
    remove = topic.add_parser("delete", help="delete a Topic with its documents, chats and files")
    remove.add_argument("name")
    remove.add_argument("--yes", action="store_true", help="confirm the delete (required)")

    ingest = sub.add_parser("ingest", help="upload files into a Topic and wait for indexing")
    ingest.add_argument("topic")
    ingest.add_argument("files", nargs="+", type=Path)
    ingest.add_argument("--no-wait", action="store_true", help="enqueue and return")
    ingest.add_argument(
        "--dry-run",
        action="store_true",
        help="print the cost estimate (chunks, model calls, tokens, time, money) and queue nothing",
    )
    ingest.add_argument("--json", action="store_true", help="with --dry-run: print the estimate as JSON")
    docs = sub.add_parser("docs", help="list a Topic's indexed documents, or delete one")
    docs.add_argument("topic")
    docs.add_argument("--json", action="store_true")
    docs.add_argument(
        "--delete",
        metavar="FILE",
        default=None,
        help="delete the document FILE: its chunks, keywords, pictures, stored files and links",
    )

    graph = sub.add_parser("graph", help="a GraphRAG Topic's graph: counts, one entity, import nodes and edges, or correct it")
    graph.add_argument("topic")
    shown = graph.add_mutually_exclusive_group(required=True)
    shown.add_argument("--stats", action="store_true", help="chunks, entities, relationships, communities, summaries, last run")
    shown.add_argument("--entity", metavar="NAME", help="an entity (by name or alias): relationships and communities")
    shown.add_argument(
        "--import",
        dest="import_file",
        metavar="FILE",
        type=Path,
        help='graph ingestion: a JSON file {"nodes": [...], "edges": [...]}, or a CSV nodes file (with --edges)',
    )
    shown.add_argument(
        "--from-falkordb",
        metavar="DB",
        help="graph ingestion from a graph in FalkorDB (with --graph): "
        "a registered graph database's name (see graphdb list) or a redis:// URL",
    )
    shown.add_argument("--merge", metavar="NAME", help="correct the graph: merge this entity into --into (kept as a rule)")
    shown.add_argument("--split", metavar="ALIAS", help="correct the graph: split this alias off --from into its own entity")
    shown.add_argument("--rename", metavar="NAME", help="correct the graph: rename this entity to --to")
    shown.add_argument("--retype", metavar="NAME", help="correct the graph: change this entity's type to --type")
    shown.add_argument("--delete-entity", metavar="NAME", help="correct the graph: delete this entity, now and at later uploads")
    shown.add_argument("--corrections", action="store_true", help="list the graph's corrections (the rules every upload applies)")
    graph.add_argument("--into", metavar="NAME", help="the entity --merge merges into")
    graph.add_argument("--from", dest="split_from", metavar="NAME", help="the entity --split takes the alias from")
    graph.add_argument("--to", metavar="NAME", help="the new name of --rename")
    graph.add_argument("--type", dest="new_type", metavar="TYPE", help="the new type of --retype")
    graph.add_argument("--edges", metavar="FILE", type=Path, help="the CSV edges file of --import (source, target, ...)")
    graph.add_argument("--graph", dest="graph_name", metavar="NAME", help="the FalkorDB graph of --from-falkordb")
    communities = sub.add_parser("communities", help="rebuild a GraphRAG Topic's communities and their summaries")
    communities.add_argument("topic")
    communities.add_argument("--recompute", action="store_true", required=True, help="enqueue a rebuild now")
    communities.add_argument("--wait", action="store_true", help="wait for the rebuild and print its counts")

    ask = sub.add_parser("ask", help="ask a Topic a question")
    ask.add_argument("topic")
    ask.add_argument("question")
    ask.add_argument(
        "--json",
        action="store_true",
        help='print {"answer", "sources", "route", "route_confidence", "route_reason", "timings_ms", ...}',
    )
    ask.add_argument(
        "--route",
        default=None,
        help="force a way instead of routing (RAG: DIRECT, ATTACHMENT, SEARCH; "
        "GraphRAG: DIRECT, ATTACHMENT, PATH, LOCAL, GLOBAL, HYBRID)",
    )
    ask.add_argument("--no-save", action="store_true", help="do not save the turn in a chat session")
    ask.add_argument("--session", default=None, help="continue a chat session")
    ask.add_argument("--attach", type=Path, default=None, help="attach a file to the question (text or picture)")

    evaluation = sub.add_parser(
        "eval", help="score a Topic on a question file (recall@k, MRR, answers, ways), or compare two runs"
    )
    evaluation.add_argument("topic", nargs="?", help="the Topic to evaluate")
    evaluation.add_argument(
        "questions", nargs="?", type=Path, help='JSON list of {"question", "answer"?, "gold_sources"?: [files], "expected_way"?}'
    )
    evaluation.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting changed for this evaluation only (repeatable; nothing is stored)",
    )
    evaluation.add_argument("--route", default=None, help="force this way for every question")
    evaluation.add_argument("--retrieval-only", action="store_true", help="route and search only, no answers (fast)")
    evaluation.add_argument(
        "--judge", action="store_true", help="grade each answer against the expected one with the judge model (JUDGE_BASE_URL)"
    )
    evaluation.add_argument("--out", type=Path, default=None, help="write summary.json, questions.json and questions.csv here")
    evaluation.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    evaluation.add_argument(
        "--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two runs (their --out folders or summary.json files)"
    )

    graphdb = sub.add_parser("graphdb", help="Graph Databases: FalkorDB servers a GraphRAG Topic can keep its graph in")
    graphdb_sub = graphdb.add_subparsers(dest="graphdb_command", required=True)
    graphdb_sub.add_parser("list", help="list the registered graph databases (the app's own Redis is 'default')")
    graphdb_add = graphdb_sub.add_parser("add", help="register a FalkorDB server (checked for the FalkorDB module)")
    graphdb_add.add_argument("name")
    graphdb_add.add_argument("url", help="redis://host:port/db")
    graphdb_remove = graphdb_sub.add_parser("remove", help="unregister a graph database no Topic uses")
    graphdb_remove.add_argument("name")
    user = sub.add_parser("user", help="console users, roles and API tokens (run on the server, as its administrator)")
    user_sub = user.add_subparsers(dest="user_command", required=True)
    user_sub.add_parser("list", help="list users with their role and DEV_REPORTING")
    user_add = user_sub.add_parser("add", help="add a user; the password is asked for (or read from standard input)")
    user_add.add_argument("name")
    user_add.add_argument("--role", required=True, choices=["viewer", "operator", "admin"])
    user_add.add_argument("--dev-reporting", action="store_true", help="grant DEV_REPORTING (the DEV Reports tab)")
    user_set = user_sub.add_parser("set", help="change a user's role, DEV_REPORTING or password")
    user_set.add_argument("name")
    user_set.add_argument("--role", choices=["viewer", "operator", "admin"])
    user_set.add_argument("--dev-reporting", action=argparse.BooleanOptionalAction, default=None)
    user_set.add_argument("--password", action="store_true", help="set a new password (asked for)")
    user_delete = user_sub.add_parser("delete", help="delete a user and their API tokens")
    user_delete.add_argument("name")
    user_delete.add_argument("--yes", action="store_true", help="confirm the delete (required)")
    user_unlock = user_sub.add_parser("unlock", help="forget a user's failed logins (after too many, login waits 15 minutes)")
    user_unlock.add_argument("name")
    user_token = user_sub.add_parser("token", help="make an API token for a user (printed once)")
    user_token.add_argument("name")
    user_token.add_argument("--label", default="", help="what the token is for")
    demo = sub.add_parser("demo", help="demo links: one Topic's chat, without login, for whoever holds the link")
    demo_sub = demo.add_subparsers(dest="demo_command", required=True)
    demo_create = demo_sub.add_parser("create", help="make a demo link for a Topic (its URL is printed once)")
    demo_create.add_argument("topic")
    demo_create.add_argument("--hours", type=float, default=None, help="how long it lasts (default 24, at most 720 = 30 days)")
    demo_create.add_argument("--allow-sources", action="store_true", help="let visitors download the files answers cite")
    demo_create.add_argument("--rate", type=int, default=None, help="questions per minute per visitor (default 5)")
    demo_create.add_argument(
        "--link-rate", type=int, default=None, help="questions per minute per link, all visitors together (default 30)"
    )
    demo_create.add_argument("--json", action="store_true")
    demo_list = demo_sub.add_parser("list", help="list demo links (never their tokens)")
    demo_list.add_argument("--topic", default=None, help="only this Topic's links")
    demo_list.add_argument("--json", action="store_true")
    demo_revoke = demo_sub.add_parser("revoke", help="revoke a demo link now")
    demo_revoke.add_argument("id")
    demo_revoke.add_argument("--delete-chats", action="store_true", help="also delete what its visitors asked")
    demo_chats = demo_sub.add_parser("chats", help="what visitors asked through a demo link")
    demo_chats.add_argument("id")
    demo_chats.add_argument("--json", action="store_true")
    db = sub.add_parser("db", help="schema migrations of the metadata database").add_subparsers(dest="db_command", required=True)
    db.add_parser("upgrade", help="migrate the database to the newest revision now (start-up does it too)")
    revision = db.add_parser("revision", help="write a new migration script from the changed models (developers)")
    revision.add_argument("-m", "--message", required=True, help="what the revision changes, one line")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ragtopics`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.settings.env import get_settings

    logging.basicConfig(
        level=get_settings().log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if args.command not in ("up", "worker", "serve-model"):
        logging.getLogger().setLevel(logging.WARNING)
        _quiet_model_loading()
    try:
        return _COMMANDS[args.command](args)
    except RagTopicsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of the output went away (`ragtopics docs T | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # as the Python docs advise for SIGPIPE
        return 1


def _quiet_model_loading() -> None:
    """No progress bars from the embedding model's loader in CLI output."""
    try:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass


def _cmd_up(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.ops.supervisor import run_stack

    return run_stack()


def _cmd_worker(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.settings.env import get_settings
    from ragtopics.worker.launcher import run_launcher

    return run_launcher(get_settings(), burst=args.burst)


def _cmd_serve_model(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.llm.local_server import LocalModelServer
    from ragtopics.settings.env import get_settings

    server = LocalModelServer(get_settings()).start()
    print(f"serving the bundled model at {server.base_url} (Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop()


def _cmd_topic(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.runtime import get_runtime
    from ragtopics.settings.topic import parse_assignments
    from ragtopics.topics import topics

    rt = get_runtime()
    if args.topic_command == "create":
        t = topics.create_topic(
            rt, args.name, kind=args.kind, description=args.description, settings=parse_assignments(args.assignments)
        )
        print(f"created Topic {t.name!r} ({t.id})")
    elif args.topic_command == "list":
        for t in topics.list_topics(rt):
            print(f"{t.name}\t{t.kind}\t{t.id}\tsettings v{t.settings_version}")
    elif args.topic_command == "show":
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.api.shapes import topic_detail

        print(json.dumps(topic_detail(topics.get_topic(rt, args.name)), indent=2))
    elif args.topic_command == "delete":
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.topics.delete import delete_topic

        if not args.yes:
            t = topics.get_topic(rt, args.name)
            print(
                f"error: deleting Topic {t.name!r} removes its documents, chats and files for good; add --yes to confirm",
                file=sys.stderr,
            )
            return 2
        rt.check_store()
        deletion = delete_topic(rt, args.name)
        print(f"deleted Topic {deletion.topic.name!r}: " + removed_text(deletion.removed))
        for note in deletion.notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        t = topics.update_settings(rt, args.name, parse_assignments(args.assignments))
        print(f"Topic {t.name!r} now at settings v{t.settings_version}")
    return 0


def _cmd_ingest(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.documents.uploads import BatchedUploads
    from ragtopics.jobs.queue import job_progress
    from ragtopics.runtime import get_runtime
    from ragtopics.topics.topics import get_topic

    rt = get_runtime()
    topic = get_topic(rt, args.topic)
    if args.dry_run:
        return _dry_run(rt, topic, args)
    rt.check_store()
    jobs: dict[str, str] = {}
    refused = 0
    with BatchedUploads(rt, topic) as uploads:  # small files share indexing jobs
        for path in args.files:
            try:
                data = path.read_bytes()
                doc = uploads.add(path.name, data)
            except (OSError, RagTopicsError) as exc:
                print(f"refused {path}: {exc}", file=sys.stderr)
                refused += 1
                continue
            jobs[doc.job_id] = doc.file_name
    for row, message in uploads.not_queued:
        print(f"not queued {row.file_name}: {message}", file=sys.stderr)
        jobs.pop(row.job_id, None)
        refused += 1
    print(f"enqueued {len(jobs)} file(s)" + (f", refused {refused}" if refused else ""), file=sys.stderr)
    if args.no_wait or not jobs:
        return 1 if refused else 0
    failed = _wait_for_jobs(rt, jobs, job_progress)
    _print_comparison(rt, list(jobs))
    return 1 if failed or refused else 0


def _dry_run(rt, topic, args) -> int:
    """``ingest --dry-run``: the cost estimate of the files on stdout; nothing is stored or queued."""
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.ingest.cost import estimate_upload

    files = []
    unreadable = 0
    for path in args.files:
        try:
            files.append((path.name, path.read_bytes()))
        except OSError as exc:
            print(f"refused {path}: {exc}", file=sys.stderr)
            unreadable += 1
    estimate = estimate_upload(rt, topic, files)
    print(json.dumps(estimate.to_dict(), indent=1) if args.json else estimate.to_text())
    return 1 if unreadable or any(f.refused for f in estimate.files) else 0


def _print_comparison(rt, job_ids: list[str]) -> None:
    """After an ingest: the estimate kept with each upload beside what it took, summed (chunks, calls by kind)."""
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.ingest.cost import KINDS, comparison

    try:
        entries = [e for e in comparison(rt, job_ids).values() if e["actual"]]
    except Exception as exc:
        log.debug("no cost comparison: %s", exc)
        return
    if not entries:
        return
    est_chunks = sum(e["estimate"].get("chunks", 0) for e in entries)
    act_chunks = sum(e["actual"].get("chunks", 0) for e in entries)
    print(f"estimated vs actual ({len(entries)} file(s)): chunks {est_chunks:,.0f} vs {act_chunks:,}", file=sys.stderr)
    for kind, spec in KINDS.items():
        est = sum(e["estimate"].get("calls", {}).get(kind, 0) for e in entries)
        act = sum(e["actual"].get("calls", {}).get(kind, 0) for e in entries)
        if est or act:
            shown = "at the next rebuild" if spec.at_rebuild else f"{act:,}"
            print(f"  {spec.label}: {est:,.0f} vs {shown} call(s)", file=sys.stderr)
    tokens_in = sum(e["actual"].get("tokens_in", 0) for e in entries)
    tokens_out = sum(e["actual"].get("tokens_out", 0) for e in entries)
    print(f"  actual tokens: {tokens_in:,} in, {tokens_out:,} out", file=sys.stderr)


#: How many of the oldest unfinished jobs ``ingest`` polls per round.
POLL_WINDOW = 32
#: How long ``ingest`` keeps waiting for the store to come back (the supervisor restarts a crashed Redis; AOF keeps the jobs).
STORE_OUTAGE_S = 180.0


def _wait_for_jobs(rt, jobs: dict[str, str], job_progress) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    import redis

    pending = dict(jobs)
    failed = empty = stopped = 0
    chunks = 0
    last_done = -1
    started = time.monotonic()
    unreachable_since: float | None = None
    last_print, last_running = 0.0, ""
    tty = sys.stderr.isatty()

    def say(text: str) -> None:  # a file's line; on a terminal, over the progress line it replaces
        print(("\r\x1b[K" if tty else "") + text, file=sys.stderr)

    while pending:
        # Jobs run roughly in the order they were queued: polling the oldest few keeps a wait on a
        # thousand files from costing thousands of Redis round trips a second; later ones are read when they come up.
        try:
            progress = [(job_id, name, job_progress(rt, job_id)) for job_id, name in list(pending.items())[:POLL_WINDOW]]
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            unreachable_since = unreachable_since or time.monotonic()
            waited = time.monotonic() - unreachable_since
            if waited > STORE_OUTAGE_S:
                print(
                    f"\nerror: the store has been unreachable for {waited:.0f} s ({exc}); the jobs stay queued, "
                    "check them later with `ragtopics docs`",
                    file=sys.stderr,
                )
                return failed + len(pending)
            print(f"\nthe store is unreachable ({exc}); waiting for it to come back ({waited:.0f} s)", file=sys.stderr)
            time.sleep(2.0)
            continue
        if unreachable_since is not None:
            print("the store is back; still waiting for the jobs", file=sys.stderr)
            unreachable_since = None
        for job_id, name, p in progress:
            if not p.is_final:
                continue
            del pending[job_id]
            if p.status == "missing":  # a delete removes the document's jobs with it
                stopped += 1
                say(f"  {name}: its job is gone (the document was deleted while it was indexed)")
            elif p.status == "finished" and (p.result or {}).get("status") in ("superseded", "cancelled"):
                stopped += 1
                say(f"  {name}: {(p.result or {}).get('reason')}")
            elif p.status == "finished":
                chunks += (p.result or {}).get("chunk_count", 0)
                empty += (p.result or {}).get("status") == "empty"
                if len(jobs) <= 20:
                    say(f"  {name}: {(p.result or {}).get('status')} ({_chunks((p.result or {}).get('chunk_count', 0))})")
            else:
                failed += 1
                say(f"  {name}: FAILED: {p.error or p.status}")
        done = len(jobs) - len(pending)
        counts = (
            f"{done - failed - empty - stopped} indexed"
            + (f", {empty} empty" if empty else "")
            + (f", {stopped} replaced or deleted" if stopped else "")
            + (f", {failed} failed" if failed else "")
        )
        line = f"[{done}/{len(jobs)}] files done: {counts}; {_chunks(chunks)}, {time.monotonic() - started:.0f} s"
        running = next((f" · {name}: {_step(p)}" for _, name, p in progress if not p.is_final and p.status == "started"), "")
        if tty:
            print("\r" + line + running + "\x1b[K", end="", file=sys.stderr)
        elif done != last_done or not pending or (running != last_running and time.monotonic() - last_print >= 5):
            print(line + running, file=sys.stderr)
            last_print, last_running = time.monotonic(), running
        last_done = done
        if pending:
            time.sleep(0.3)
    print(file=sys.stderr)
    return failed


def _chunks(count: int) -> str:
    """``1 chunk``, ``2 chunks``."""
    return f"{count:,} chunk{'' if count == 1 else 's'}"


def _step(p) -> str:
    """A running job's step for the ingest line (see :func:`~ragtopics.jobs.queue.phase_text`)."""
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.jobs.queue import phase_text

    return phase_text(p.phase or "working", p.done, p.total)


def _cmd_docs(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.documents.uploads import list_documents
    from ragtopics.runtime import get_runtime
    from ragtopics.topics.topics import get_topic

    rt = get_runtime()
    topic = get_topic(rt, args.topic)
    if args.delete is not None:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.documents.delete import delete_document

        rt.check_store()
        removed = delete_document(rt, topic, args.delete)
        print(f"deleted {args.delete} from Topic {topic.name!r}: {removed_text(removed)}")
        return 0
    docs = list_documents(rt, topic)
    if args.json:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.api.shapes import document

        print(json.dumps([document(d) for d in docs], indent=2))
    else:
        for d in docs:
            print(f"{d.file_name}\t{d.status}\t{_chunks(d.chunk_count)}\t{d.error or d.warning}")
    return 0


def _cmd_ask(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.answer.turn import ask
    from ragtopics.runtime import get_runtime
    from ragtopics.topics.topics import get_topic

    rt = get_runtime()
    rt.check_store()
    topic = get_topic(rt, args.topic)
    attachment = None
    if args.attach is not None:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.answer.attachments import read_attachment

        try:
            data = args.attach.read_bytes()
        except OSError as exc:
            raise RagTopicsError(f"cannot read {args.attach}: {exc.strerror}") from exc
        attachment = read_attachment(
            data,
            args.attach.name,
            allowed_types=topic.settings.chat_attachment_types,
            max_mb=topic.settings.largest_chat_attachment_mb,
            model_sees_images=rt.settings.endpoint("language_model").supports_images,
        )
    final = None
    shown = ""
    for update in ask(
        rt, topic, args.question, session_id=args.session, attachment=attachment, route=args.route, save=not args.no_save
    ):
        final = update
        if not args.json and not update.done and update.text.startswith(shown):
            print(update.text[len(shown) :], end="", flush=True)  # stream as it arrives
            shown = update.text
    if final is None:
        raise RagTopicsError("the answer ended before its first update")
    if args.json:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.api.shapes import answer

        print(json.dumps(answer(final), ensure_ascii=False))
    else:
        print(final.text[len(shown) :] if final.text.startswith(shown) else "\n" + final.text)
        for s in final.sources:
            print(f"  [{s.cited_as}] score {s.score:.3f} ({s.chunk_id}{', ' + s.reason if s.reason else ''})")
        print(f"(session {final.session_id})", file=sys.stderr)
    return 0


def _cmd_db(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.storage import migrate

    if args.db_command == "revision":
        print(f"wrote {migrate.new_revision(args.message)}; review it (data is never carried over by itself)")
        return 0
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.settings.env import get_settings
    from ragtopics.storage.metadata import MetadataStore

    store = MetadataStore(get_settings().effective_database_url)
    print(f"metadata database at revision {migrate.schema_revision(store.engine)} (newest: {migrate.head_revision()})")
    return 0


def _cmd_graph(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.graph.report import entity_info, graph_stats
    from ragtopics.runtime import get_runtime
    from ragtopics.topics.topics import get_topic

    if args.edges is not None and args.import_file is None:
        raise RagTopicsError("--edges goes with --import (a CSV nodes file)")
    if (args.from_falkordb is None) != (args.graph_name is None):
        raise RagTopicsError("--from-falkordb URL and --graph NAME go together")
    correction = _graph_correction(args)
    rt = get_runtime()
    rt.check_store()
    topic = get_topic(rt, args.topic)
    shown: Any
    if args.import_file is not None or args.from_falkordb is not None:
        shown = _graph_ingestion(rt, topic, args)
    elif args.corrections:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.graph.corrections import list_corrections

        shown = [c.as_dict() for c in list_corrections(rt, topic.id)]
    elif correction is not None:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.graph.corrections import correct

        shown = correct(rt, topic, correction[0], correction[1], correction[2] or "").as_dict()
    else:
        shown = graph_stats(rt, topic) if args.stats else entity_info(rt, topic, args.entity)
    print(json.dumps(shown, indent=2, ensure_ascii=False, default=str))
    return 0


#: Each correction option of ``graph``: (its correction kind, the option that gives its value, that option's name).
_CORRECTIONS = {
    "merge": ("merge", "into", "--into"),
    "split": ("split", "split_from", "--from"),
    "rename": ("rename", "to", "--to"),
    "retype": ("retype", "new_type", "--type"),
    "delete_entity": ("delete", None, None),
}


def _graph_correction(args) -> tuple[str, str, str | None] | None:
    """``(kind, name, value)`` of the correction the options ask for, or None; a value option without its
    correction, or a correction without its value, is refused."""
    asked = None
    for option, (kind, value_option, flag) in _CORRECTIONS.items():
        name, value = getattr(args, option), getattr(args, value_option) if value_option else None
        if name is not None:
            if value_option and value is None:
                raise RagTopicsError(f"--{option.replace('_', '-')} needs {flag}")
            asked = (kind, name, value)
        elif value is not None:
            raise RagTopicsError(f"{flag} goes with --{option.replace('_', '-')}")
    return asked


def _graph_ingestion(rt, topic, args) -> dict:
    """Read ``--import`` (JSON, or CSV with ``--edges``) or ``--from-falkordb``, import it, return the report."""
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.graph import graph_ingestion as gi

    if args.from_falkordb is not None:
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.graph.databases import graph_database_url

        url = graph_database_url(rt, args.from_falkordb)
        return gi.ingest_graph(rt, topic, args.graph_name, gi.read_falkordb_graph(url, args.graph_name))
    path = args.import_file
    try:
        data = path.read_bytes()
        edges = args.edges.read_bytes() if args.edges is not None else None
    except OSError as exc:
        raise RagTopicsError(f"cannot read {exc.filename}: {exc.strerror}") from exc
    suffix = path.suffix.lower()
    if not (suffix == ".csv" or (suffix == ".json" and edges is None)):
        raise RagTopicsError(f"{path.name}: --import takes a .json file, or a .csv nodes file with an optional --edges .csv file")
    try:
        imported = gi.parse_nodes_edges_json(data) if suffix == ".json" else gi.parse_nodes_edges_csv(data, edges)
    except RefusedFileError as exc:
        raise RefusedFileError(f"{path.name} was refused: {exc}") from exc
    return gi.ingest_graph(rt, topic, path.name, imported)


def _cmd_graphdb(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.graph.databases import list_graph_databases, register_graph_database, remove_graph_database
    from ragtopics.runtime import get_runtime

    rt = get_runtime()
    if args.graphdb_command == "add":
        register_graph_database(rt, args.name, args.url)
        print(f"registered graph database {args.name!r}", file=sys.stderr)
    elif args.graphdb_command == "remove":
        remove_graph_database(rt, args.name)
        print(f"removed graph database {args.name!r}", file=sys.stderr)
    else:
        print(json.dumps(list_graph_databases(rt), indent=2))
    return 0


def _cmd_demo(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.demo import links
    from ragtopics.runtime import get_runtime

    rt = get_runtime()
    if args.demo_command == "create":
        host = "127.0.0.1" if rt.settings.host in ("0.0.0.0", "::") else rt.settings.host
        new = links.create_link(
            rt,
            args.topic,
            hours=args.hours,
            allow_sources=args.allow_sources,
            visitor_rate=args.rate,
            link_rate=args.link_rate,
            base_urls=[f"http://{host}:{rt.settings.port}/"],
        )
        if args.json:
            print(json.dumps(new.to_dict(), ensure_ascii=False))
            return 0
        for url in new.urls:
            print(url)
        print(
            f"demo link {new.link.id} for {new.link.topic_name!r}, until {new.link.expires_at:%Y-%m-%d %H:%M} UTC; "
            "the URL is shown this once",
            file=sys.stderr,
        )
        for note in new.notes:
            print(note, file=sys.stderr)
    elif args.demo_command == "list":
        listed = links.list_links(rt, args.topic)
        if args.json:
            print(json.dumps([k.to_dict() for k in listed], ensure_ascii=False))
        for k in [] if args.json else listed:
            print(
                f"{k.id}\t{k.topic_name}\t{k.state()}\tuntil {k.expires_at:%Y-%m-%d %H:%M}\t"
                f"sources {'yes' if k.allow_sources else 'no'}\t{k.visitor_rate}/min per visitor, {k.link_rate}/min per link"
                f"\t{k.turns} question(s)"
            )
    elif args.demo_command == "revoke":
        done = links.revoke_link(rt, args.id, delete_chats=args.delete_chats)
        deleted = f"; {done['deleted_turns']} question(s) of its visitors deleted" if args.delete_chats else ""
        print(f"revoked demo link {args.id}{deleted}", file=sys.stderr)
    else:
        turns = links.list_turns(rt, args.id)
        if args.json:
            print(json.dumps(turns, ensure_ascii=False))
        for t in [] if args.json else turns:
            print(
                f"{t['created_at'][:16]}  visitor {t['visitor']}\nQ: {t['question']}\nA: {t['answer']}"
                + (f"\n   sources: {', '.join(t['sources'])}" if t["sources"] else "")
                + "\n"
            )
    return 0


def _read_password() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != first:
            raise RagTopicsError("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\n")


def _cmd_user(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.access import users
    from ragtopics.runtime import get_runtime

    rt = get_runtime()
    if args.user_command == "list":
        for u in users.list_users(rt):
            print(f"{u.username}\t{u.role}\t{'DEV_REPORTING' if u.dev_reporting else ''}".rstrip())
    elif args.user_command == "add":
        created = users.create_user(rt, args.name, _read_password(), args.role, dev_reporting=args.dev_reporting)
        print(f"added {created.username} ({created.role})", file=sys.stderr)
    elif args.user_command == "set":
        password = _read_password() if args.password else None
        changed = users.update_user(rt, args.name, role=args.role, dev_reporting=args.dev_reporting, password=password)
        print(f"updated {changed.username} ({changed.role})", file=sys.stderr)
    elif args.user_command == "delete":
        if not args.yes:
            print(f"error: deleting {args.name!r} removes the user and their API tokens; add --yes to confirm", file=sys.stderr)
            return 2
        users.delete_user(rt, args.name)
        print(f"deleted {args.name}", file=sys.stderr)
    elif args.user_command == "unlock":
        # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
        from ragtopics.ui.web import unlock_logins

        print(f"unlocked {args.name} ({unlock_logins(rt, args.name)} counter(s) of failed logins removed)", file=sys.stderr)
    else:
        print(users.make_token(rt, args.name, args.label))
        print("the token is shown this once; programs send it as 'Authorization: Bearer <token>'", file=sys.stderr)
    return 0


def _cmd_communities(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.graph.refresh import enqueue_rebuild
    from ragtopics.jobs.queue import job_progress
    from ragtopics.runtime import get_runtime
    from ragtopics.topics.topics import get_topic

    rt = get_runtime()
    rt.check_store()
    topic = get_topic(rt, args.topic)
    job_id = enqueue_rebuild(rt, topic)
    print(f"community rebuild of Topic {topic.name!r} enqueued (job {job_id})", file=sys.stderr)
    if not args.wait:
        return 0
    while not (p := job_progress(rt, job_id)).is_final:
        if p.total:
            print(f"\r{p.phase} {p.done}/{p.total}", end="", file=sys.stderr)
        time.sleep(0.3)
    print(file=sys.stderr)
    if p.status != "finished":
        print(f"error: the rebuild failed: {p.error or p.status}", file=sys.stderr)
        return 1
    print(json.dumps(p.result, indent=2, default=str))
    return 0


def _cmd_eval(args) -> int:
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.quality import evaluate as ev

    if args.compare:
        a, b = (_summary_of(path) for path in args.compare)
        rows = ev.compare(a, b)
        questions_a, questions_b = (_questions_of(path) for path in args.compare)
        changes = None
        if questions_a is not None and questions_b is not None:
            changes = ev.changed_questions(questions_a, questions_b)
            if questions_a and not ev.shared_questions(questions_a, questions_b):
                print("warning: the two runs share no question; their metrics are not comparable", file=sys.stderr)
        if args.json:
            print(
                json.dumps(
                    {**{m: {"a": x, "b": y, "change": d} for m, x, y, d in rows}, "changed_questions": changes},
                    ensure_ascii=False,
                )
            )
        else:
            print(f"{'metric':<18} {'A':>9} {'B':>9} {'B - A':>9}")

            def cell(value: float | None, sign: str = "") -> str:
                return f"{'-':>9}" if value is None else f"{value:>{sign}9.3f}"

            for metric, x, y, change in rows:
                print(f"{metric:<18} {cell(x)} {cell(y)} {cell(change, '+')}")
            print()
            print(
                ev.format_changes(changes)
                if changes is not None
                else "(questions not compared: give both runs' --out folders, which hold questions.json)"
            )
        return 0
    if not args.topic or not args.questions:
        raise RagTopicsError("eval needs a Topic and a question file (or --compare A B)")
    # deferred: a command's modules load when it runs, so that `ragtopics --help` stays fast
    from ragtopics.runtime import get_runtime
    from ragtopics.settings.topic import parse_assignments
    from ragtopics.topics.topics import get_topic

    questions = ev.load_questions(args.questions)
    if args.out is not None:
        ev.check_out_folder(args.out)  # before the run, not after minutes of answers
    rt = get_runtime()
    rt.check_store()
    topic = ev.with_settings(get_topic(rt, args.topic), parse_assignments(args.assignments))

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():  # a counter in place; into a file (with the table, maybe), only the end
            print(f"\r{done}/{total} questions", end="" if done < total else "\n", file=sys.stderr, flush=True)
        elif done == total:
            print(f"{done}/{total} questions", file=sys.stderr, flush=True)

    summary, results = ev.evaluate(
        rt, topic, questions, route=args.route, retrieval_only=args.retrieval_only, judge=args.judge, progress=progress
    )
    summary = ev.run_summary(
        summary,
        topic=topic.name,
        route=args.route,
        retrieval_only=args.retrieval_only,
        settings_changed=parse_assignments(args.assignments),
    )
    print(json.dumps(summary, ensure_ascii=False) if args.json else ev.format_table(summary), flush=True)
    if summary.get("missing_gold_files"):
        print(
            f"warning: {len(summary['missing_gold_files'])} gold source(s) match no file of Topic {topic.name!r} "
            f"(a typo scores as a retrieval failure): {', '.join(summary['missing_gold_files'][:10])}",
            file=sys.stderr,
        )
    if args.out is not None:
        try:
            for path in ev.write_results(args.out, summary, results):
                print(f"wrote {path}", file=sys.stderr)
        except OSError as exc:
            print(f"error: the results above were not written to {args.out}: {exc}", file=sys.stderr)
            return 1
    return 0


def _questions_of(path: Path) -> list[dict] | None:
    """A run's per-question results (``questions.json`` beside its summary), or None when there is none."""
    file = (path if path.is_dir() else path.parent) / "questions.json"
    try:
        rows = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return rows if isinstance(rows, list) and all(isinstance(r, dict) and "question" in r for r in rows) else None


def _summary_of(path: Path) -> dict:
    """A run's ``summary.json`` (``path`` is it, or the run's ``--out`` folder).

    Raises:
        RagTopicsError: when it cannot be read or is not an evaluation summary (a question file, say).
    """
    file = path / "summary.json" if path.is_dir() else path
    try:
        summary = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RagTopicsError(f"cannot read the evaluation summary {file}: {exc}") from exc
    if not isinstance(summary, dict) or not isinstance(summary.get("n"), int):
        raise RagTopicsError(f"{file} is not an evaluation summary: give the --out folder of a run, or its summary.json")
    return summary


_COMMANDS = {
    "user": _cmd_user,
    "demo": _cmd_demo,
    "up": _cmd_up,
    "worker": _cmd_worker,
    "serve-model": _cmd_serve_model,
    "topic": _cmd_topic,
    "ingest": _cmd_ingest,
    "docs": _cmd_docs,
    "graph": _cmd_graph,
    "graphdb": _cmd_graphdb,
    "communities": _cmd_communities,
    "ask": _cmd_ask,
    "eval": _cmd_eval,
    "db": _cmd_db,
}

if __name__ == "__main__":
    sys.exit(main())
