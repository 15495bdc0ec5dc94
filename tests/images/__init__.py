"""The shipped images, built with podman and checked from outside: `make test-images` only.

The checks are ``check_*.py``, outside pytest's ``test_*.py`` pattern, so `make test` (and a
bare ``pytest``) never collects them; tests/images/run.sh names them on pytest's command line.
"""
