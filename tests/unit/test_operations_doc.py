"""docs/OPERATIONS.md, the fleet guide, held to the code: its per-role templates load as
conf.d fragments over the packaged config, and its table of alerts and panels names every
event type of docs/insights.md, every alert rule the package ships and only panels the
dashboard has."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from agent import config

pytestmark = pytest.mark.once  # text and config checks: neither the backend nor a library version decides them

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "OPERATIONS.md").read_text()
ROLE_FILE = "# /etc/swtel/conf.d/10-role.yaml"


def _role_templates() -> list[str]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC, re.S)
    return [b for b in blocks if b.startswith(ROLE_FILE)]


@pytest.mark.parametrize("index", range(3), ids=["leaf", "spine", "host"])
def test_each_role_template_loads_over_the_packaged_config(tmp_path, index):
    templates = _role_templates()
    assert len(templates) == 3, templates
    (tmp_path / "conf.d").mkdir()
    main = tmp_path / "swtel.yaml"
    main.write_text((ROOT / "packaging" / "swtel.yaml").read_text()
                    + f"control: {{socket: {tmp_path / 'swtel.sock'}, group: null}}\n")
    (tmp_path / "conf.d" / "10-role.yaml").write_text(templates[index])
    cfg = config.load(str(main))
    role = yaml.safe_load(templates[index])
    for source, keys in role["sources"].items():  # the fragment's values are the ones in force
        for key, value in keys.items():
            assert getattr(getattr(cfg.sources, source), key) == value, (source, key)


def _table_rows() -> list[list[str]]:
    section = DOC[DOC.index("## Alerts, the dashboard and the event types"):]
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| `") or line.startswith("| every")
            or line.startswith("| (the agent")]


def test_the_alert_table_names_every_event_type_every_shipped_rule_and_real_panels():
    insights = (ROOT / "docs" / "insights.md").read_text()
    table = insights[insights.index("## Event types"):insights.index("### Event fields")]
    types = set(re.findall(r"^\| `([a-z-]+)` \| `[a-z_]+` \|", table, re.M))
    rows = _table_rows()
    listed = {t for row in rows for t in re.findall(r"`([a-z-]+)`", row[0])}
    assert len(types) >= 12 and types <= listed, types - listed
    rules = yaml.safe_load((ROOT / "packaging" / "prometheus" / "swtel-rules.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    named = {a for row in rows for a in re.findall(r"`(Swtel\w+)`", row[1])}
    assert named == alerts, (alerts - named, named - alerts)
    panels = {p["title"] for p in json.loads((ROOT / "packaging" / "grafana" / "swtel-dashboard.json").read_text())
              ["panels"]}
    for row in rows:
        for name in (n.strip() for n in row[2].split(";")):
            if name != "—":
                assert any(p.startswith(name) for p in panels), (name, sorted(panels))
