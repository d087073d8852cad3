"""Build hook, named in pyproject.toml ([tool.setuptools.cmdclass]): the repository's top-level
resources/ folder ships inside the package as fp16studio/resources.

A wheel (and so a plain `pip install`) gets the folder copied into the built package; a source
distribution gets the folder and this file, so a wheel built from it is the same. An editable
install copies nothing: fp16studio/resource_paths.py finds resources/ in the checkout.
"""

import os
from pathlib import Path

from setuptools.command.build_py import build_py

SOURCE = "resources"                             # relative to the project root (the build's cwd)
TARGET = os.path.join("fp16studio", "resources")  # relative to the built package tree


class BuildPy(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_tree(SOURCE, os.path.join(self.build_lib, TARGET))

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return outputs + [os.path.join(self.build_lib, TARGET, os.path.relpath(path, SOURCE))
                          for path in _files(SOURCE)]

    def get_source_files(self):
        # What `sdist` adds besides the package: the folder, and this hook that ships it.
        here = os.path.relpath(__file__)
        return [*super().get_source_files(), *_files(SOURCE), Path(here).as_posix()]


def _files(folder):
    return sorted(str(path) for path in Path(folder).rglob("*") if path.is_file())
