"""Rewrite the committed claim-path SQL (``python -m tests.sql.write``): changed, new and stale files.

Prints what changed; writes nothing when every file already matches.
"""

from __future__ import annotations

from tests.sql import samples


def main() -> int:
    wanted = samples.every_file()
    present = samples.committed()
    for name in sorted(set(present) - set(wanted)):
        (samples.DIRECTORY / name).unlink()
        print(f"removed {name}")
    for name, text in sorted(wanted.items()):
        if present.get(name) != text:
            (samples.DIRECTORY / name).write_text(text)
            print(f"{'updated' if name in present else 'wrote'} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
