#!/usr/bin/env bash
# `make test-images`: build the images this repository ships with podman and check them from
# outside (tests/images/check_*.py). Installs Debian's podman, runc and debootstrap when
# missing, makes the Debian base once per machine (tests/images/base.sh, tagged by its hash),
# then runs pytest on the checks, which build every Dockerfile on that base.
#   PY=.venv/bin/python bash tests/images/run.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
  echo "test-images: installing ${need[*]} from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

export CONTAINERS_CONF=$PWD/tests/images/containers.conf
base=localhost/dbworker-test-base:$(cat tests/images/base.sh | sha256sum | cut -c1-12)
if ! podman image exists "$base"; then
  echo "test-images: making the Debian base $base (once per machine)"
  start=$SECONDS
  bash tests/images/base.sh "$base"
  echo "test-images: base made in $((SECONDS - start)) s"
fi
export DBWORKER_TEST_IMAGE_BASE=$base
# The checks are named check_*.py, outside pytest's default test_*.py pattern, so `make test`
# never collects them; naming the files here collects them.
exec "$PY" -m pytest tests/images/check_*.py "$@"
