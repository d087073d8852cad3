"""Desktop integration and packaging files. External validators run when installed
(desktop-file-validate, appstreamcli); without them the same files get a pure-Python check."""

import configparser
import json
import os
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from fp16studio import __version__, desktop, resource_paths
from fp16studio.desktop import APP_ID, desktop_entry, install_desktop, launch_command, png_size

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
RESOURCES = ROOT / "resources"
ENTRY = RESOURCES / "desktop" / f"{APP_ID}.desktop"
METAINFO = RESOURCES / "desktop" / f"{APP_ID}.metainfo.xml"
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
    # One source of truth: desktop.py renders it, resources/desktop/ keeps a copy for system
    # packages.
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
    # The frozen build has the folder where a wheel has it, the first place the finder looks.
    assert 'datas=[(str(ROOT / "resources"), "fp16studio/resources")]' in text
    assert resource_paths.CANDIDATES[0] == resource_paths.PACKAGE / "resources"


def test_the_checkout_reads_its_top_level_resources():
    # A source checkout and an editable install (CI's `pip install -e .`) read resources/ itself.
    assert resource_paths.resources_dir() == RESOURCES
    assert not (ROOT / "fp16studio" / "resources").exists()
    assert {"light.qss", "dark.qss", "icons", "app", "desktop"} <= {p.name for p in RESOURCES.iterdir()}
    assert resource_paths.stylesheet_file("dark").is_file() and resource_paths.icon_file("run").is_file()
    assert resource_paths.desktop_file(APP_ID, ".desktop") == ENTRY
    assert resource_paths.desktop_file(APP_ID, ".metainfo.xml") == METAINFO


def _of_the_checkout(folder: Path) -> bool:
    return folder.is_relative_to(ROOT) and "site-packages" not in folder.parts


def venv_seeing_this_environment(venv: Path) -> Path:
    """A venv of its own (its python returned) that also sees the packages this test runs
    with, after its own. Not `--system-site-packages`: inside a venv that means the base
    interpreter's packages, which need not hold PySide6 or torch. A .pth file lists the folders
    on this interpreter's path instead, the checkout's own left out (but a venv's packages kept
    where the venv lives inside the checkout, as the README's `python3 -m venv v` makes it); as
    plain lines, so the .pth files inside them (an editable install of this checkout) are not
    run there."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    own = subprocess.run([str(python), "-I", "-c", "import site; print(site.getsitepackages()[0])"],
                         capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    seen = [path for path in sys.path if path and Path(path).is_dir()
            and not _of_the_checkout(Path(path).resolve())]
    (Path(own) / "_this_environment.pth").write_text("\n".join(seen) + "\n")
    return python


# Runs in the venv the wheel is installed into, from a folder outside the checkout.
INSTALLED_CHECK = textwrap.dedent("""
    import json, sys
    import fp16studio
    from fp16studio import desktop, resource_paths
    from fp16studio.gui import theme
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication([])
    sheet = theme.stylesheet("dark")
    print(json.dumps({
        "package": fp16studio.__file__,
        "resources": str(resource_paths.resources_dir()),
        "files": sorted(str(p.relative_to(resource_paths.resources_dir()))
                        for p in resource_paths.resources_dir().rglob("*") if p.is_file()),
        "icons": [str(p) for p in resource_paths.icon_files()],
        "stylesheets": [str(resource_paths.stylesheet_file(s)) for s in ("light", "dark")],
        "stylesheet_urls": [u.split(")")[0] for u in sheet.split("url(")[1:]],
        "app_icons": [[str(p), size] for p, size in desktop.app_icons()],
        "desktop": [str(resource_paths.desktop_file(desktop.APP_ID, s))
                    for s in (".desktop", ".metainfo.xml")],
        "icon_renders": not theme.icon("run").pixmap(24, 24).isNull(),
        "app_icon_sizes": sorted(s.width() for s in theme.app_icon().availableSizes()),
    }))
""")


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from what an sdist holds, offline (no build isolation: this
    environment's setuptools, with bdist_wheel)."""
    pytest.importorskip("setuptools", minversion="70.1", reason="needs setuptools>=70.1 installed")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("fp16studio", "resources", "packaging"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path_factory.mktemp("wheels")
    proc = subprocess.run([*PIP, "wheel", str(source), "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(wheels)],
                          cwd=source, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = wheels.glob("fp16studio-*.whl")
    return built


def installed_in_a_venv(wheel: Path, folder: Path) -> Path:
    """The python of a fresh venv that has fp16studio from the wheel (the console commands
    too) and sees this environment's other packages; -I then keeps this checkout and PYTHONPATH
    off its path."""
    python = venv_seeing_this_environment(folder / "venv")
    proc = subprocess.run([*PIP, "--python", str(python), "install", "--no-deps", "--no-index",
                           "--ignore-installed", str(wheel)],
                          cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return python


def test_the_wheel_ships_the_resources_and_an_install_finds_them(wheel, tmp_path):
    """Install the wheel into a fresh venv, and find every resource there: inside the
    installed package, never in this checkout."""
    expected = sorted(str(p.relative_to(RESOURCES)) for p in RESOURCES.rglob("*") if p.is_file())
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n.removeprefix("fp16studio/resources/") for n in names
                  if n.startswith("fp16studio/resources/")) == expected
    assert not [n for n in names if n.split("/")[0] in ("resources", "packaging")]

    python = installed_in_a_venv(wheel, tmp_path)
    venv = python.parent.parent
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run([str(python), "-I", "-c", INSTALLED_CHECK], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])

    package = Path(found["package"]).parent
    assert package.is_relative_to(venv), found["package"]
    resources = Path(found["resources"])
    assert resources == package / "resources"
    assert found["files"] == expected
    paths = [*found["icons"], *found["stylesheets"], *found["stylesheet_urls"], *found["desktop"],
             *(path for path, _ in found["app_icons"])]
    for path in paths:
        assert Path(path).is_relative_to(resources) and Path(path).is_file(), path
    assert {"run", "stop", "fix", "status-error"} <= {Path(p).stem for p in found["icons"]}
    assert found["stylesheet_urls"]
    assert {"16x16", "48x48", "256x256", "scalable"} <= {size for _, size in found["app_icons"]}
    assert found["icon_renders"]
    assert {16, 24, 32, 48, 64, 128, 256, 512} <= set(found["app_icon_sizes"])



# The tests that once took a global interpreter for granted: a venv made from inside a venv,
# and an error's wording that varies by the CPU's kernel path.
IN_A_VENV = ("tests/core/test_packaging.py::test_the_wheel_ships_the_resources_and_an_install_finds_them",
             "tests/core/test_provenance.py::test_half_inputs_from_the_default_dtype_against_a_float32_checkpoint")


def test_the_readmes_commands_work_in_a_venv(wheel, tmp_path):
    """CI's check that the project works inside a venv, as the README's user installs it: the
    console command on the demo, and a few of the tests, run there with fp16studio from the
    venv (not this checkout)."""
    python = installed_in_a_venv(wheel, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(python.parent / "fp16studio"), "diagnose", "demo:map-cast", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "dtype-mismatch" in {f["code"] for f in json.loads(done.stdout)["findings"]}
    where = subprocess.run([str(python), "-I", "-c", "import fp16studio; print(fp16studio.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(python.parent.parent), where.stdout + where.stderr
    tests = subprocess.run([str(python), "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
                            *(str(ROOT / test) for test in IN_A_VENV)],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert tests.returncode == 0 and f"{len(IN_A_VENV)} passed" in tests.stdout, tests.stdout + tests.stderr

# -- the frozen program: what the spec bundles, the smoke script, the window's libraries ----------

def analysis_of_the_spec(monkeypatch) -> dict:
    """Run packaging/fp16studio.spec with PyInstaller's objects stubbed: what it asks for."""
    import pkgutil
    import types

    import fp16studio

    def collect_submodules(package, filter=None):
        if package != "fp16studio":
            return []   # transformers' models: real ones only in a real build
        names = [package] + [m.name for m in pkgutil.walk_packages(fp16studio.__path__, "fp16studio.")]
        return [name for name in names if filter is None or filter(name)]

    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = collect_submodules
    for name in ("PyInstaller", "PyInstaller.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    seen = {}

    def record(kind):
        def call(*args, **kwargs):
            seen[kind] = (args, kwargs)
            return types.SimpleNamespace(pure=[], scripts=[], binaries=[], datas=[])
        return call

    spec = PACKAGING / "fp16studio.spec"
    exec(compile(spec.read_text(), str(spec), "exec"),
         {"SPECPATH": str(PACKAGING), **{k: record(k) for k in ("Analysis", "PYZ", "EXE", "COLLECT")}})
    return seen


def test_the_bundle_holds_the_trace_runner_and_fp16studios_sources(monkeypatch):
    (scripts,), analysis = analysis_of_the_spec(monkeypatch)["Analysis"]
    assert scripts == [str(ROOT / "fp16studio" / "__main__.py")]   # the entry that runs the runner
    # The runner and what it imports lazily, by name, in a child process: in the archive.
    assert {"fp16studio.core.script.runner", "fp16studio.core.script.entry",
            "fp16studio.core.script.evidence", "fp16studio.engine.server"} <= set(analysis["hiddenimports"])
    # And as source files beside it, for `trace --python` under the user's interpreter.
    assert analysis["module_collection_mode"] == {"fp16studio": "pyz+py"}


def test_the_smoke_script_checks_every_command():
    from fp16studio.cli.parser import build_parser

    script = PACKAGING / "smoke.sh"
    assert os.access(script, os.X_OK)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    commands = next(action for action in build_parser()._actions
                    if hasattr(action, "choices") and action.choices and "trace" in action.choices)
    for command in commands.choices:
        assert f'"$APP" {command}' in text, command
    for what in ('"$APP" --version', '"$APP" --install-desktop', '"$APP" trace --python',
                 "smoke_window.py", "QT_QPA_PLATFORM=offscreen"):
        assert what in text, what


def test_the_smoke_scripts_window_run_from_source(tmp_path):
    # What the smoke script runs inside the frozen program (a window Run and a traced script),
    # here with this Python: it follows the window's API as that changes.
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", FP16STUDIO_CONFIG_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, str(PACKAGING / "smoke_window.py")], env=env,
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "smoke-window: ok"
    assert "window: File → Trace Script (demo:map-cast): problems found ['dtype-mismatch'" in done.stdout


def test_the_frozen_programs_own_xcb_libraries_count(tmp_path):
    # PyInstaller collects the libraries Qt's xcb plugin links, and the plugin loads those
    # copies: in the frozen program they need not be installed on the system.
    from fp16studio.display import XCB_LIBRARIES, bundled_library, why_no_window

    def nothing_installed(name):
        return None

    def in_bundle(name):
        return bundled_library(name, str(tmp_path))

    for name in XCB_LIBRARIES:
        (tmp_path / f"lib{name}.so.0").write_bytes(b"")
    assert why_no_window({"DISPLAY": ":0"}, "linux", nothing_installed, in_bundle) is None
    (tmp_path / "libxcb-cursor.so.0").unlink()
    line = why_no_window({"DISPLAY": ":0"}, "linux", nothing_installed, in_bundle)
    assert "not installed: libxcb-cursor0 (" in line
    # Outside the frozen program nothing is bundled: the system's libraries decide.
    assert not bundled_library("xcb-icccm")
