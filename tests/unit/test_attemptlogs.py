"""The log records kept with an attempt (``dbworker.attemptlogs``): bounded, masked, as JSON."""

from __future__ import annotations

import json
import logging

from dbworker import attemptlogs


def _logger(capture: attemptlogs.Capture) -> logging.Logger:
    logger = logging.getLogger("tests.unit.attemptlogs")
    logger.handlers[:] = [capture]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger


def test_only_records_between_start_and_stop_are_kept_oldest_first() -> None:
    capture = attemptlogs.Capture()
    log = _logger(capture)
    log.info("before")
    assert capture.text() is None
    capture.start()
    log.info("one %s", "arg")
    log.debug("two")
    capture.stop()
    log.info("after")
    records = attemptlogs.decode(capture.text())
    assert [(r["level"], r["logger"], r["message"]) for r in records] == [
        ("INFO", "tests.unit.attemptlogs", "one arg"), ("DEBUG", "tests.unit.attemptlogs", "two")
    ]
    capture.start()  # the next attempt starts empty
    assert capture.text() is None


def test_the_newest_records_are_kept_and_a_first_record_says_how_many_went() -> None:
    capture = attemptlogs.Capture()
    log = _logger(capture)
    capture.start()
    for n in range(attemptlogs.RECORDS + 7):
        log.warning("record %d", n)
    records = attemptlogs.decode(capture.text())
    assert len(records) == attemptlogs.RECORDS + 1
    assert records[0]["logger"] == "dbworker" and records[0]["message"].startswith("7 earlier log record(s)")
    assert records[1]["message"] == "record 7" and records[-1]["message"] == f"record {attemptlogs.RECORDS + 6}"


def test_messages_are_cut_masked_and_the_whole_fits_the_column() -> None:
    capture = attemptlogs.Capture(secrets=("s3cr3t-token",))
    log = _logger(capture)
    capture.start()
    log.error("connect postgresql://bob:hunter22@db/x with s3cr3t-token")
    for _ in range(30):
        log.error("é" * 5_000)  # each cut to MESSAGE_CHARS; 30 of them exceed TOTAL_CHARS
    text = capture.text()
    assert text is not None and len(text) <= attemptlogs.TOTAL_CHARS
    records = attemptlogs.decode(text)
    assert "hunter22" not in text and "s3cr3t-token" not in text
    assert all(len(r["message"]) <= attemptlogs.MESSAGE_CHARS for r in records)
    assert records[0]["message"].startswith(f"{31 - (len(records) - 1)} earlier")  # the masked one went first
    assert records[-1]["message"].endswith("(truncated)")


def test_an_exception_and_bad_arguments_are_kept_as_text() -> None:
    capture = attemptlogs.Capture()
    log = _logger(capture)
    capture.start()
    try:
        raise KeyError("missing")
    except KeyError:
        log.exception("lookup failed")
    log.info("bad %d", "not a number")
    first, second = attemptlogs.decode(capture.text())
    assert first["message"].startswith("lookup failed\nTraceback") and "KeyError: 'missing'" in first["message"]
    assert second["message"] == "bad %d"


def test_decode_tolerates_what_it_did_not_write() -> None:
    assert attemptlogs.decode(None) == [] and attemptlogs.decode("not json") == []
    assert attemptlogs.decode(json.dumps({"a": 1})) == [] and attemptlogs.decode('[1, {"m": "x"}]') == [{"m": "x"}]
    assert attemptlogs.encode([]) is None


def test_each_task_inside_attempt_keeps_only_its_own_records() -> None:
    import asyncio

    capture = attemptlogs.Capture()
    log = _logger(capture)

    async def item(name: str) -> str | None:
        with capture.attempt() as records:
            for k in range(3):
                log.warning("%s %d", name, k)
                await asyncio.sleep(0)  # the other task logs in between
            await asyncio.to_thread(log.warning, "%s thread", name)  # copies the task's context
            return records.text()

    async def both() -> list[str | None]:
        return list(await asyncio.gather(item("a"), item("b")))

    for name, text in zip("ab", asyncio.run(both()), strict=True):
        assert [r["message"] for r in attemptlogs.decode(text)] == [f"{name} {k}" for k in range(3)] + [f"{name} thread"]
    log.warning("outside any attempt")
    assert capture.text() is None  # nor in the process-wide records (not started)
