"""The engine tests skip as a whole (exit 77 for ctest) when their engine is not installed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_sessionfinish(session, exitstatus):
    rep = session.config.pluginmanager.get_plugin("terminalreporter")
    if (rep and exitstatus in (0, 5) and rep.stats.get("skipped") and not rep.stats.get("passed")
            and not rep.stats.get("failed")):
        session.exitstatus = 77
