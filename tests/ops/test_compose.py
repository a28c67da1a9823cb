"""docker-compose.yml agrees with the product: commands, settings, and no disk shared by the console and the workers.

Docker does not run in the tests; the file is parsed (PyYAML, anchors and merge keys included) and its
``${VAR...}`` references are filled in the way Compose fills them.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from ragtopics.settings.env import Settings
from ragtopics.ui.cli import build_parser

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
#: What an operator puts in .env for the compose file.
DOTENV = {
    "POSTGRES_PASSWORD": "pg-secret",
    "S3_SECRET_ACCESS_KEY": "s3-secret-key",
    "ADMIN_USERNAME": "ada",
    "ADMIN_PASSWORD": "a long password",
    "LLM_BASE_URL": "http://models:8000/v1",
}
APP_SERVICES = ("app", "worker")
_REFERENCE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def interpolate(value, env: dict[str, str]):
    """``value`` with ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}`` filled from ``env``, as Compose does.

    Raises:
        KeyError: for a required variable (``:?``) that ``env`` lacks, with the file's message.
    """
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def fill(match: re.Match) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        if op and op.endswith("?"):
            raise KeyError(arg)
        return arg if op and op.endswith("-") else ""

    return _REFERENCE.sub(fill, value)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return interpolate(compose["services"], DOTENV)


def setting_names() -> set[str]:
    return {field.alias for field in Settings.model_fields.values() if field.alias}


def test_the_stores_and_the_app_services_are_all_there(compose):
    assert {"redis", "falkordb", "postgres", "minio", "app", "worker"} <= set(compose["services"])
    assert "redisearch.so" in compose["services"]["redis"]["command"]
    assert compose["services"]["falkordb"]["image"].startswith("falkordb/falkordb:")
    assert int(interpolate(compose["services"]["worker"]["deploy"]["replicas"], {})) >= 2


def test_app_and_worker_run_real_commands_with_real_settings(services):
    for name in APP_SERVICES:
        command = services[name]["command"]
        assert command[0] == "ragtopics"
        build_parser().parse_args(command[1:])  # exits (SystemExit) for a command or option the CLI lacks
        unknown = set(services[name]["environment"]) - setting_names()
        assert unknown == set(), f"{name} sets variables that are no setting: {sorted(unknown)}"
        env = {k: str(v) for k, v in services[name]["environment"].items()}
        settings = Settings(**env, _env_file=None)  # the values are valid, and the checks across settings pass
        assert settings.file_store == "s3" and settings.s3_access_key_id and settings.s3_secret_access_key


def test_a_required_secret_left_unset_stops_compose_with_its_message(compose):
    with pytest.raises(KeyError, match="set POSTGRES_PASSWORD in .env"):
        interpolate(compose["services"]["worker"]["environment"], {k: v for k, v in DOTENV.items() if k != "POSTGRES_PASSWORD"})


def test_console_and_workers_share_no_volume_and_workers_have_none(services):
    def mounts(service: dict) -> set[str]:
        return {(v.split(":")[0] if isinstance(v, str) else v["source"]) for v in service.get("volumes", [])}

    assert mounts(services["worker"]) == set()
    assert mounts(services["app"]) & mounts(services["worker"]) == set()
    others = [s for name, s in services.items() if name not in APP_SERVICES]
    assert all(mounts(services["app"]).isdisjoint(mounts(s)) for s in others)


def test_workers_point_at_the_object_store_and_postgresql_of_the_file(services):
    worker, app = services["worker"]["environment"], services["app"]["environment"]
    shared = (
        "REDIS_URL",
        "FALKORDB_URL",
        "DATABASE_URL",
        "FILE_STORE",
        "S3_ENDPOINT_URL",
        "S3_BUCKET",
        "S3_ACCESS_KEY_ID",
        "S3_SECRET_ACCESS_KEY",
        "S3_REGION",
    )
    assert {k: worker[k] for k in shared} == {k: app[k] for k in shared}

    database = urlsplit(worker["DATABASE_URL"])
    postgres = services["postgres"]
    assert database.scheme == "postgresql+psycopg" and database.hostname == "postgres" and database.port == 5432
    assert (database.username, database.password, database.path) == (
        postgres["environment"]["POSTGRES_USER"],
        postgres["environment"]["POSTGRES_PASSWORD"],
        "/" + postgres["environment"]["POSTGRES_DB"],
    )

    store = urlsplit(worker["S3_ENDPOINT_URL"])
    minio = services["minio"]
    assert worker["FILE_STORE"] == "s3" and store.hostname == "minio" and store.port == 9000
    assert "server" in minio["command"]
    assert (worker["S3_ACCESS_KEY_ID"], worker["S3_SECRET_ACCESS_KEY"]) == (
        minio["environment"]["MINIO_ROOT_USER"],
        minio["environment"]["MINIO_ROOT_PASSWORD"],
    )

    for variable, service in (("REDIS_URL", "redis"), ("FALKORDB_URL", "falkordb")):
        assert urlsplit(worker[variable]).hostname == service
    for name in APP_SERVICES:
        assert {"redis", "postgres", "minio"} <= set(services[name]["depends_on"])
