"""Process settings: per-role endpoints from the environment and from `.env`."""

from __future__ import annotations

import pytest

from ragtopics.errors import ConfigurationError
from ragtopics.settings.env import ROLES, Settings


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A working directory with its own `.env` and no role variables in the environment."""
    for role in ROLES:
        for suffix in ("BASE_URL", "MODEL", "API_KEY", "SUPPORTS_TOOLS", "SUPPORTS_IMAGES"):
            monkeypatch.delenv(f"{role.upper()}_{suffix}", raising=False)
    for name in ("LLM_BASE_URL", "LLM_MODEL", "LLM_API_KEY", "LLM_SUPPORTS_TOOLS", "LLM_SUPPORTS_IMAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_role_overrides_in_dotenv_are_read(workdir):
    (workdir / ".env").write_text(
        "LLM_BASE_URL=http://llm:8000/v1\nLLM_MODEL=big\nLLM_API_KEY=k1\nLLM_SUPPORTS_TOOLS=true\n"
        "ROUTER_BASE_URL=http://router:9000/v1\nROUTER_MODEL=small\nROUTER_API_KEY=k2\n"
        "FOLLOW_UP_MODEL=medium\nDEDUPLICATION_BASE_URL=\n"
    )
    settings = Settings()
    router = settings.endpoint("router")
    assert (router.base_url, router.model, router.api_key, router.supports_tools) == (
        "http://router:9000/v1",
        "small",
        "k2",
        False,
    )
    follow_up = settings.endpoint("follow_up")  # a model name alone: another model on the Language Model's endpoint
    assert (follow_up.base_url, follow_up.model, follow_up.api_key, follow_up.supports_tools) == (
        "http://llm:8000/v1",
        "medium",
        "k1",
        True,
    )
    dedup = settings.endpoint("deduplication")  # an empty value is unset: inherits everything
    assert (dedup.base_url, dedup.model, dedup.supports_tools, dedup.is_local) == ("http://llm:8000/v1", "big", True, False)


def test_image_describer_with_its_own_vision_endpoint(workdir):
    (workdir / ".env").write_text(
        "IMAGE_DESCRIBER_BASE_URL=http://vision:8000/v1\nIMAGE_DESCRIBER_MODEL=qwen-vl\nIMAGE_DESCRIBER_SUPPORTS_IMAGES=true\n"
    )
    settings = Settings()
    vision = settings.endpoint("image_describer")
    assert (vision.model, vision.supports_images, vision.supports_tools, vision.is_local) == ("qwen-vl", True, False, False)
    assert not settings.endpoint("language_model").supports_images


def test_environment_wins_over_dotenv(workdir, monkeypatch):
    (workdir / ".env").write_text("ROUTER_BASE_URL=http://a/v1\nROUTER_MODEL=from-file\n")
    monkeypatch.setenv("ROUTER_MODEL", "from-env")
    assert Settings().endpoint("router").model == "from-env"


def test_role_url_without_model_is_a_clear_error(workdir):
    (workdir / ".env").write_text("GRAPH_EXTRACTION_BASE_URL=http://extract:8000/v1\n")
    with pytest.raises(ConfigurationError, match="GRAPH_EXTRACTION_BASE_URL is set but GRAPH_EXTRACTION_MODEL is not"):
        Settings()
    with pytest.raises(ConfigurationError, match="ROUTER_MODEL"):
        Settings(ROUTER_BASE_URL="http://r/v1", _env_file=None)


def test_roles_without_endpoint_inherit_the_bundled_model(workdir):
    settings = Settings(LLM_SUPPORTS_IMAGES=True, _env_file=None)
    for role in ROLES:
        endpoint = settings.endpoint(role)
        assert endpoint.is_bundled and endpoint.is_local and endpoint.supports_images, role
    assert settings.endpoint("embedding").is_local
    remote = Settings(LLM_BASE_URL="http://llm/v1", LLM_MODEL="big", _env_file=None)
    assert not remote.endpoint("router").is_local and not remote.endpoint("router").is_bundled


def test_keyword_construction_and_round_trip_by_alias(workdir):
    settings = Settings(ROUTER_BASE_URL="http://r/v1", ROUTER_MODEL="m", ROUTER_SUPPORTS_TOOLS=True, _env_file=None)
    again = Settings(**{**settings.model_dump(by_alias=True), "LLM_MAX_TOKENS": 64}, _env_file=None)
    assert again.endpoint("router").supports_tools and again.llm_max_tokens == 64
    with pytest.raises(ConfigurationError, match="unknown model role"):
        again.endpoint("summariser")
