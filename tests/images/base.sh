#!/usr/bin/env bash
# The tests' stand-in for python:3.12-slim, which cannot be pulled here: Debian's own Python and
# pip in a minbase root made by debootstrap from the archive apt already uses, imported into
# podman. It is only ever passed as the PYTHON_IMAGE build argument; the Dockerfiles' default
# stays the pinned python:3.12-slim digest. Tagged by this file's hash, so a changed recipe
# makes a new base and an unchanged one is made once per machine.
#   tests/images/base.sh TAG
set -euo pipefail
tag=$1
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
mirror=${mirror:-http://deb.debian.org/debian}
root=$(mktemp -d /var/tmp/dbworker-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
# python-is-python3: the Dockerfiles say `python`; python3-pip: their RUN lines say `pip`.
debootstrap --variant=minbase --include=python3,python3-pip,python-is-python3,ca-certificates \
  "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
# The image's pip installs into the system Python, as python:3.12-slim's does: drop Debian's
# "externally managed" marker (PEP 668) in this base only.
rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
# What no image needs: package lists and caches, documentation, man pages.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
tar -C "$root" --numeric-owner -c . | podman import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' - "$tag" >/dev/null
