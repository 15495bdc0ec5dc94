"""The example's own tables: uploaded images, their hashes, duplicate queries and matches.

These are ordinary SQLAlchemy models; dbworker adds its `hash_work` and `compare_work`
tables to the same MetaData when `app` registers the workers. An image row is the hash
worker's work and a duplicate-query row (with its paging state) the compare worker's.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import ForeignKey, Integer, LargeBinary, String
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# MySQL/MariaDB's plain BLOB stops at 64 KiB; uploads are bigger than that.
ImageBytes = LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")


def utcnow() -> dt.datetime:
    """Naive UTC, the convention dbworker's own timestamps follow."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Image(Base):
    """An uploaded file; the hash worker computes one `ImageHash` per row."""

    __tablename__ = "images"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    filename: Mapped[str] = mapped_column(String(255))
    content: Mapped[bytes] = mapped_column(ImageBytes, deferred=True)
    size_bytes: Mapped[int] = mapped_column(Integer)
    uploaded_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ImageHash(Base):
    """The perceptual hash of one image, written by the hash worker."""

    __tablename__ = "image_hashes"

    image_id: Mapped[int] = mapped_column(ForeignKey("images.id"), primary_key=True)
    phash: Mapped[str] = mapped_column(String(64))  # hex, as imagehash renders it
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)


class DuplicateQuery(Base):
    """ "Which images look like image N?", answered by the compare worker page by page.

    The candidates are the images with ids in (`start_after`, `upper_id`], fixed when the
    query is made; each handler call compares the page (`cursor`, `cursor + page_size`]
    and moves `cursor` on, so a crash or a redeploy resumes from the last committed page.
    """

    __tablename__ = "duplicate_queries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id"), index=True)
    max_distance: Mapped[int] = mapped_column(Integer)
    page_size: Mapped[int] = mapped_column(Integer)
    start_after: Mapped[int] = mapped_column(Integer)
    upper_id: Mapped[int] = mapped_column(Integer)
    cursor: Mapped[int] = mapped_column(Integer)
    pages_done: Mapped[int] = mapped_column(Integer, default=0)
    compared: Mapped[int] = mapped_column(Integer, default=0)
    skipped: Mapped[int] = mapped_column(Integer, default=0)  # candidates whose hash failed
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    @property
    def pages_total(self) -> int:
        span = max(self.upper_id - self.start_after, 0)
        return max(-(-span // self.page_size), 1)


class QueryDigest(Base):
    """What the async `digest` worker read back from the API about a finished query: how many
    matches it reports and how long the HTTP call took (a stand-in for a webhook delivery)."""

    __tablename__ = "query_digests"

    query_id: Mapped[int] = mapped_column(ForeignKey("duplicate_queries.id"), primary_key=True)
    matches: Mapped[int] = mapped_column(Integer)
    fetched_ms: Mapped[int] = mapped_column(Integer)


class DuplicateMatch(Base):
    """One image found within `max_distance` of a query's image."""

    __tablename__ = "duplicate_matches"

    query_id: Mapped[int] = mapped_column(ForeignKey("duplicate_queries.id"), primary_key=True)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id"), primary_key=True)
    distance: Mapped[int] = mapped_column(Integer)
