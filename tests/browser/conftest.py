"""Fixtures for the browser tests: the built memtrace and run helper of
tests/integration/conftest.py (re-exported here, since test_reports.py,
whose capture writer these tests use, imports them from 'conftest'), and
headless Chromium."""  # noqa: F821

import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INTEGRATION = os.path.join(ROOT, "tests", "integration")
ARTIFACTS = os.path.join(ROOT, "tests", "artifacts")
sys.path.insert(0, INTEGRATION)

_spec = importlib.util.spec_from_file_location("mt_integration_conftest",
                                               os.path.join(INTEGRATION, "conftest.py"))
_integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_integration)
# everything public, so that the integration tests' "from conftest import
# ..." also works when both suites run in one pytest session
globals().update({k: v for k, v in vars(_integration).items() if not k.startswith("_")})

import cdp  # noqa: E402


@pytest.fixture(scope="session")
def browser():
    if not cdp.find_chromium():
        pytest.skip("chromium is not installed (scripts/deps.sh installs it)")
    with cdp.Browser() as b:
        yield b
