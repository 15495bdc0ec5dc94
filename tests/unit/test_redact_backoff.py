"""The redaction helper and the backoff."""

from __future__ import annotations

from dbworker import redact
from dbworker.backoff import Backoff


def test_passwords_are_masked_in_urls_and_texts() -> None:
    url = "postgresql+psycopg://app:s3cr%40t@db:5432/prod"
    assert "s3cr" not in redact.safe_url(url)
    text = f'connection to {url} failed; password=hunter2 and "s3cr@t"'
    masked = redact.redact(text, redact.url_secrets(url))
    assert "s3cr" not in masked and "hunter2" not in masked


def test_describe_is_one_line() -> None:
    line = redact.describe(RuntimeError("first\nsecond"))
    assert line == "RuntimeError: first"


def test_backoff_doubles_to_the_ceiling_and_resets() -> None:
    b = Backoff(0.25, 1.0)
    assert [b.next() for _ in range(5)] == [0.25, 0.5, 1.0, 1.0, 1.0]
    b.reset()
    assert b.next() == 0.25
    j = Backoff(1.0, 1.0, jitter=0.5)
    assert all(0.5 <= j.next() <= 1.0 for _ in range(50))
