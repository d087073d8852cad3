"""Desktop integration and packaging files. External validators run when installed
(desktop-file-validate, appstreamcli); without them the same files get a pure-Python check."""

import configparser
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fp16studio import __version__, desktop
from fp16studio.desktop import APP_ID, desktop_entry, install_desktop, launch_command, png_size

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
ENTRY = PACKAGING / f"{APP_ID}.desktop"
METAINFO = PACKAGING / f"{APP_ID}.metainfo.xml"
AWKWARD = ["/opt/my apps/py%thon$1\\bin", "-m", "fp16studio"]


def read_entry(text: str) -> dict:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # keys are case-sensitive
    parser.read_string(text)
    return dict(parser["Desktop Entry"])


def exec_args(value: str) -> list[str]:
    """Undo the Desktop Entry escapes: string escapes first, then Exec quoting, then %%."""
    value = value.replace("\\\\", "\0").replace("\\s", " ").replace("\\n", "\n")
    value = value.replace("\\t", "\t").replace("\\r", "\r").replace("\0", "\\")
    args, current, quoted, i = [], "", False, 0
    while i < len(value):
        ch = value[i]
        if quoted and ch == "\\":
            i += 1
            current += value[i]
        elif ch == '"':
            quoted = not quoted
        elif ch == " " and not quoted:
            args.append(current)
            current = ""
        else:
            current += ch
        i += 1
    return [arg.replace("%%", "%") for arg in args + [current]]


def validate_entry(path: Path):
    if shutil.which("desktop-file-validate"):
        proc = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0 and "error" not in proc.stdout, proc.stdout
    entry = read_entry(path.read_text())
    for key in ("Type", "Name", "Exec", "Icon", "Categories"):
        assert entry.get(key), key
    assert entry["Type"] == "Application" and entry["Icon"] == APP_ID
    assert entry["Categories"].endswith(";")


def test_packaged_entry_is_the_rendered_one():
    # One source of truth: desktop.py renders it, packaging/ keeps a copy for system packages.
    assert ENTRY.read_text() == desktop_entry()
    validate_entry(ENTRY)
    assert exec_args(read_entry(ENTRY.read_text())["Exec"]) == ["fp16studio", "gui", "%f"]


def test_awkward_paths_are_quoted_and_escaped(tmp_path):
    path = tmp_path / f"{APP_ID}.desktop"
    path.write_text(desktop_entry(AWKWARD))
    validate_entry(path)
    entry = read_entry(path.read_text())
    assert exec_args(entry["Exec"]) == [*AWKWARD, "gui", "%f"]
    assert entry["TryExec"].replace("\\\\", "\\") == AWKWARD[0]


def test_metainfo_matches_the_app():
    root = ET.parse(METAINFO).getroot()
    assert root.get("type") == "desktop-application"
    assert root.findtext("id") == APP_ID
    assert root.findtext("launchable") == ENTRY.name
    assert root.findtext("provides/binary") == "fp16studio"
    assert root.find("releases/release").get("version") == __version__
    if shutil.which("appstreamcli"):
        proc = subprocess.run(["appstreamcli", "validate", "--no-net", str(METAINFO)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_app_icons_cover_hicolor_sizes():
    icons = desktop.app_icons()
    sizes = {size for _, size in icons}
    assert {"scalable", "48x48", "256x256"} <= sizes
    for path, size in icons:
        if size != "scalable":
            width, height = png_size(path)
            assert width == height and width in (16, 22, 24, 32, 48, 64, 96, 128, 256, 512)


def test_install_desktop_from_the_command_line(tmp_path):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "share"))
    proc = subprocess.run([sys.executable, "-m", "fp16studio", "--install-desktop"], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    entry = tmp_path / "share" / "applications" / f"{APP_ID}.desktop"
    assert f"installed {entry}" in proc.stdout
    validate_entry(entry)
    program = exec_args(read_entry(entry.read_text())["Exec"])[0]
    assert Path(program).is_absolute() and os.access(program, os.X_OK)
    icons = tmp_path / "share" / "icons" / "hicolor"
    assert (icons / "scalable" / "apps" / f"{APP_ID}.svg").is_file()
    for png in icons.glob(f"*/apps/{APP_ID}.png"):
        width, height = png_size(png)
        assert png.parent.parent.name == f"{width}x{height}"
    assert (icons / "48x48" / "apps" / f"{APP_ID}.png").is_file()


def test_install_is_repeatable_and_honours_a_data_home(tmp_path):
    first = install_desktop(tmp_path)
    assert install_desktop(tmp_path) == first
    assert all(path.is_relative_to(tmp_path) for path in first)
    assert len(first) == 1 + len(desktop.app_icons())


def test_xdg_data_home_default(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", "relative/is/ignored")
    assert desktop.xdg_data_home() == tmp_path / ".local" / "share"


def test_launch_command(monkeypatch):
    monkeypatch.setattr(desktop.shutil, "which", lambda name: None)
    assert launch_command() == [sys.executable, "-m", "fp16studio"]
    monkeypatch.setattr(desktop.sys, "frozen", True, raising=False)
    assert launch_command() == [sys.executable]


def test_version_from_module_and_console_command():
    proc = subprocess.run([sys.executable, "-m", "fp16studio", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"fp16studio {__version__}")
    script = shutil.which("fp16studio")
    if script is None:
        pytest.skip("the console command is not installed (pip install -e .)")
    proc = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"fp16studio {__version__}")


def test_pyinstaller_spec_compiles_and_points_at_real_files():
    spec = PACKAGING / "fp16studio.spec"
    text = spec.read_text()
    compile(text, str(spec), "exec")
    assert (ROOT / "fp16studio" / "__main__.py").is_file()
    assert 'collect_data_files("fp16studio")' in text
