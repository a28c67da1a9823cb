"""Model endpoints set in Admin → LLM Configuration: stored over the environment's, applied to the console at once
and to workers at their next job, keys never shown back, Test connection a real call."""

from __future__ import annotations

import pytest

from ragtopics.errors import ConfigurationError
from ragtopics.llm import endpoints
from ragtopics.runtime import Runtime
from ragtopics.storage.metadata import RoleEndpointRow
from ragtopics.ui.admin_tab import change_endpoint, check_connection, endpoint_form, endpoints_table
from tests.conftest import free_port


def test_a_role_endpoint_set_in_the_console_overrides_the_environment(rt, settings, scripted_llm):
    assert rt.settings.endpoint("router").base_url == scripted_llm.base_url
    endpoints.save_endpoint(
        rt,
        "router",
        base_url=f"http://127.0.0.1:{free_port()}/v1",
        model="router-large",
        api_key="sk-secret-1",
        supports_tools=True,
        supports_images=False,
        by="ada",
    )
    router = rt.gateway.endpoint("router")
    assert (router.model, router.api_key, router.supports_tools, router.is_bundled) == (
        "router-large",
        "sk-secret-1",
        True,
        False,
    )
    assert rt.settings.endpoint("language_model").base_url == scripted_llm.base_url  # other roles keep theirs
    with rt.metadata.session() as s:
        assert s.get(RoleEndpointRow, "router").updated_by == "ada"

    worker = Runtime(settings)  # another process: reads the stored endpoints when it starts and at each job
    assert worker.settings.endpoint("router").model == "router-large"
    endpoints.save_endpoint(
        rt,
        "router",
        base_url=scripted_llm.base_url,
        model="router-small",
        api_key="",
        supports_tools=False,
        supports_images=False,
    )
    assert worker.settings.endpoint("router").model == "router-large"
    endpoints.refresh(worker)
    assert worker.settings.endpoint("router").model == "router-small"
    assert worker.settings.endpoint("router").api_key == "sk-secret-1"  # an empty key box keeps the stored key

    assert endpoints.clear_endpoint(rt, "router") and rt.settings.endpoint("router").model == settings.llm_model
    assert not endpoints.clear_endpoint(rt, "router")


def test_keys_are_never_shown_and_bad_values_name_the_field(rt):
    endpoints.save_endpoint(
        rt,
        "judge",
        base_url="https://models.example/v1",
        model="judge-1",
        api_key="sk-very-secret",
        supports_tools=False,
        supports_images=False,
    )
    row = next(r for r in endpoints_table(rt) if r[0] == "judge")
    assert row[1:4] == ["https://models.example/v1", "judge-1", "set"] and row[-1] == "console"
    url, model, key_box, _tools, _images = endpoint_form(rt, "judge")
    assert (url, model, key_box.value) == ("https://models.example/v1", "judge-1", "") and "now: set" in key_box.label
    assert "sk-very-secret" not in repr(endpoints_table(rt)) + repr(endpoint_form(rt, "judge"))
    with pytest.raises(ConfigurationError, match="Endpoint URL: must be http"):
        endpoints.save_endpoint(
            rt, "judge", base_url="ftp://x", model="m", api_key="", supports_tools=False, supports_images=False
        )
    with pytest.raises(ConfigurationError, match="Model: name the model"):
        endpoints.save_endpoint(
            rt, "judge", base_url="http://x/v1", model=" ", api_key="", supports_tools=False, supports_images=False
        )
    assert change_endpoint(rt, "save", "embedding", "http://x/v1", "m", "", False, False).startswith(
        "**Not saved:** Role: must be one of"
    )
    with pytest.raises(ConfigurationError, match="no user, password or query in the URL"):
        endpoints.save_endpoint(
            rt,
            "judge",
            base_url="https://me:sk-1@models.example/v1?api-key=sk-2",
            model="m",
            api_key="",
            supports_tools=False,
            supports_images=False,
        )


def test_prices_per_million_tokens_are_stored_shown_and_checked(rt):
    from ragtopics.ui.admin_tab import price_form

    assert change_endpoint(
        rt, "save", "graph_extraction", "https://models.example/v1", "extractor", "", False, False, "0.5", "1.5"
    ).startswith("Saved")
    row = next(r for r in endpoints_table(rt) if r[0] == "graph_extraction")
    assert row[6:] == ["0.5", "1.5", "console"] and price_form(rt, "graph_extraction") == ("0.5", "1.5")
    assert endpoints.describe(rt, "graph_extraction")["price_in_per_mtok"] == 0.5
    assert change_endpoint(
        rt, "save", "graph_extraction", "https://models.example/v1", "extractor", "", False, False, "", ""
    ).startswith("Saved")
    assert price_form(rt, "graph_extraction") == ("", "")  # emptied: no price
    refused = change_endpoint(rt, "save", "judge", "https://models.example/v1", "j", "", False, False, "-1", "")
    assert refused == "**Not saved:** Price per 1M input tokens: must be 0 or more, got &#x27;-1&#x27;"
    with pytest.raises(ConfigurationError, match="Price per 1M output tokens: a number"):
        endpoints.save_endpoint(
            rt,
            "judge",
            base_url="http://x/v1",
            model="m",
            api_key="",
            supports_tools=False,
            supports_images=False,
            price_out_per_mtok="cheap",
        )


def test_test_connection_makes_a_real_call(rt, scripted_llm):
    scripted_llm.replies["test_connection"] = "ready"
    assert check_connection(rt, "language_model").startswith("✅ **language_model**") and "“ready”" in check_connection(
        rt, "language_model"
    )
    change_endpoint(rt, "save", "router", f"http://127.0.0.1:{free_port()}/v1", "nobody-home", "", False, False)
    failed = check_connection(rt, "router")
    assert failed.startswith("❌ **router** (`nobody-home` at http://127.0.0.1:") and "failed" in failed
    assert "a vector of 384 dimensions" in check_connection(rt, "embedding")


def test_llm_overrides_give_one_topic_its_own_model_per_role(rt, run_jobs, scripted_llm):
    from ragtopics.answer.turn import ask
    from ragtopics.errors import InvalidSettingError
    from ragtopics.topics.topics import create_topic, get_topic
    from ragtopics.ui.topics_tab import save_overrides
    from tests.ingest.test_ingest import upload

    big = create_topic(rt, "Big model")
    plain = create_topic(rt, "Plain")
    for topic in (big, plain):
        upload(rt, topic, "kettles.txt", b"Kettle K-2 switches itself off at 100 degrees.")
    run_jobs()
    status = save_overrides(rt, "Big model", 2, "language_model=large-model, router=small-model")
    assert "Memory 2" in status and "language\\_model=large\\-model" in status
    assert get_topic(rt, "Big model").settings.role_models == {"language_model": "large-model", "router": "small-model"}
    scripted_llm.replies["answer"] = "At 100 degrees [S1]."
    for topic in (get_topic(rt, "Big model"), plain):
        list(ask(rt, topic, "When does K-2 switch off?"))
    asked = [body["model"] for body in scripted_llm.prompts("answer")]
    assert asked == ["large-model", rt.settings.llm_model]  # only that Topic's calls change model
    assert (
        save_overrides(rt, "Big model", 2, "painter=x")
        .replace("\\", "")
        .startswith("**Not saved:** invalid Topic settings: role_models: unknown role(s) painter")
    )
    with pytest.raises(InvalidSettingError, match="role=model pairs"):
        from ragtopics.topics.topics import update_settings

        update_settings(rt, "Plain", {"role_models": "language_model"})
