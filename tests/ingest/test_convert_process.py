"""The converter process: results and errors cross the process boundary; overruns and crashes are really stopped.

These run standard-library functions in a real child process (no docling), so they
are fast; the docling conversions through the same machinery are in test_docling.py
and test_ocr.py.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ragtopics.errors import InvalidSettingError, ReadError
from ragtopics.ingest.convert_process import TERM_GRACE_S, ConverterProcess
from ragtopics.ingest.docling import parse_page_range


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def converter():
    process = ConverterProcess(name="test-converter", label="Test conversion", warm_up=functools.partial(time.sleep, 0))
    yield process
    process.stop()


def test_the_function_runs_in_one_long_lived_child(converter):
    first = converter.run(os.getpid, timeout_s=10, file_name="a.pdf")
    second = converter.run(os.getpid, timeout_s=10, file_name="b.pdf")
    assert first == second == converter.pid
    assert first != os.getpid()
    assert converter.run(sorted, [3, 1, 2], timeout_s=10, file_name="c.pdf") == [1, 2, 3]


def test_an_overrun_is_stopped_and_the_next_run_gets_a_new_child(converter):
    pid = converter.run(os.getpid, timeout_s=10, file_name="warm.pdf")
    started = time.monotonic()
    stopped = r"^slow\.pdf: Test conversion took longer than 1 s and was stopped \(its process was killed\)$"
    with pytest.raises(ReadError, match=stopped):
        converter.run(time.sleep, 30, timeout_s=1, file_name="slow.pdf")
    elapsed = time.monotonic() - started
    assert 1 <= elapsed < 1 + TERM_GRACE_S
    assert not is_running(pid)
    assert converter.pid is None
    replacement = converter.run(os.getpid, timeout_s=10, file_name="next.pdf")
    assert replacement != pid and is_running(replacement)


def test_start_up_and_warm_up_do_not_count_against_the_timeout():
    converter = ConverterProcess(name="test-converter", label="Test conversion", warm_up=functools.partial(time.sleep, 2))
    try:
        started = time.monotonic()
        assert converter.run(os.getpid, timeout_s=1, file_name="a.pdf") == converter.pid
        assert time.monotonic() - started >= 2
    finally:
        converter.stop()


def test_a_failing_warm_up_is_a_read_error_naming_the_cause():
    converter = ConverterProcess(name="test-converter", label="Test conversion", warm_up=functools.partial(int, "x"))
    with pytest.raises(ReadError, match=r"a\.pdf: the converter process could not start: ValueError: invalid literal"):
        converter.run(os.getpid, timeout_s=1, file_name="a.pdf")
    assert converter.pid is None


def test_an_error_in_the_child_comes_back_with_its_type_and_message(converter):
    with pytest.raises(InvalidSettingError, match=r"^Docling page range '0' is not like '2' or '1-3'") as caught:
        converter.run(parse_page_range, "0", timeout_s=10, file_name="a.pdf")
    assert any("in the converter process" in note and "parse_page_range" in note for note in caught.value.__notes__)
    with pytest.raises(ValueError, match="invalid literal for int"):
        converter.run(int, "x", timeout_s=10, file_name="a.pdf")
    assert converter.run(int, "42", timeout_s=10, file_name="a.pdf") == 42  # the child survived both


def test_a_result_that_does_not_pickle_is_a_read_error(converter):
    with pytest.raises(ReadError, match=r"the converter's result could not be sent back: cannot pickle '_thread.lock'"):
        converter.run(threading.Lock, timeout_s=10, file_name="a.pdf")
    assert converter.run(int, "7", timeout_s=10, file_name="a.pdf") == 7


def test_a_segfault_in_the_child_is_a_read_error_and_the_next_run_works(converter):
    pid = converter.run(os.getpid, timeout_s=10, file_name="warm.pdf")
    with pytest.raises(ReadError, match=r"^the converter process died \(signal 11, SIGSEGV\) while converting crash\.pdf$"):
        converter.run(ctypes.string_at, 0, timeout_s=10, file_name="crash.pdf")
    assert not is_running(pid)
    assert converter.run(int, "5", timeout_s=10, file_name="next.pdf") == 5


def test_a_child_killed_while_converting_is_named_as_such(converter):
    """SIGKILL is what the kernel's out-of-memory killer sends."""
    pid = converter.run(os.getpid, timeout_s=10, file_name="warm.pdf")
    killer = threading.Timer(0.5, os.kill, (pid, signal.SIGKILL))
    killer.start()
    with pytest.raises(
        ReadError,
        match=r"the converter process died \(signal 9, SIGKILL: killed, often by the kernel "
        r"when memory runs out\) while converting big\.pdf",
    ):
        converter.run(time.sleep, 30, timeout_s=20, file_name="big.pdf")
    killer.join()
    assert converter.run(int, "3", timeout_s=10, file_name="next.pdf") == 3


def test_a_child_that_died_while_idle_is_replaced(converter):
    pid = converter.run(os.getpid, timeout_s=10, file_name="warm.pdf")
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    replacement = converter.run(os.getpid, timeout_s=10, file_name="next.pdf")
    assert replacement != pid


def test_records_logged_in_the_child_are_logged_again_in_the_calling_thread(converter, caplog):
    child_logger = logging.getLogger("ragtopics.tests.child")
    with caplog.at_level(logging.INFO):
        converter.run(child_logger.warning, "page %s has %s", 2, "no text", timeout_s=10, file_name="a.pdf")
        converter.run(child_logger.info, "an info line", timeout_s=10, file_name="a.pdf")
    records = [r for r in caplog.records if r.name == "ragtopics.tests.child"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.WARNING, "page 2 has no text"),
        (logging.INFO, "an info line"),
    ]
    assert all(r.thread == threading.get_ident() for r in records)


def test_a_script_without_a_main_guard_can_convert(tmp_path):
    """multiprocessing's spawn would re-run such a script in the child; this child never imports __main__."""
    script = tmp_path / "convert_once.py"
    script.write_text(
        textwrap.dedent("""
        import functools, os, time
        from ragtopics.ingest.convert_process import ConverterProcess
        converter = ConverterProcess(name="c", label="Conversion", warm_up=functools.partial(time.sleep, 0))
        child = converter.run(os.getpid, timeout_s=10, file_name="a.pdf")
        print("child", child != os.getpid())
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "child True"
