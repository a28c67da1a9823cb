"""Write the HotpotQA questions as a ``ragtopics eval`` question file.

Each item: the question, its answer, and its gold sources: the supporting-fact titles as the file
names a Topic holds when each passage was uploaded as ``<title>.txt`` (``make eval`` does that).

``python -m bench.hotpot_questions OUT.json`` (``RAGTOPICS_EVAL_DIR`` or ``shared/eval/hotpotqa``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.run import eval_dir, load_eval_data
from ragtopics.documents.uploads import clean_file_name


def eval_items(questions: list[dict]) -> list[dict]:
    """``ragtopics eval`` items for HotpotQA questions (``question``, ``answer``, ``supporting_facts``, ``type``)."""
    return [
        {
            "question": q["question"],
            "answer": q["answer"],
            "type": q.get("type", ""),
            "gold_sources": list(dict.fromkeys(clean_file_name(f"{title}.txt") for title, _ in q["supporting_facts"])),
        }
        for q in questions
    ]


def main(argv: list[str]) -> int:
    """Write the file named by the first argument."""
    if len(argv) != 1:
        print("usage: python -m bench.hotpot_questions OUT.json", file=sys.stderr)
        return 2
    items = eval_items(load_eval_data(eval_dir()).questions)
    Path(argv[0]).write_text(json.dumps(items, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"wrote {len(items)} questions to {argv[0]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
