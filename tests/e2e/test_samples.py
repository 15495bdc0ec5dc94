"""The generated samples make a fair test: near-duplicates hash close, distinct pictures far.

No server and no child process; it guards the demo's "all groups found exactly" line
against a change in Pillow, ImageHash or the sample recipes.
"""

from __future__ import annotations

import io
import itertools

import imagehash
import PIL.Image
import pytest

from examples.imagededup import samples

MAX_DISTANCE = 10  # the API's default for a duplicate query


def phash(content: bytes) -> imagehash.ImageHash:
    with PIL.Image.open(io.BytesIO(content)) as picture:
        return imagehash.phash(picture)


@pytest.mark.parametrize("groups", [3, 10])
def test_groups_separate_at_the_default_distance(groups: int) -> None:
    hashes = [(s.group, phash(s.content)) for s in samples.generate(groups) if s.group is not None]
    for (group_a, hash_a), (group_b, hash_b) in itertools.combinations(hashes, 2):
        distance = hash_a - hash_b
        if group_a == group_b:
            assert distance <= MAX_DISTANCE, (
                f"near-duplicates of group {group_a} are {distance} apart"
            )
        else:
            assert distance > MAX_DISTANCE, (
                f"groups {group_a} and {group_b} are only {distance} apart"
            )


def test_samples_are_reproducible_and_varied() -> None:
    first, second = samples.generate(4), samples.generate(4)
    assert [s.content for s in first] == [s.content for s in second]
    variants = {s.variant for s in first}
    assert {"original", "corrupt"} <= variants and len(variants) >= 4
    assert sum(s.group is None for s in first) == 1


def test_the_corrupt_sample_does_not_decode_and_its_replacement_does() -> None:
    with pytest.raises(PIL.UnidentifiedImageError):
        phash(samples.corrupt().content)
    phash(samples.replacement().content)


def test_bad_arguments_name_the_fix() -> None:
    with pytest.raises(ValueError, match="groups must be at least 1"):
        samples.generate(0)
    with pytest.raises(ValueError, match="unknown variant 'rotated'; use one of"):
        samples.variant(samples.original(1), "rotated")
