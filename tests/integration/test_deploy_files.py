"""The monitoring files in deploy/: Prometheus scrape config, alert rules, Grafana dashboard.

Always checked (no tools needed): they parse, every alert carries a severity, a summary and a description, every
metric they use is one docs/metrics.md documents, and docs/operations/monitoring.md says what to do about every alert.
With `promtool` on PATH (Debian's `prometheus` package) also: `promtool check rules`, `promtool check config`, the
dashboard's queries parse as PromQL, and each alert fires in a `promtool test rules` scenario built here."""

import json
import re
import shutil
import subprocess

import pytest
import yaml

from sluice_harness import ROOT

pytestmark = pytest.mark.release_pass_only

PROMETHEUS_YML = ROOT / "deploy/prometheus/prometheus.yml"
ALERTS_YML = ROOT / "deploy/prometheus/sluice-alerts.yml"
DASHBOARD_JSON = ROOT / "deploy/grafana/sluice.json"
METRICS_MD = ROOT / "docs/metrics.md"
OPERATIONS_MD = ROOT / "docs/operations/monitoring.md"

METRIC_NAME = re.compile(r"sluice_[a-z_]+")
SEVERITIES = {"critical", "warning", "info"}
# Grafana's variables, replaced by something PromQL accepts before promtool sees a dashboard query.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$instance": ".*",
                     "$port": ".*", "$lcore": ".*"}

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install --no-install-recommends prometheus)")


def documented_metrics():
    names = set(METRIC_NAME.findall(METRICS_MD.read_text()))
    assert "sluice_drops_total" in names, "docs/metrics.md lists no metrics?"
    return names


def alert_rules():
    doc = yaml.safe_load(ALERTS_YML.read_text())
    rules = [rule for group in doc["groups"] for rule in group["rules"]]
    assert rules, "no rules in sluice-alerts.yml"
    return rules


def dashboard():
    return json.loads(DASHBOARD_JSON.read_text())


def all_panels(panels):
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def dashboard_queries():
    queries = [(panel["title"], target["expr"]) for panel in all_panels(dashboard()["panels"])
               for target in panel.get("targets", [])]
    queries += [(f"variable {v['name']}", v["definition"]) for v in dashboard()["templating"]["list"]
                if v["type"] == "query"]
    return queries


def undocumented(expr, documented):
    return sorted(set(METRIC_NAME.findall(expr)) - documented)


# --- always ---------------------------------------------------------------------------------------------------------

def test_prometheus_config_scrapes_sluice_and_loads_the_rules():
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert "sluice" in jobs
    job = jobs["sluice"]
    assert job.get("scrape_interval", config["global"].get("scrape_interval")) == "5s"
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert targets == ["127.0.0.1:9469"]
    # The target is the daemon's default metrics address.
    assert yaml.safe_load((ROOT / "config/sluice.yaml").read_text())["metrics"]["listen"] == targets[0]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert config["rule_files"] == ["sluice-alerts.yml"]
    assert (PROMETHEUS_YML.parent / config["rule_files"][0]).is_file()


def test_every_alert_has_severity_summary_and_description():
    names = []
    for rule in alert_rules():
        assert "alert" in rule, f"a recording rule crept in: {rule}"
        names.append(rule["alert"])
        assert rule["expr"].strip(), rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, rule["alert"]
        annotations = rule.get("annotations", {})
        assert annotations.get("summary", "").strip() and annotations.get("description", "").strip(), rule["alert"]
    assert len(names) == len(set(names)), f"duplicate alert names: {names}"


def test_alerts_cover_what_an_operator_must_know():
    exprs = {rule["alert"]: rule["expr"] for rule in alert_rules()}
    joined = "\n".join(exprs.values())
    for needle in ('up{job="sluice"} == 0', "sluice_drops_total", "sluice_port_rx_missed_total",
                   "sluice_port_rx_nombuf_total", "sluice_config_last_reload_success == 0",
                   "rate(sluice_lcore_polls_total[1m]) == 0", "sluice_lcore_busy_seconds_total",
                   "sluice_ring_packets / sluice_ring_capacity", "sluice_mempool_mbufs_in_use / sluice_mempool_mbufs",
                   "sluice_port_link_up == 0", "sluice_conntrack_entries / sluice_conntrack_capacity",
                   "sluice_conntrack_ipv6_entries / sluice_conntrack_ipv6_capacity",
                   "sluice_kernel_routes_resyncs_total"):
        assert needle in joined, f"no alert uses {needle}"
    assert exprs["SluiceBackendDown"] == "sluice_backend_up == 0"


def test_alerts_use_only_documented_metrics():
    documented = documented_metrics()
    for rule in alert_rules():
        assert not undocumented(rule["expr"], documented), (rule["alert"], undocumented(rule["expr"], documented))
        for text in rule["annotations"].values():
            assert not undocumented(text, documented), (rule["alert"], undocumented(text, documented))


def test_dashboard_is_json_with_panels_and_variables():
    board = dashboard()
    assert 30 <= board["schemaVersion"] <= 40
    assert any(i["name"] == "DS_PROMETHEUS" and i["type"] == "datasource" for i in board["__inputs"])
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    for name, metric in (("port", "sluice_port_"), ("lcore", "sluice_lcore_")):
        assert variables[name]["type"] == "query" and variables[name]["definition"].startswith("label_values(" + metric)
    panels = [p for p in all_panels(board["panels"]) if p["type"] != "row"]
    assert len(panels) >= 10
    ids = [p["id"] for p in all_panels(board["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    titles = " | ".join(p["title"].lower() for p in panels)
    for subject in ("packets/s", "bits/s", "drops by reason", "lcore load", "poll rate", "ring fill", "mempool",
                    "reloads", "last reload", "running config", "link"):
        assert subject in titles, f"no panel about {subject}: {titles}"


def test_dashboard_uses_only_documented_metrics():
    documented = documented_metrics()
    queries = dashboard_queries()
    assert queries
    for where, expr in queries:
        assert METRIC_NAME.search(expr) or 'up{job="sluice"' in expr, (where, expr)
        assert not undocumented(expr, documented), (where, undocumented(expr, documented))


def test_operations_guide_covers_every_alert():
    guide = OPERATIONS_MD.read_text()
    for rule in alert_rules():
        assert rule["alert"] in guide, f"docs/operations/monitoring.md does not say what to do about {rule['alert']}"


# --- with promtool --------------------------------------------------------------------------------------------------

def promtool(*args, cwd=None):
    result = subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert result.returncode == 0, f"promtool {' '.join(map(str, args))}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@needs_promtool
def test_promtool_checks_rules_and_config():
    out = promtool("check", "rules", ALERTS_YML)
    assert f"SUCCESS: {len(alert_rules())} rules found" in out, out
    promtool("check", "config", PROMETHEUS_YML)


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path):
    # promtool has no query linter that works offline; a recording rule per query makes `check rules` parse them.
    rules = []
    for i, (where, expr) in enumerate(dashboard_queries()):
        if expr.startswith("label_values("):  # Grafana's own function: check the selector inside it
            expr = re.fullmatch(r"label_values\((.*),\s*\w+\)", expr).group(1)
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, (where, expr)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    promtool("check", "rules", path)


# Each alert, with input series that must make it fire (and the labels it fires with). Samples every 5 s, as scraped.
ALERT_SCENARIOS = {
    "SluiceBackendDown": ('sluice_backend_up{job="sluice", instance="gw", service="web", backend="10.1.0.12:8080"}', "0x40",
                          "1m", {"job": "sluice", "instance": "gw", "service": "web", "backend": "10.1.0.12:8080"}),
    "SluiceDown": ('up{job="sluice", instance="gw"}', "0x40", "2m", {"job": "sluice", "instance": "gw"}),
    "SluiceReloadFailed": ('sluice_config_last_reload_success{job="sluice", instance="gw"}', "0x40", "1m",
                           {"job": "sluice", "instance": "gw"}),
    "SluiceLcoreStalled": ('sluice_lcore_polls_total{job="sluice", instance="gw", lcore="1"}', "5000x40", "3m",
                           {"job": "sluice", "instance": "gw", "lcore": "1"}),
    "SluicePortLinkDown": ('sluice_port_link_up{job="sluice", instance="gw", port="wan"}', "0x40", "1m",
                           {"job": "sluice", "instance": "gw", "port": "wan"}),
    "SluicePortRxMissed": ('sluice_port_rx_missed_total{job="sluice", instance="gw", port="lan"}', "0+100x80", "5m",
                           {"instance": "gw", "port": "lan"}),
    "SluicePortRxNoMbuf": ('sluice_port_rx_nombuf_total{job="sluice", instance="gw", port="lan"}', "0+10x80", "5m",
                           {"instance": "gw", "port": "lan"}),
    "SluicePortErrors": ('sluice_port_rx_errors_total{job="sluice", instance="gw", port="lan"}', "0+1x200", "15m",
                         {"instance": "gw", "port": "lan"}),
    "SluiceDroppingForLackOfCapacity": ('sluice_drops_total{job="sluice", instance="gw", reason="ring_full"}',
                                        "0+50x80", "5m", {"instance": "gw", "reason": "ring_full"}),
    "SluiceSyncPeerDown": ('sluice_sync_peer_up{job="sluice", instance="gw", peer="10.9.0.2:7900"}', "0x40", "2m",
                           {"job": "sluice", "instance": "gw", "peer": "10.9.0.2:7900"}),
    "SluiceSyncForged": ('sluice_sync_forged_total{job="sluice", instance="gw"}', "0+1x80", "5m",
                         {"job": "sluice", "instance": "gw"}),
    "SluiceRestarted": ('sluice_lcore_polls_total{job="sluice", instance="gw", lcore="1"}', "0+1000x20 0+1000x20",
                        "3m", {"instance": "gw"}),
    "SluiceNextHopUnresolved": ('sluice_next_hops_unresolved{job="sluice", instance="gw"}', "1x40", "3m",
                                {"job": "sluice", "instance": "gw"}),
    # Three resyncs within 30 minutes (one every 10 minutes, 5 s samples).
    "SluiceKernelRoutesResyncing": ('sluice_kernel_routes_resyncs_total{job="sluice", instance="gw"}',
                                    "0x119 1x119 2x119 3x119", "31m", {"job": "sluice", "instance": "gw"}),
}


def scenario(alert, series, values, eval_time, labels, extra=()):
    return {"interval": "5s", "input_series": [{"series": series, "values": values}, *extra],
            "alert_rule_test": [{"eval_time": eval_time, "alertname": alert,
                                 "exp_alerts": [{"exp_labels": {**labels, "alertname": alert,
                                                                "severity": severity(alert)}}]}]}


def severity(alert):
    return next(r["labels"]["severity"] for r in alert_rules() if r["alert"] == alert)


@needs_promtool
def test_every_alert_fires_in_a_promtool_scenario(tmp_path):
    gw = 'job="sluice", instance="gw"'
    tests = [scenario(alert, *args) for alert, args in ALERT_SCENARIOS.items()]
    # 4.75 s busy per 5 s sample: 95% of the time.
    tests.append(scenario("SluiceLcoreSaturated", f'sluice_lcore_busy_seconds_total{{{gw}, lcore="1"}}', "0+4.75x200", "15m",
                          {"instance": "gw", "lcore": "1"}))
    tests.append(scenario("SluiceConntrackTableNearlyFull", f'sluice_conntrack_entries{{{gw}, worker="0"}}', "950000x100", "6m",
                          {"job": "sluice", "instance": "gw", "worker": "0"},
                          [{"series": f'sluice_conntrack_capacity{{{gw}, worker="0"}}', "values": "1000000x100"}]))
    tests.append(scenario("SluiceConntrackIpv6ShareNearlyFull", f'sluice_conntrack_ipv6_entries{{{gw}, worker="0"}}',
                          "120000x100", "6m", {"job": "sluice", "instance": "gw", "worker": "0"},
                          [{"series": f'sluice_conntrack_ipv6_capacity{{{gw}, worker="0"}}', "values": "125000x100"}]))
    tests.append(scenario("SluiceNatPortsNearlyExhausted",
                          f'sluice_nat_ports_in_use{{{gw}, service="web", backend="10.1.0.11:80", pool="10.1.0.100"}}',
                          "55000x100", "6m",
                          {"job": "sluice", "instance": "gw", "service": "web", "backend": "10.1.0.11:80",
                           "pool": "10.1.0.100"},
                          [{"series": f'sluice_nat_ports_capacity{{{gw}, service="web", backend="10.1.0.11:80", '
                                      'pool="10.1.0.100"}', "values": "64512x100"}]))
    tests.append(scenario("SluiceRingFilling", f'sluice_ring_packets{{{gw}, worker="0"}}', "3500x40", "2m",
                          {"job": "sluice", "instance": "gw", "worker": "0"},
                          [{"series": f'sluice_ring_capacity{{{gw}, worker="0"}}', "values": "4095x40"}]))
    tests.append(scenario("SluiceMempoolNearlyExhausted", f'sluice_mempool_mbufs_in_use{{{gw}, socket="0"}}', "16000x60",
                          "4m", {"job": "sluice", "instance": "gw", "socket": "0"},
                          [{"series": f'sluice_mempool_mbufs{{{gw}, socket="0"}}', "values": "16383x60"}]))
    tests.append(scenario("SluiceDropRateHigh", f'sluice_drops_total{{{gw}, reason="no_route"}}', "0+50x200", "15m",
                          {"instance": "gw", "reason": "no_route"},
                          [{"series": f'sluice_port_rx_packets_total{{{gw}, port="lan"}}', "values": "0+1000x200"}]))
    # A firewall denying half the traffic by policy is no fault, nor a LAN's group traffic, which sluice does not
    # route: SluiceDropRateHigh ignores both.
    tests.append({"interval": "5s", "input_series": [
        {"series": f'sluice_drops_total{{{gw}, reason="rule_deny"}}', "values": "0+500x200"},
        {"series": f'sluice_drops_total{{{gw}, reason="multicast_not_routed"}}', "values": "0+100x200"},
        {"series": f'sluice_port_rx_packets_total{{{gw}, port="lan"}}', "values": "0+1000x200"},
    ], "alert_rule_test": [{"eval_time": "15m", "alertname": "SluiceDropRateHigh", "exp_alerts": []}]})
    # And the quiet cases: healthy counters fire nothing.
    tests.append({"interval": "5s", "input_series": [
        {"series": f'up{{{gw}}}', "values": "1x80"},
        {"series": f'sluice_config_last_reload_success{{{gw}}}', "values": "1x80"},
        {"series": f'sluice_lcore_polls_total{{{gw}, lcore="1"}}', "values": "0+1000x80"},
        {"series": f'sluice_lcore_busy_seconds_total{{{gw}, lcore="1"}}', "values": "0+2x80"},
        {"series": f'sluice_port_link_up{{{gw}, port="lan"}}', "values": "1x80"},
        {"series": f'sluice_port_rx_missed_total{{{gw}, port="lan"}}', "values": "0x80"},
        {"series": f'sluice_port_rx_packets_total{{{gw}, port="lan"}}', "values": "0+1000x80"},
        {"series": f'sluice_drops_total{{{gw}, reason="ttl_expired"}}', "values": "0+1x80"},
        {"series": f'sluice_ring_packets{{{gw}, worker="0"}}', "values": "10x80"},
        {"series": f'sluice_ring_capacity{{{gw}, worker="0"}}', "values": "4095x80"},
        {"series": f'sluice_mempool_mbufs_in_use{{{gw}, socket="0"}}', "values": "2100x80"},
        {"series": f'sluice_mempool_mbufs{{{gw}, socket="0"}}', "values": "16383x80"},
        {"series": f'sluice_conntrack_entries{{{gw}, worker="0"}}', "values": "400000x80"},
        {"series": f'sluice_conntrack_capacity{{{gw}, worker="0"}}', "values": "1000000x80"},
        {"series": f'sluice_conntrack_ipv6_entries{{{gw}, worker="0"}}', "values": "100000x80"},
        {"series": f'sluice_conntrack_ipv6_capacity{{{gw}, worker="0"}}', "values": "125000x80"},
        {"series": f'sluice_backend_up{{{gw}, service="web", backend="10.1.0.11:8080"}}', "values": "1x80"},
        {"series": f'sluice_kernel_routes_resyncs_total{{{gw}}}', "values": "0x40 1x40"},  # one resync: normal
    ], "alert_rule_test": [{"eval_time": "6m", "alertname": r["alert"], "exp_alerts": []} for r in alert_rules()]})

    fired = {t["alert_rule_test"][0]["alertname"] for t in tests if t["alert_rule_test"][0]["exp_alerts"]}
    assert fired == {r["alert"] for r in alert_rules()}, "every alert needs a scenario that makes it fire"
    # promtool compares annotations word for word; the scenarios are about expressions and labels, so they run
    # against a copy of the rules without annotations.
    rules = yaml.safe_load(ALERTS_YML.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    path = tmp_path / "sluice-alerts.test.yml"
    path.write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "5s", "tests": tests},
                                   sort_keys=False))
    promtool("test", "rules", path)

