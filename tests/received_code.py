"""A spec as received from someone else (not written by us), whose preprocess leaves a mark when
its file is executed: proof that code ran (CONTRACT §6)."""

import json
from pathlib import Path


def marking(version: str = "ran") -> str:
    """A preprocess file that writes `version` to ran.txt beside itself when it is executed."""
    return ("import pathlib\n"
            f"pathlib.Path(__file__).with_name('ran.txt').write_text({version!r})\n\n\n"
            "def fn(example):\n    return example\n")


def received_spec(demo_dir: Path, tmp_path: Path, version: str = "ran") -> Path:
    """received/spec.json with its preprocess received/pre.py (`marking(version)`)."""
    folder = tmp_path / "received"
    folder.mkdir()
    (folder / "pre.py").write_text(marking(version))
    path = folder / "spec.json"
    path.write_text(json.dumps({"model": str(demo_dir / "models/tiny-resnet"),
                                "dataset": str(demo_dir / "data/images"),
                                "preprocess": "pre.py:fn"}))
    return path
