"""The man pages in docs/man (scdoc sources) against what they describe: every key of docs/config.md is in
sluice.yaml(5) under its section and no key there is unknown to docs/config.md, every option of `sluice --help` is in
sluice(8), every command of sluicectl is in sluicectl(8), and each page renders with scdoc and groff without a
warning (when scdoc is installed: deploy/install-deps.sh installs it)."""

import re
import shutil
import subprocess

import pytest

from sluice_harness import ROOT, SLUICE

pytestmark = pytest.mark.release_pass_only

MAN = ROOT / "docs/man"
CONFIG_MD = ROOT / "docs/config.md"
PAGES = ["sluice.8", "sluicectl.8", "sluice.yaml.5"]

KEY_HEADING = re.compile(r"^#{2,4} `([a-z_]+)`")
TABLE_ROW = re.compile(r"^\|([^|]*)\|")
# Keys written in prose as `section[].key` (the "Neighbours" part of config.md).
NESTED_KEY = re.compile(r"`([a-z_]+)\[\]\.([a-z_]+)`")
BACKTICKED = re.compile(r"`([a-z_]+)`")


def config_md_keys():
    """(section, key) for every key docs/config.md documents; a section is named by its heading's key."""
    keys = set()
    section = None
    for line in CONFIG_MD.read_text().splitlines():
        if line.startswith("#"):
            heading = KEY_HEADING.match(line)
            section = heading.group(1) if heading else None
            if section:
                keys.add(("", section))
            continue
        keys.update(NESTED_KEY.findall(line))
        row = TABLE_ROW.match(line)
        if row and section and not set(row.group(1).strip()) <= set("-: "):
            keys.update((section, key) for key in BACKTICKED.findall(row.group(1)) if key != "key")
    return keys


def man_page_keys():
    """(section, key) for every term of sluice.yaml.5.scd: `## a.b` opens section b, `*key*` lines are its terms."""
    keys = set()
    section = None
    for line in (MAN / "sluice.yaml.5.scd").read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip().split(".")[-1]
            keys.add(("", section))
        elif line.startswith("# "):
            section = None
        elif section and line.startswith("*"):
            keys.update((section, key) for key in re.findall(r"\*([a-z_]+)\*", line))
    return keys


def test_config_md_is_parsed():
    keys = config_md_keys()
    # One key of each kind of place, so that a change of config.md's layout cannot make the check vacuous.
    assert {("", "eal"), ("dataplane", "ring_size"), ("rules", "tcp_flags"), ("health_check", "rise"),
            ("ports", "addresses"), ("forward", "next_hop"), ("bgp", "drain_seconds")} <= keys
    assert len(keys) > 90


def test_every_key_of_config_md_is_in_sluice_yaml_5():
    missing = sorted(config_md_keys() - man_page_keys())
    assert not missing, f"docs/config.md keys missing from docs/man/sluice.yaml.5.scd (section, key): {missing}"


def test_sluice_yaml_5_names_no_key_config_md_does_not_know():
    text = CONFIG_MD.read_text()
    unknown = sorted(key for _, key in man_page_keys() if not re.search(rf"\b{key}\b", text))
    assert not unknown, f"keys in sluice.yaml(5) that docs/config.md never mentions: {unknown}"


def test_sluice_8_names_every_option_of_the_binary():
    if not SLUICE.exists():
        pytest.skip(f"{SLUICE} not built")
    usage = subprocess.run([str(SLUICE), "--help"], capture_output=True, text=True, timeout=10).stdout
    options = set(re.findall(r"--[a-z-]+", usage))
    assert {"--config", "--check-config", "--version"} <= options, usage
    page = (MAN / "sluice.8.scd").read_text()
    assert not [o for o in options if f"*{o}*" not in page], usage


def test_sluicectl_8_names_every_command():
    usage = subprocess.run(["/usr/bin/python3", str(ROOT / "app/sluicectl/sluicectl"), "--help"],
                           capture_output=True, text=True, timeout=10).stdout
    choices = re.search(r"\{([a-z,]+)\}", usage)
    assert choices, usage
    page = (MAN / "sluicectl.8.scd").read_text()
    missing = [c for c in choices.group(1).split(",") if not re.search(rf"^\*{c}\*", page, re.M)]
    assert not missing, f"sluicectl commands missing from docs/man/sluicectl.8.scd: {missing}"


@pytest.mark.skipif(shutil.which("scdoc") is None, reason="scdoc not installed (deploy/install-deps.sh)")
@pytest.mark.parametrize("page", PAGES)
def test_page_renders_without_warnings(page, tmp_path):
    source = (MAN / f"{page}.scd").read_text()
    roff = subprocess.run(["scdoc"], input=source, capture_output=True, text=True, timeout=10)
    assert roff.returncode == 0, roff.stderr
    checked = subprocess.run(["groff", "-man", "-ww", "-z"], input=roff.stdout, capture_output=True, text=True,
                             timeout=10)
    assert checked.returncode == 0 and not checked.stderr, checked.stderr
    assert f".TH \"{page.rsplit('.', 1)[0]}\" \"{page.rsplit('.', 1)[1]}\"" in roff.stdout
