"""The Admin tab: LLM Configuration (each role's endpoint, editable, Test connection; shared prompts), Graph Databases, Users.

Only admins reach it (:data:`ragtopics.ui.web.ROLE_OF_PAGE`). API keys never leave the
server: the endpoints table and the edit form say only whether a role has one.
"""

from __future__ import annotations

import html
import time
from typing import Any

import gradio as gr

from ragtopics.access import users
from ragtopics.errors import RagTopicsError
from ragtopics.graph.databases import list_graph_databases, register_graph_database, remove_graph_database
from ragtopics.llm import endpoints
from ragtopics.runtime import Runtime
from ragtopics.settings.env import ROLES
from ragtopics.ui.prompts_tab import PROMPT_NAMES, prompt_text, save_prompt
from ragtopics.ui.web import acting_user

#: What Test connection asks a chat model.
TEST_PROMPT = "Reply with one word: ready"
USER_HEADERS = ["Username", "Role", "DEV_REPORTING", "API tokens"]
TOKEN_HEADERS = ["Id", "User", "Label", "Made", "Last used"]


def endpoints_table(rt: Runtime) -> list[list[str]]:
    """Role → endpoint rows: role, URL, model, API key set or not (never the key), tools, pictures, prices per 1M
    input / output tokens ("" when none entered), where it is set."""
    rows = []
    for role in (*ROLES, "embedding"):
        d = endpoints.describe(rt, role)
        rows.append(
            [
                role,
                d["base_url"] or "in-process",
                d["model"],
                d["api_key"],
                "yes" if d["supports_tools"] else "no",
                "yes" if d["supports_images"] else "no",
                _price(d.get("price_in_per_mtok")),
                _price(d.get("price_out_per_mtok")),
                d["source"],
            ]
        )
    return rows


def _price(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def price_form(rt: Runtime, role: str) -> tuple[str, str]:
    """The edit form's prices for a role: per 1M input and output tokens ("" when none entered)."""
    d = endpoints.describe(rt, role)
    return _price(d["price_in_per_mtok"]), _price(d["price_out_per_mtok"])


def endpoint_form(rt: Runtime, role: str) -> tuple:
    """The edit form's values for a role: URL, model, an empty key box (labelled with whether a key is set), flags."""
    d = endpoints.describe(rt, role)
    key_box = gr.Textbox(value="", label=f"API key (now: {d['api_key']}; empty keeps it)")
    return d["base_url"], d["model"], key_box, d["supports_tools"], d["supports_images"]


def change_endpoint(
    rt: Runtime,
    action: str,
    role: str,
    base_url: str,
    model: str,
    api_key: str,
    tools: bool,
    images: bool,
    price_in: str = "",
    price_out: str = "",
) -> str:
    """Save or reset a role's endpoint (``price_in``/``price_out``: per 1M input/output tokens, "" for none); returns
    the status line (errors name the field)."""
    who = acting_user()
    try:
        if action == "save":
            endpoints.save_endpoint(
                rt,
                role,
                base_url=base_url,
                model=model,
                api_key=api_key,
                supports_tools=bool(tools),
                supports_images=bool(images),
                by=who.username if who else "",
                price_in_per_mtok=price_in,
                price_out_per_mtok=price_out,
            )
            return f"Saved the **{role}** endpoint; it applies to the next model call (workers: their next job)."
        cleared = endpoints.clear_endpoint(rt, role)
    except RagTopicsError as exc:
        return f"**Not saved:** {html.escape(str(exc))}"
    return f"**{role}** uses the environment's endpoint again." if cleared else f"**{role}** had no endpoint set here."


def check_connection(rt: Runtime, role: str) -> str:
    """Make one real call to ``role``'s endpoint; returns a Markdown line with the reply or the error."""
    if role not in (*ROLES, "embedding"):
        return f"**Unknown role** {html.escape(str(role))}."
    endpoint = rt.settings.endpoint(role)
    where = f"`{endpoint.model}` at {endpoint.base_url or 'in-process'}"
    started = time.perf_counter()
    try:
        if role == "embedding":
            vectors = rt.gateway.embed([TEST_PROMPT], purpose="test connection")
            reply = f"a vector of {vectors.shape[1]} dimensions"
        else:
            answer = rt.gateway.chat(
                role, [{"role": "user", "content": TEST_PROMPT}], prompt_name="test_connection", max_tokens=16
            )
            reply = f"“{html.escape(answer.text.strip()[:200])}”"
    except RagTopicsError as exc:
        return f"❌ **{role}** ({html.escape(where)}) failed: {html.escape(str(exc))}"
    return f"✅ **{role}** ({html.escape(where)}) answered in {(time.perf_counter() - started) * 1000:.0f} ms: {reply}"


def graph_databases_table(rt: Runtime) -> list[list[str]]:
    """Rows of Admin → Graph Databases: name and URL (password hidden)."""
    return [[d["name"], d["url"]] for d in list_graph_databases(rt)]


def change_graph_databases(rt: Runtime, action: str, name: str, url: str) -> tuple[list[list[str]], str]:
    """Register (``add``) or remove a graph database; returns the new table and a status line."""
    name = (name or "").strip()
    try:
        if action == "add":
            register_graph_database(rt, name, (url or "").strip())
            message = f"Registered graph database **{name}**."
        else:
            remove_graph_database(rt, name)
            message = f"Removed graph database **{name}** (its graphs stay on that server)."
    except RagTopicsError as exc:
        message = f"**Not changed:** {exc}"
    return graph_databases_table(rt), message


def users_table(rt: Runtime) -> list[list]:
    """Rows of Admin → Users: name, role, DEV_REPORTING, number of API tokens."""
    tokens: dict[str, int] = {}
    for t in users.list_tokens(rt):
        tokens[t["username"]] = tokens.get(t["username"], 0) + 1
    return [[u.username, u.role, "yes" if u.dev_reporting else "no", tokens.get(u.username, 0)] for u in users.list_users(rt)]


def tokens_table(rt: Runtime) -> list[list]:
    """Rows of the API tokens list (never the tokens themselves)."""
    stamp = lambda t: t.strftime("%Y-%m-%d %H:%M") if t else "never"  # noqa: E731
    return [[t["id"], t["username"], t["label"], stamp(t["created_at"]), stamp(t["last_used_at"])] for t in users.list_tokens(rt)]


def change_user(rt: Runtime, action: str, username: str, password: str, role: str, dev_reporting: bool, confirm: str = "") -> str:
    """Add, update or delete a user; returns a Markdown status line (errors name the field)."""
    username = (username or "").strip()
    try:
        if action == "add":
            users.create_user(rt, username, password or "", role, dev_reporting=dev_reporting)
            return f"Added **{html.escape(username)}** ({role})."
        if action == "update":
            users.update_user(rt, username, role=role, dev_reporting=dev_reporting, password=password or None)
            return f"Updated **{html.escape(username)}**" + (" (new password)." if password else ".")
        if confirm.strip() != username:
            return f"**Not deleted:** type the username **{html.escape(username)}** in Confirm to delete it."
        users.delete_user(rt, username)
        return f"Deleted **{html.escape(username)}** and their API tokens."
    except RagTopicsError as exc:
        return f"**Not changed:** {html.escape(str(exc))}"


def new_token(rt: Runtime, username: str, label: str) -> tuple[str, str]:
    """Make an API token; returns ``(token, status)``: the token is shown this once."""
    try:
        token = users.make_token(rt, (username or "").strip(), label)
    except RagTopicsError as exc:
        return "", f"**No token made:** {html.escape(str(exc))}"
    return token, (
        f"API token for **{html.escape(username)}** made. Copy it now: it is not shown again. Programs send it "
        "as `Authorization: Bearer <token>`."
    )


def revoke(rt: Runtime, token_id) -> str:
    """Revoke an API token by its id; returns a status line."""
    try:
        users.revoke_token(rt, int(token_id))
    except (ValueError, TypeError):
        return "**Not revoked:** Token id must be a whole number from the list."
    except RagTopicsError as exc:
        return f"**Not revoked:** {html.escape(str(exc))}"
    return f"Revoked API token {int(token_id)}."


def build(rt: Runtime) -> dict:
    """Lay out the Admin tab; returns ``{"tab"}``."""
    private: dict[str, Any] = {"api_visibility": "private"}
    with gr.Tab("Admin", id="admin") as tab:
        with gr.Tab("LLM Configuration"):
            gr.Markdown(
                "Each role's OpenAI-compatible endpoint (set in `.env`, see `.env.example`; API keys stay on "
                "the server). *Test connection* makes one real call and shows the reply or the error."
            )
            table = gr.Dataframe(
                headers=[
                    "Role",
                    "Endpoint",
                    "Model",
                    "API key",
                    "Tools",
                    "Pictures",
                    "Price in / 1M",
                    "Price out / 1M",
                    "Set in",
                ],
                interactive=False,
                label="Model endpoints",
                elem_id="endpoints",
            )
            with gr.Row():
                role = gr.Dropdown([*ROLES, "embedding"], value=ROLES[0], label="Role", elem_id="test-role")
                test = gr.Button("Test connection", elem_id="test-connection")
            tested = gr.Markdown(elem_id="test-result")
            with gr.Accordion("Change this role's endpoint", open=False):
                with gr.Row():
                    url = gr.Textbox(label="Endpoint URL (OpenAI-compatible, …/v1)", elem_id="endpoint-url")
                    model = gr.Textbox(label="Model", elem_id="endpoint-model")
                    key = gr.Textbox(label="API key (empty keeps it)", type="password", elem_id="endpoint-key")
                with gr.Row():
                    tools = gr.Checkbox(label="Takes tools", elem_id="endpoint-tools")
                    images = gr.Checkbox(label="Takes pictures", elem_id="endpoint-images")
                    price_in = gr.Textbox(label="Price per 1M input tokens (empty: none)", elem_id="endpoint-price-in")
                    price_out = gr.Textbox(label="Price per 1M output tokens (empty: none)", elem_id="endpoint-price-out")
                    save = gr.Button("Save endpoint", variant="primary", elem_id="endpoint-save")
                    reset = gr.Button("Use the environment's", elem_id="endpoint-reset")
                saved = gr.Markdown(elem_id="endpoint-status")
            gr.Markdown("#### Shared prompts\nThe text every Topic uses unless its Prompts tab overrides it.")
            shared_name = gr.Dropdown(PROMPT_NAMES, value="system", label="Prompt")
            shared_text = gr.Textbox(lines=8, label="Shared text (empty + Save restores the built-in default)")
            shared_save = gr.Button("Save shared prompt", variant="primary")
            shared_status = gr.Markdown()
        with gr.Tab("Graph Databases"):
            gr.Markdown(
                "FalkorDB servers a GraphRAG Topic can keep its graph in (its Graph Database setting). "
                "`default` is the app's own Redis."
            )
            databases = gr.Dataframe(
                headers=["Name", "URL"], interactive=False, label="Registered graph databases", elem_id="graph-databases"
            )
            with gr.Row():
                db_name = gr.Textbox(label="Name", elem_id="graph-database-name")
                db_url = gr.Textbox(label="URL (redis://host:port)", elem_id="graph-database-url")
            with gr.Row():
                db_add = gr.Button("Register", elem_id="graph-database-add")
                db_remove = gr.Button("Remove", elem_id="graph-database-remove")
            db_status = gr.Markdown(elem_id="graph-database-status")
        with gr.Tab("Users"):
            gr.Markdown(
                "Roles: **viewer** chats; **operator** also manages Topics, uploads, prompts and QA; **admin** "
                "also reaches Admin. **DEV_REPORTING** opens DEV Reports (admins always have it)."
            )
            user_list = gr.Dataframe(headers=USER_HEADERS, interactive=False, label="Users", elem_id="users")
            with gr.Row():
                username = gr.Textbox(label="Username", elem_id="user-name")
                password = gr.Textbox(
                    label=f"Password (at least {users.MIN_PASSWORD_LENGTH} characters; empty on Update keeps it)",
                    type="password",
                    elem_id="user-password",
                )
                user_role = gr.Dropdown(list(users.ROLES), value="viewer", label="Role", elem_id="user-role")
                dev = gr.Checkbox(label="DEV_REPORTING", elem_id="user-dev")
            with gr.Row():
                add = gr.Button("Add user", variant="primary", elem_id="user-add")
                update = gr.Button("Update", elem_id="user-update")
                confirm = gr.Textbox(label="Confirm (type the username to delete)", elem_id="user-confirm")
                delete = gr.Button("Delete user", variant="stop", elem_id="user-delete")
            user_status = gr.Markdown(elem_id="user-status")
            gr.Markdown(
                "#### API tokens\nFor programs (MCP clients, `gradio_client`): each acts as its user, with that user's role."
            )
            with gr.Row():
                token_label = gr.Textbox(label="Label (what the token is for)", elem_id="token-label")
                make = gr.Button("Make API token for the user above", elem_id="token-make")
            token_out = gr.Textbox(label="New token (shown once)", interactive=False, elem_id="token-value")
            tokens = gr.Dataframe(headers=TOKEN_HEADERS, interactive=False, label="API tokens", elem_id="tokens")
            with gr.Row():
                token_id = gr.Number(label="Token id", precision=0, elem_id="token-id")
                revoke_button = gr.Button("Revoke", elem_id="token-revoke")

    form = [url, model, key, tools, images]
    prices = [price_in, price_out]

    def filled_form(r: str) -> tuple:
        return (*endpoint_form(rt, r), *price_form(rt, r)) if r in ROLES else (gr.skip(),) * (len(form) + len(prices))

    def refresh(current_role, prompt_name):
        filled = filled_form(current_role)
        return (
            endpoints_table(rt),
            *filled,
            prompt_text(rt, None, prompt_name or "system")[0],
            graph_databases_table(rt),
            users_table(rt),
            tokens_table(rt),
        )

    tab.select(refresh, [role, shared_name], [table, *form, *prices, shared_text, databases, user_list, tokens], **private)
    test.click(lambda r: check_connection(rt, r), role, tested, **private)
    role.change(filled_form, role, [*form, *prices], **private)
    for button, action in ((save, "save"), (reset, "reset")):
        button.click(lambda r, *f, a=action: change_endpoint(rt, a, r, *f), [role, *form, *prices], saved, **private).then(
            lambda r: (endpoints_table(rt), *filled_form(r)), role, [table, *form, *prices], **private
        )
    shared_name.change(lambda n: prompt_text(rt, None, n)[0], shared_name, shared_text, **private)
    shared_save.click(lambda n, x: save_prompt(rt, None, n, x), [shared_name, shared_text], shared_status, **private)
    db_add.click(lambda n, u: change_graph_databases(rt, "add", n, u), [db_name, db_url], [databases, db_status], **private)
    db_remove.click(lambda n: change_graph_databases(rt, "remove", n, ""), [db_name], [databases, db_status], **private)
    fields = [username, password, user_role, dev]
    after: dict[str, Any] = {
        "fn": lambda: (users_table(rt), tokens_table(rt), ""),
        "inputs": None,
        "outputs": [user_list, tokens, password],
    }
    add.click(lambda *a: change_user(rt, "add", *a), fields, user_status, **private).then(**after, **private)
    update.click(lambda *a: change_user(rt, "update", *a), fields, user_status, **private).then(**after, **private)
    delete.click(lambda *a: change_user(rt, "delete", *a), [*fields, confirm], user_status, **private).then(**after, **private)
    make.click(lambda user, label: new_token(rt, user, label), [username, token_label], [token_out, user_status], **private).then(
        **after, **private
    )
    revoke_button.click(lambda i: revoke(rt, i), token_id, user_status, **private).then(**after, **private)
    return {"tab": tab}
