"""After start-up, a process's loaded models are out of the garbage collector's full collections."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_objects_alive_after_start_are_frozen_and_full_collections_no_longer_walk_them():
    # In a process of its own: freezing is for the whole interpreter, and the test runner's must stay as it is.
    script = """
import gc, json
from ragtopics.graph.nlp import load_pipeline
from ragtopics.runtime import freeze_startup_heap
load_pipeline()  # a loaded model: many objects, as in the console and the worker after start
gc.collect()
walked = len(gc.get_objects(generation=2))
frozen = freeze_startup_heap()
print(json.dumps([walked, frozen, len(gc.get_objects(generation=2)), gc.get_freeze_count()]))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300)
    walked, frozen, walked_after, count = json.loads(done.stdout.strip().splitlines()[-1])
    assert walked > 50_000  # what a full collection walked before
    assert frozen == count >= walked
    assert walked_after < 100  # and after: the permanent generation is not walked
