"""The structure report (tools/structure.py) finds cycles, unexplained local imports and kind branches."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "structure.py"


@pytest.fixture(scope="module")
def structure():
    spec = importlib.util.spec_from_file_location("structure_tool", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["structure_tool"] = module
    spec.loader.exec_module(module)
    return module


def write(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = base / "ragtopics" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_between_subpackages_is_found_and_a_type_only_import_is_not(tmp_path, structure):
    write(
        tmp_path,
        {
            "__init__.py": "",
            "alpha/__init__.py": "",
            "alpha/a.py": "from ragtopics.beta.b import B\n",
            "beta/__init__.py": "",
            "beta/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ragtopics.gamma import g\nB = 1\n",
            "gamma/__init__.py": "",
            "gamma/g.py": "from ragtopics.alpha import a\n",
        },
    )
    assert structure.scan(tmp_path).cycles() == []  # beta -> gamma is for the type checker only
    (tmp_path / "ragtopics" / "beta" / "b2.py").write_text("from ragtopics.gamma import g\n")
    assert structure.scan(tmp_path).cycles() == [["alpha", "beta", "gamma"]]


def test_local_imports_need_a_reason_and_kind_branches_belong_to_the_kinds_package(tmp_path, structure):
    write(
        tmp_path,
        {
            "__init__.py": "",
            "answer/__init__.py": "",
            "answer/turn.py": (
                "def f(topic):\n"
                "    import json\n"
                "    # the CLI starts faster without it\n"
                "    import csv\n"
                "    import re  # optional dependency\n"
                "    return topic.kind == 'graphrag' or topic.kind in ('rag',)\n"
            ),
            "kinds/__init__.py": "",
            "kinds/graph.py": "def g(kind):\n    return kind == 'graphrag'\n",
        },
    )
    report = structure.scan(tmp_path)
    assert len(report.local_imports) == 3
    assert [site.split("  ")[0] for site in report.local_imports_unexplained] == ["ragtopics/answer/turn.py:2"]
    assert [site.split("  ")[0] for site in report.kind_branches] == ["ragtopics/answer/turn.py:6", "ragtopics/answer/turn.py:6"]


def test_a_run_of_imports_shares_the_comment_above_it_and_a_gap_ends_the_run(tmp_path, structure):
    write(
        tmp_path,
        {
            "__init__.py": "",
            "cli/__init__.py": "",
            "cli/main.py": (
                "def f():\n"
                "    # deferred: the CLI starts faster without them\n"
                "    import csv\n"
                "    from json import (\n"
                "        dumps,\n"
                "    )\n"
                "    import re\n"
                "\n"
                "    import shutil\n"
                "    return csv, dumps, re, shutil\n"
            ),
        },
    )
    report = structure.scan(tmp_path)
    assert len(report.local_imports) == 4
    assert [site.split("  ")[0] for site in report.local_imports_unexplained] == ["ragtopics/cli/main.py:9"]


def test_the_report_runs_on_the_product(structure, capsys):
    assert structure.main([]) == 0
    out = capsys.readouterr().out
    assert "import cycles between subpackages" in out and "imports inside functions" in out
    report = structure.scan()
    assert report.modules > 100


def test_the_product_has_no_import_cycle_and_no_unexplained_local_import(structure, capsys):
    report = structure.scan()
    assert report.cycles() == []
    assert report.local_imports_unexplained == []
    assert structure.main(["--check-imports"]) == 0


def test_check_imports_fails_on_a_cycle_but_not_on_a_kind_branch(tmp_path, structure, monkeypatch, capsys):
    write(
        tmp_path,
        {
            "__init__.py": "",
            "alpha/__init__.py": "",
            "alpha/a.py": "def f(kind):\n    return kind == 'rag'\n",
            "beta/__init__.py": "",
            "beta/b.py": "from ragtopics.alpha import a\n",
        },
    )
    monkeypatch.setattr(structure, "ROOT", tmp_path)
    assert structure.main(["--check-imports"]) == 0
    assert structure.main(["--check"]) == 1  # the kind branch
    (tmp_path / "ragtopics" / "alpha" / "a2.py").write_text("from ragtopics.beta import b\n")
    assert structure.main(["--check-imports"]) == 1
