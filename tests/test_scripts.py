"""The device scripts name tests by node id; a renamed test must not drop out of them unnoticed.

``scripts/sanitize.sh`` runs compute-sanitizer over a list of GPU tests. pytest given a node id that
no longer exists collects nothing and exits with an error, so on a GPU machine that whole sanitizer
pass would check nothing. Collection needs no GPU, so CI catches the stale name instead.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def sanitize_test_ids() -> list[str]:
    """The entries of the ``TESTS=( ... )`` array in scripts/sanitize.sh."""
    text = (ROOT / "scripts" / "sanitize.sh").read_text()
    body = re.search(r"^TESTS=\((.*?)^\)", text, re.S | re.M)
    assert body, "scripts/sanitize.sh has no TESTS=( ... ) array"
    return re.findall(r'^\s*"([^"]+)"', body.group(1), re.M)


def test_sanitize_script_names_existing_tests():
    ids = sanitize_test_ids()
    assert len(ids) > 20, f"only {len(ids)} entries parsed from scripts/sanitize.sh TESTS"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ids],
        cwd=ROOT, capture_output=True, text=True,
    )
    missing = [line for line in (run.stdout + run.stderr).splitlines() if "not found" in line]
    assert run.returncode == 0 and not missing, (
        "scripts/sanitize.sh names tests that pytest cannot collect:\n"
        + "\n".join(missing or (run.stdout + run.stderr).splitlines()[-20:])
    )
